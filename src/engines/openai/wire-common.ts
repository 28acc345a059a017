/**
 * What the two upstream wires (`chat-wire.ts`, `responses-wire.ts`) share: the decoder contract
 * the engine drives, the writer that keeps engine parts well formed, and small JSON helpers.
 */
import { randomUUID } from "node:crypto";
import type {
  EnginePart,
  EngineRequest,
  FinishReason,
  TokenLogprob,
  ToolKind,
  Usage,
} from "../../engine/types.js";
import { SparkError } from "../../protocol/errors.js";
import type { SseEvent } from "./sse-lines.js";

export type Json = Record<string, unknown>;

/** One upstream wire API: where requests go, their body, and the decoder of the streamed answer. */
export interface UpstreamWire {
  /** Appended to the base URL's path. */
  path: string;
  requestBody(request: EngineRequest): Json;
  decoder(request: EngineRequest): StreamDecoder;
}

/** Turns one response's SSE events into engine parts; upstream failures are thrown as SparkErrors. */
export interface StreamDecoder {
  event(event: SseEvent): EnginePart[];
  /** The parts that end a complete stream; throws when the upstream stopped before finishing. */
  end(): EnginePart[];
  /** The parts that end a cancelled stream. */
  cancel(): EnginePart[];
}

export function protocolError(message: string): SparkError {
  return new SparkError(
    502,
    "server_error",
    "upstream_protocol_error",
    `Malformed upstream stream: ${message}`,
  );
}

export function parseData(data: string): Json {
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch {
    throw protocolError(`invalid JSON in an event (${data.slice(0, 80)})`);
  }
  if (!isRecord(value)) throw protocolError("an event is not a JSON object");
  return value;
}

export function streamedError(error: unknown): SparkError {
  const message = isRecord(error) && typeof error.message === "string" ? error.message : "unknown error";
  return new SparkError(
    502,
    "server_error",
    "upstream_error",
    `The upstream failed mid-response: ${message}`,
  );
}

export function newCallId(): string {
  return `call_${randomUUID().replace(/-/g, "").slice(0, 24)}`;
}

/** Emits well-formed part triples: opens text lazily, closes it before a tool call starts. */
export class PartWriter {
  #parts: EnginePart[] = [];
  #texts = 0;
  #tools = 0;
  #openText: string | undefined;
  #openTools = new Set<string>();
  sawToolCall = false;
  usage: Usage = { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 };

  text(delta: string, logprobs?: TokenLogprob[]): void {
    if (delta === "" && !logprobs?.length) return;
    if (this.#openText === undefined) {
      this.#openText = `txt_${this.#texts++}`;
      this.#parts.push({ type: "text-start", id: this.#openText });
    }
    this.#parts.push(
      logprobs
        ? { type: "text-delta", id: this.#openText, delta, logprobs }
        : { type: "text-delta", id: this.#openText, delta },
    );
  }

  endText(): void {
    if (this.#openText === undefined) return;
    this.#parts.push({ type: "text-end", id: this.#openText });
    this.#openText = undefined;
  }

  startTool(kind: ToolKind, name: string, callId: string): string {
    this.endText();
    const id = `tool_${this.#tools++}`;
    this.#openTools.add(id);
    this.sawToolCall = true;
    this.#parts.push({ type: "tool-call-start", id, kind, name, callId });
    return id;
  }

  toolDelta(id: string, delta: string): void {
    if (delta !== "" && this.#openTools.has(id)) this.#parts.push({ type: "tool-call-delta", id, delta });
  }

  endTool(id: string): void {
    if (this.#openTools.delete(id)) this.#parts.push({ type: "tool-call-end", id });
  }

  closeAll(): void {
    this.endText();
    for (const id of [...this.#openTools]) this.endTool(id);
  }

  /** Closes whatever is open and appends the one `finish` part. */
  finish(reason: FinishReason): EnginePart[] {
    this.closeAll();
    this.#parts.push({ type: "finish", reason, usage: this.usage });
    return this.drain();
  }

  drain(): EnginePart[] {
    const parts = this.#parts;
    this.#parts = [];
    return parts;
  }
}

export function isRecord(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function count(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) ? value : 0;
}

/** The response format in the shape of either wire: `response_format` (chat) or `text.format` (responses). */
export function formatFields(request: EngineRequest, wire: "chat" | "responses"): Json {
  const format = request.responseFormat;
  if (!format) return {};
  if (format.type === "json_object")
    return wire === "chat"
      ? { response_format: { type: "json_object" } }
      : { text: { format: { type: "json_object" } } };
  const spec = {
    name: format.name,
    ...(format.description !== undefined ? { description: format.description } : {}),
    schema: format.schema,
    strict: format.strict,
  };
  return wire === "chat"
    ? { response_format: { type: "json_schema", json_schema: spec } }
    : { text: { format: { type: "json_schema", ...spec } } };
}

/** Log probabilities asked of the upstream in the shape of either wire. */
export function logprobsFields(request: EngineRequest, wire: "chat" | "responses"): Json {
  const logprobs = request.logprobs;
  if (!logprobs) return {};
  return wire === "chat"
    ? { logprobs: true, top_logprobs: logprobs.top }
    : { include: ["message.output_text.logprobs"], top_logprobs: logprobs.top };
}

/** An upstream's token log probabilities (either wire's shape), or undefined when it sent none. */
export function upstreamLogprobs(value: unknown): TokenLogprob[] | undefined {
  if (!Array.isArray(value) || value.length === 0) return undefined;
  const entry = (raw: unknown): { token: string; logprob: number; bytes: number[] } | undefined => {
    if (!isRecord(raw) || typeof raw.token !== "string" || typeof raw.logprob !== "number") return undefined;
    const bytes =
      Array.isArray(raw.bytes) && raw.bytes.every((byte) => typeof byte === "number")
        ? (raw.bytes as number[])
        : [...Buffer.from(raw.token, "utf8")];
    return { token: raw.token, logprob: raw.logprob, bytes };
  };
  const out: TokenLogprob[] = [];
  for (const raw of value) {
    const own = entry(raw);
    if (!own) continue;
    const tops = isRecord(raw) && Array.isArray(raw.top_logprobs) ? raw.top_logprobs : [];
    out.push({ ...own, top: tops.map(entry).filter((top) => top !== undefined) });
  }
  return out.length > 0 ? out : undefined;
}

export function samplingFields(request: EngineRequest, maxTokensField: string): Json {
  const fields: Json = {};
  if (request.maxOutputTokens !== undefined) fields[maxTokensField] = request.maxOutputTokens;
  if (request.temperature !== undefined) fields.temperature = request.temperature;
  if (request.topP !== undefined) fields.top_p = request.topP;
  // Passed on only when asked for: llama-server and vLLM take it; OpenAI would refuse an unknown field.
  if (request.ignoreEos) fields.ignore_eos = true;
  return fields;
}
