/**
 * The "openai" engine: forwards generation to an OpenAI-compatible upstream (vLLM, SGLang,
 * llama-server, Cerebras, OpenAI) over streaming Chat Completions or Responses, and translates the
 * upstream's SSE stream into engine parts.
 *
 * Custom (freeform) tools have no Chat Completions equivalent, so in "chat" mode they are sent as
 * function tools taking `{"input": string}` and their calls are converted back, the `input` string
 * being streamed out of the JSON arguments as they arrive.
 *
 * On abort the upstream request is destroyed at once (its connection closed) and the stream ends
 * with a `finish` part of reason "cancelled" carrying whatever usage was seen (usually zeros).
 *
 * What an upstream sends is read within bounds, so a broken or hostile one costs bounded memory and
 * linear work: an SSE line or event over 8 MiB ends the stream with `upstream_protocol_error`, an
 * error body is read up to 64 KiB and the model list up to 8 MiB, the rest cut with the connection.
 */
import { randomUUID } from "node:crypto";
import { Pool } from "undici";
import type { Dispatcher } from "undici";
import type {
  ConversationItem,
  Engine,
  EngineModel,
  EnginePart,
  EngineRequest,
  EngineStatus,
  FinishReason,
  ToolKind,
  ToolSpec,
  Usage,
} from "../../engine/types.js";
import { SparkError } from "../../protocol/errors.js";
import type { OpenAIErrorType } from "../../protocol/errors.js";
import { formatBytes, SseParser, SseTooLargeError } from "./sse-lines.js";
import type { SseEvent } from "./sse-lines.js";

export interface OpenAIEngineOptions {
  /** Base URL of the upstream API including its version prefix, e.g. `http://host:8000/v1`. */
  baseUrl: string;
  /** Sent as `Authorization: Bearer <apiKey>`; never included in any message. */
  apiKey?: string;
  /** Upstream wire API. Default "chat" (Chat Completions), the most widely implemented. */
  api?: "chat" | "responses";
  /**
   * Upstream model used for the alias "spark". Default: the first id listed by
   * `GET {baseUrl}/models` at start(), else "spark" is passed through unchanged.
   */
  model?: string;
  /** Maximum number of pooled keep-alive connections to the upstream. Default: unlimited. */
  connections?: number;
  /** Maximum wait in ms for the response headers and between two streamed body chunks. Default 300000. */
  timeoutMs?: number;
}

const ALIAS = "spark";
const DEFAULT_TIMEOUT_MS = 300_000;
/** Model discovery is best effort and must not hold start() for long. */
const DISCOVERY_TIMEOUT_MS = 10_000;
const MAX_UPSTREAM_MESSAGE = 500;
/** Most of a non-2xx body read for its error message; the rest is not waited for. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;
/** Largest non-streamed JSON body accepted (the model list). */
const MAX_JSON_BODY_BYTES = 8 * 1024 * 1024;

const TIMEOUT_CODES = new Set(["UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);
const CLOSED_CODES = new Set(["UND_ERR_DESTROYED", "UND_ERR_CLOSED"]);

export class OpenAIEngine implements Engine {
  readonly specificationVersion = "v1";
  readonly kind = "openai";
  readonly capabilities = { functionTools: true, customTools: true, prefixReuse: false, summaries: true };

  readonly #pool: Pool;
  readonly #api: "chat" | "responses";
  readonly #apiKey: string | undefined;
  readonly #configuredModel: string | undefined;
  readonly #timeoutMs: number;
  /** Path prefix and query of the base URL; request paths are appended to the prefix. */
  readonly #basePath: string;
  readonly #baseQuery: string;
  /** The base URL without credentials or query, safe to show. */
  readonly #displayUrl: string;
  #upstreamModels: EngineModel[] = [];
  #status: EngineStatus;
  #closed = false;

  constructor(options: OpenAIEngineOptions) {
    let url: URL;
    try {
      url = new URL(options.baseUrl);
    } catch {
      throw new SparkError(
        500,
        "server_error",
        "invalid_upstream_url",
        "The --upstream URL is not a valid URL.",
      );
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new SparkError(
        500,
        "server_error",
        "invalid_upstream_url",
        `The --upstream URL must use http or https, not ${url.protocol}`,
      );
    }
    this.#api = options.api ?? "chat";
    this.#apiKey = options.apiKey;
    this.#configuredModel = options.model;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#basePath = url.pathname.replace(/\/+$/, "");
    this.#baseQuery = url.search;
    this.#displayUrl = `${url.protocol}//${url.host}${this.#basePath}`;
    this.#status = { ready: false, detail: `discovering models at ${this.#displayUrl}` };
    this.#pool = new Pool(url.origin, {
      connections: options.connections ?? null,
      headersTimeout: this.#timeoutMs,
      bodyTimeout: this.#timeoutMs,
    });
  }

  async start(): Promise<void> {
    let detail: string;
    try {
      this.#upstreamModels = await this.#discoverModels();
      detail = `upstream ${this.#displayUrl}: ${this.#upstreamModels.length} model(s) discovered`;
    } catch (error) {
      const reason = error instanceof Error ? error.message : "unknown error";
      detail = `upstream ${this.#displayUrl}: model discovery failed (${reason})`;
    }
    this.#status = { ready: true, detail: `${detail}; "${ALIAS}" -> ${this.#defaultModel()}` };
  }

  status(): EngineStatus {
    return this.#status;
  }

  models(): readonly EngineModel[] {
    const models: EngineModel[] = [{ id: ALIAS, ownedBy: ALIAS }];
    const configured = this.#configuredModel;
    if (configured !== undefined && configured !== ALIAS && !this.#isUpstreamModel(configured)) {
      models.push({ id: configured, ownedBy: "upstream" });
    }
    for (const model of this.#upstreamModels) if (model.id !== ALIAS) models.push(model);
    return models;
  }

  resolveModel(name: string): string | undefined {
    if (name === ALIAS) return this.#defaultModel();
    if (name === this.#configuredModel || this.#isUpstreamModel(name)) return name;
    return undefined;
  }

  /** An estimate (about four characters per token): the upstream's tokenizer is not reachable. */
  async countTokens(text: string): Promise<number> {
    return Math.ceil(text.length / 4);
  }

  async *stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    const chat = this.#api === "chat";
    const decoder: StreamDecoder = chat ? new ChatDecoder(request.tools) : new ResponsesDecoder();
    if (signal.aborted) {
      yield* decoder.cancel();
      return;
    }
    const path = chat ? "/chat/completions" : "/responses";
    const payload = chat ? chatRequestBody(request) : responsesRequestBody(request);
    let response: Dispatcher.ResponseData;
    try {
      response = await this.#pool.request({
        method: "POST",
        path: this.#path(path),
        headers: this.#headers("text/event-stream", true),
        body: JSON.stringify(payload),
        signal,
      });
    } catch (error) {
      if (signal.aborted) {
        yield* decoder.cancel();
        return;
      }
      throw this.#transportError(error, false);
    }
    const body = response.body;
    try {
      if (response.statusCode < 200 || response.statusCode >= 300) {
        throw await this.#httpError(response, `POST ${path}`);
      }
      // The body is read to its end before `finish` is yielded: a consumer that stops at `finish`
      // then leaves a complete response behind, and the connection is reused.
      const sse = new SseParser();
      for await (const chunk of body as AsyncIterable<Uint8Array>) {
        for (const event of sse.push(chunk)) yield* decoder.event(event);
      }
      for (const event of sse.end()) yield* decoder.event(event);
      yield* decoder.end();
    } catch (error) {
      if (signal.aborted) {
        yield* decoder.cancel();
        return;
      }
      throw this.#transportError(error, true);
    } finally {
      // No-op after a complete response; otherwise closes the upstream connection, so a consumer
      // that stops iterating never leaves the upstream generating.
      body.destroy();
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#pool.destroy();
  }

  #defaultModel(): string {
    return this.#configuredModel ?? this.#upstreamModels[0]?.id ?? ALIAS;
  }

  #isUpstreamModel(id: string): boolean {
    return this.#upstreamModels.some((model) => model.id === id);
  }

  async #discoverModels(): Promise<EngineModel[]> {
    const timeout = Math.min(this.#timeoutMs, DISCOVERY_TIMEOUT_MS);
    let response: Dispatcher.ResponseData;
    try {
      response = await this.#pool.request({
        method: "GET",
        path: this.#path("/models"),
        headers: this.#headers("application/json", false),
        headersTimeout: timeout,
        bodyTimeout: timeout,
      });
    } catch (error) {
      throw this.#transportError(error, false);
    }
    if (response.statusCode !== 200) throw await this.#httpError(response, "GET /models");
    let list: unknown;
    try {
      const body = await readAtMost(response.body, MAX_JSON_BODY_BYTES);
      if (!body.complete)
        throw new Error(`the model list is larger than ${formatBytes(MAX_JSON_BODY_BYTES)}`);
      list = JSON.parse(body.text);
    } catch (error) {
      throw this.#transportError(error, true);
    }
    const data = isRecord(list) && Array.isArray(list.data) ? list.data : [];
    const models: EngineModel[] = [];
    for (const entry of data) {
      if (!isRecord(entry) || typeof entry.id !== "string") continue;
      models.push({
        id: entry.id,
        ownedBy: typeof entry.owned_by === "string" ? entry.owned_by : "upstream",
      });
    }
    return models;
  }

  #path(suffix: string): string {
    return `${this.#basePath}${suffix}${this.#baseQuery}`;
  }

  #headers(accept: string, json: boolean): Record<string, string> {
    const headers: Record<string, string> = { accept };
    if (json) headers["content-type"] = "application/json";
    if (this.#apiKey) headers.authorization = `Bearer ${this.#apiKey}`;
    return headers;
  }

  /** Upstream text shown to clients: bounded, and with the API key masked should the upstream echo it. */
  #clean(text: string): string {
    const short = text.length > MAX_UPSTREAM_MESSAGE ? `${text.slice(0, MAX_UPSTREAM_MESSAGE)}...` : text;
    return this.#apiKey ? short.split(this.#apiKey).join("***") : short;
  }

  async #httpError(response: Dispatcher.ResponseData, what: string): Promise<SparkError> {
    const status = response.statusCode;
    let text = "";
    try {
      text = (await readAtMost(response.body, MAX_ERROR_BODY_BYTES)).text;
    } catch {
      // The status alone still makes a useful error.
    }
    const upstream = parseUpstreamError(text);
    const message = upstream?.message ? this.#clean(upstream.message) : undefined;
    const where = `Upstream ${this.#displayUrl}`;
    if (status === 401 || status === 403) {
      return new SparkError(
        502,
        "server_error",
        "upstream_auth_failed",
        `${where} rejected the credentials (HTTP ${status}${message ? `: ${message}` : ""}). ` +
          "Check --upstream-api-key-env.",
      );
    }
    if (status >= 400 && status < 500 && upstream && message) {
      const retryAfter = response.headers["retry-after"];
      return new SparkError(
        status,
        errorTypeFor(status),
        upstream.code ?? "upstream_error",
        message,
        upstream.param ?? null,
        typeof retryAfter === "string" ? { "retry-after": retryAfter } : {},
      );
    }
    const hint = status === 404 ? " Check --upstream; the base URL usually ends in /v1." : "";
    return new SparkError(
      502,
      "server_error",
      "upstream_error",
      `${where} answered HTTP ${status} to ${what}${message ? `: ${message}` : "."}${hint}`,
    );
  }

  /** Maps anything thrown while talking to the upstream; SparkErrors pass through. */
  #transportError(error: unknown, midStream: boolean): SparkError {
    if (error instanceof SparkError) return error;
    if (error instanceof SseTooLargeError) return protocolError(error.message);
    const code = errorCode(error);
    if (code !== undefined && TIMEOUT_CODES.has(code)) {
      return new SparkError(
        504,
        "server_error",
        "upstream_timeout",
        `Upstream ${this.#displayUrl} did not respond within ${this.#timeoutMs} ms.`,
      );
    }
    if (code !== undefined && CLOSED_CODES.has(code)) {
      return SparkError.unavailable("The openai engine is closed.", "engine_closed");
    }
    const reason = code ?? (error instanceof Error ? this.#clean(error.message) : "unknown error");
    if (midStream) {
      return new SparkError(
        502,
        "server_error",
        "upstream_error",
        `The connection to upstream ${this.#displayUrl} failed mid-response (${reason}).`,
      );
    }
    return SparkError.unavailable(
      `Cannot reach the upstream at ${this.#displayUrl} (${reason}). Check --upstream.`,
      "upstream_unavailable",
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Request bodies

type Json = Record<string, unknown>;

function samplingFields(request: EngineRequest, maxTokensField: string): Json {
  const fields: Json = {};
  if (request.maxOutputTokens !== undefined) fields[maxTokensField] = request.maxOutputTokens;
  if (request.temperature !== undefined) fields.temperature = request.temperature;
  if (request.topP !== undefined) fields.top_p = request.topP;
  return fields;
}

/** Schema of the single string argument that carries a custom tool's freeform input over Chat Completions. */
const CUSTOM_INPUT_SCHEMA = {
  type: "object",
  properties: { input: { type: "string" } },
  required: ["input"],
};

function chatRequestBody(request: EngineRequest): Json {
  const body: Json = {
    model: request.model,
    messages: chatMessages(request.items),
    stream: true,
    stream_options: { include_usage: true },
    ...samplingFields(request, "max_tokens"),
  };
  // Tool fields are omitted without tools: some servers reject tool_choice or parallel_tool_calls alone.
  if (request.tools.length > 0) {
    body.tools = request.tools.map((tool) => ({
      type: "function",
      function: {
        name: tool.name,
        ...(tool.description !== undefined ? { description: tool.description } : {}),
        parameters:
          tool.kind === "custom"
            ? CUSTOM_INPUT_SCHEMA
            : (tool.parameters ?? { type: "object", properties: {} }),
      },
    }));
    const choice = request.toolChoice;
    body.tool_choice =
      typeof choice === "string" ? choice : { type: "function", function: { name: choice.name } };
    body.parallel_tool_calls = request.parallelToolCalls;
  }
  return body;
}

type ChatAssistantMessage = { role: "assistant"; content: string | null; tool_calls?: Json[] };

/** Consecutive assistant items (text and tool calls of one turn) merge into one assistant message. */
function chatMessages(items: readonly ConversationItem[]): Json[] {
  const messages: Json[] = [];
  let assistant: ChatAssistantMessage | undefined;
  for (const item of items) {
    if (item.type === "tool_call" || (item.type === "message" && item.role === "assistant")) {
      if (!assistant) {
        assistant = { role: "assistant", content: null };
        messages.push(assistant);
      }
      if (item.type === "message") {
        assistant.content = (assistant.content ?? "") + item.text;
      } else {
        const args = item.kind === "custom" ? JSON.stringify({ input: item.input }) : item.input;
        (assistant.tool_calls ??= []).push({
          id: item.callId,
          type: "function",
          function: { name: item.name, arguments: args },
        });
      }
      continue;
    }
    assistant = undefined;
    if (item.type === "tool_result") {
      messages.push({ role: "tool", tool_call_id: item.callId, content: item.output });
    } else {
      const role = item.role === "developer" ? "system" : item.role;
      messages.push({ role, content: item.text });
    }
  }
  return messages;
}

function responsesRequestBody(request: EngineRequest): Json {
  const body: Json = {
    model: request.model,
    input: request.items.map(responsesInputItem),
    stream: true,
    store: false,
    ...samplingFields(request, "max_output_tokens"),
  };
  if (request.tools.length > 0) {
    body.tools = request.tools.map(responsesTool);
    const choice = request.toolChoice;
    if (typeof choice === "string") {
      body.tool_choice = choice;
    } else {
      const kind = request.tools.find((tool) => tool.name === choice.name)?.kind ?? "function";
      body.tool_choice = { type: kind, name: choice.name };
    }
    body.parallel_tool_calls = request.parallelToolCalls;
  }
  return body;
}

function responsesInputItem(item: ConversationItem): Json {
  switch (item.type) {
    case "message":
      return { type: "message", role: item.role, content: item.text };
    case "tool_call":
      return item.kind === "function"
        ? { type: "function_call", call_id: item.callId, name: item.name, arguments: item.input }
        : { type: "custom_tool_call", call_id: item.callId, name: item.name, input: item.input };
    case "tool_result":
      return {
        type: item.kind === "function" ? "function_call_output" : "custom_tool_call_output",
        call_id: item.callId,
        output: item.output,
      };
  }
}

function responsesTool(tool: ToolSpec): Json {
  const description = tool.description !== undefined ? { description: tool.description } : {};
  if (tool.kind === "custom") {
    return {
      type: "custom",
      name: tool.name,
      ...description,
      ...(tool.format ? { format: tool.format } : {}),
    };
  }
  return {
    type: "function",
    name: tool.name,
    ...description,
    parameters: tool.parameters ?? { type: "object", properties: {} },
    strict: false,
  };
}

// ---------------------------------------------------------------------------------------------
// Stream decoding

interface StreamDecoder {
  event(event: SseEvent): EnginePart[];
  /** The parts that end a complete stream; throws when the upstream stopped before finishing. */
  end(): EnginePart[];
  /** The parts that end a cancelled stream. */
  cancel(): EnginePart[];
}

function protocolError(message: string): SparkError {
  return new SparkError(
    502,
    "server_error",
    "upstream_protocol_error",
    `Malformed upstream stream: ${message}`,
  );
}

function parseData(data: string): Json {
  let value: unknown;
  try {
    value = JSON.parse(data);
  } catch {
    throw protocolError(`invalid JSON in an event (${data.slice(0, 80)})`);
  }
  if (!isRecord(value)) throw protocolError("an event is not a JSON object");
  return value;
}

function streamedError(error: unknown): SparkError {
  const message = isRecord(error) && typeof error.message === "string" ? error.message : "unknown error";
  return new SparkError(
    502,
    "server_error",
    "upstream_error",
    `The upstream failed mid-response: ${message}`,
  );
}

function newCallId(): string {
  return `call_${randomUUID().replace(/-/g, "").slice(0, 24)}`;
}

/** Emits well-formed part triples: opens text lazily, closes it before a tool call starts. */
class PartWriter {
  #parts: EnginePart[] = [];
  #texts = 0;
  #tools = 0;
  #openText: string | undefined;
  #openTools = new Set<string>();
  sawToolCall = false;
  usage: Usage = { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 };

  text(delta: string): void {
    if (delta === "") return;
    if (this.#openText === undefined) {
      this.#openText = `txt_${this.#texts++}`;
      this.#parts.push({ type: "text-start", id: this.#openText });
    }
    this.#parts.push({ type: "text-delta", id: this.#openText, delta });
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

interface ChatToolCall {
  index: number;
  callId: string | undefined;
  name: string | undefined;
  /** Arguments received before the name made it possible to start the call. */
  pending: string;
  id: string | undefined;
  custom: CustomInputExtractor | undefined;
}

class ChatDecoder implements StreamDecoder {
  readonly #out = new PartWriter();
  readonly #customTools: Set<string>;
  readonly #calls = new Map<number, ChatToolCall>();
  #finishReason: string | undefined;
  #done = false;

  constructor(tools: readonly ToolSpec[]) {
    this.#customTools = new Set(tools.filter((tool) => tool.kind === "custom").map((tool) => tool.name));
  }

  event(event: SseEvent): EnginePart[] {
    if (this.#done) return [];
    if (event.data === "[DONE]") {
      this.#done = true;
      return [];
    }
    const chunk = parseData(event.data);
    if (chunk.error !== undefined) throw streamedError(chunk.error);
    if (isRecord(chunk.usage)) this.#out.usage = chatUsage(chunk.usage);
    const choices = Array.isArray(chunk.choices) ? chunk.choices : [];
    for (const choice of choices) {
      if (!isRecord(choice) || (typeof choice.index === "number" && choice.index !== 0)) continue;
      const delta = isRecord(choice.delta) ? choice.delta : {};
      if (typeof delta.content === "string") this.#out.text(delta.content);
      if (Array.isArray(delta.tool_calls)) {
        for (const call of delta.tool_calls) if (isRecord(call)) this.#toolCallDelta(call);
      }
      if (typeof choice.finish_reason === "string") {
        this.#finishReason = choice.finish_reason;
        this.#closeParts();
      }
    }
    return this.#out.drain();
  }

  end(): EnginePart[] {
    if (!this.#done && this.#finishReason === undefined) {
      throw protocolError("the stream ended before a finish_reason or [DONE]");
    }
    this.#closeParts();
    const reason: FinishReason =
      this.#finishReason === "length" ? "length" : this.#out.sawToolCall ? "tool_calls" : "stop";
    return this.#out.finish(reason);
  }

  cancel(): EnginePart[] {
    return this.#out.finish("cancelled");
  }

  #toolCallDelta(delta: Json): void {
    const index = typeof delta.index === "number" ? delta.index : 0;
    let call = this.#calls.get(index);
    if (!call) {
      call = { index, callId: undefined, name: undefined, pending: "", id: undefined, custom: undefined };
      this.#calls.set(index, call);
    }
    if (typeof delta.id === "string" && delta.id !== "") call.callId ??= delta.id;
    const fn = isRecord(delta.function) ? delta.function : {};
    // Some servers repeat the name in every chunk; the first one counts.
    if (typeof fn.name === "string" && fn.name !== "") call.name ??= fn.name;
    const args = typeof fn.arguments === "string" ? fn.arguments : "";
    if (call.id === undefined) {
      call.pending += args;
      if (call.name !== undefined) this.#startCall(call, call.name);
      return;
    }
    this.#feed(call, args);
  }

  #startCall(call: ChatToolCall, name: string): void {
    const custom = this.#customTools.has(name);
    call.id = this.#out.startTool(custom ? "custom" : "function", name, call.callId ?? newCallId());
    if (custom) call.custom = new CustomInputExtractor();
    const pending = call.pending;
    call.pending = "";
    this.#feed(call, pending);
  }

  #feed(call: ChatToolCall, args: string): void {
    if (call.id === undefined) return;
    this.#out.toolDelta(call.id, call.custom ? call.custom.push(args) : args);
  }

  #closeParts(): void {
    this.#out.endText();
    for (const call of this.#calls.values()) {
      if (call.id === undefined) {
        if (call.name === undefined) throw protocolError(`tool call ${call.index} has no function name`);
        this.#startCall(call, call.name);
      }
      if (call.id === undefined) continue;
      if (call.custom) this.#out.toolDelta(call.id, call.custom.finish());
      this.#out.endTool(call.id);
    }
    this.#calls.clear();
  }
}

function chatUsage(usage: Json): Usage {
  const details = isRecord(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  return {
    inputTokens: count(usage.prompt_tokens),
    cachedInputTokens: count(details.cached_tokens),
    outputTokens: count(usage.completion_tokens),
  };
}

/**
 * Streams the `input` string out of a custom tool call's JSON arguments (`{"input": "..."}`) while
 * they arrive. Arguments of another shape are resolved once complete: their `input` if they parse,
 * else the raw text (a model that ignored the schema).
 */
class CustomInputExtractor {
  static readonly #PREFIX = '{"input":"';
  #raw = "";
  /** Index in #raw of the next undecoded character of the input value, once the prefix matched. */
  #pos: number | undefined;
  #streamable = true;
  #closed = false;
  #emitted = "";

  push(fragment: string): string {
    this.#raw += fragment;
    if (this.#pos === undefined && this.#streamable) this.#matchPrefix();
    if (this.#pos === undefined || this.#closed) return "";
    const text = this.#decode();
    this.#emitted += text;
    return text;
  }

  /** The rest of the input not yet returned by push(). */
  finish(): string {
    let parsed: unknown;
    try {
      parsed = JSON.parse(this.#raw);
    } catch {
      return this.#pos === undefined ? this.#raw : "";
    }
    const input = isRecord(parsed) && typeof parsed.input === "string" ? parsed.input : undefined;
    if (input === undefined) return this.#pos === undefined ? this.#raw : "";
    return input.startsWith(this.#emitted) ? input.slice(this.#emitted.length) : "";
  }

  #matchPrefix(): void {
    const prefix = CustomInputExtractor.#PREFIX;
    let matched = 0;
    for (let i = 0; i < this.#raw.length; i++) {
      const char = this.#raw[i] as string;
      if (/\s/.test(char)) continue;
      if (char !== prefix[matched]) {
        this.#streamable = false;
        return;
      }
      if (++matched === prefix.length) {
        this.#pos = i + 1;
        return;
      }
    }
  }

  /** Decodes the JSON string value from #pos, stopping before an escape that is not complete yet. */
  #decode(): string {
    const raw = this.#raw;
    let pos = this.#pos as number;
    let out = "";
    while (pos < raw.length) {
      const char = raw[pos] as string;
      if (char === '"') {
        this.#closed = true;
        pos++;
        break;
      }
      if (char !== "\\") {
        out += char;
        pos++;
        continue;
      }
      const escaped = raw[pos + 1];
      if (escaped === undefined) break;
      if (escaped !== "u") {
        out += JSON_ESCAPES[escaped] ?? escaped;
        pos += 2;
        continue;
      }
      const unit = hexUnit(raw, pos + 2);
      if (unit === undefined) break;
      if (unit >= 0xd800 && unit <= 0xdbff) {
        // Keep a surrogate pair together: wait for the low half's escape.
        const low = hexUnit(raw, pos + 8);
        if (low === undefined) break;
        out += String.fromCharCode(unit, low);
        pos += 12;
        continue;
      }
      out += String.fromCharCode(unit);
      pos += 6;
    }
    this.#pos = pos;
    return out;
  }
}

const JSON_ESCAPES: Record<string, string> = { n: "\n", r: "\r", t: "\t", b: "\b", f: "\f" };

/** The UTF-16 unit of the `\uXXXX` escape whose hex digits start at `at`, once all four arrived. */
function hexUnit(raw: string, at: number): number | undefined {
  const hex = raw.slice(at, at + 4);
  return hex.length === 4 && /^[0-9a-fA-F]{4}$/.test(hex) ? parseInt(hex, 16) : undefined;
}

interface ResponsesToolCall {
  id: string;
  streamed: boolean;
}

class ResponsesDecoder implements StreamDecoder {
  readonly #out = new PartWriter();
  /** Tool calls by item id and by output index (servers differ in which they repeat). */
  readonly #byItem = new Map<string, ResponsesToolCall>();
  readonly #byIndex = new Map<number, ResponsesToolCall>();
  #reason: FinishReason | undefined;

  event(event: SseEvent): EnginePart[] {
    if (this.#reason !== undefined) return [];
    if (event.data === "[DONE]") return [];
    const data = parseData(event.data);
    const type = typeof data.type === "string" ? data.type : event.event;
    switch (type) {
      case "response.output_text.delta":
        if (typeof data.delta === "string") this.#out.text(data.delta);
        break;
      case "response.output_text.done":
        this.#out.endText();
        break;
      case "response.output_item.added":
        if (isRecord(data.item)) this.#itemAdded(data.item, data.output_index);
        break;
      case "response.function_call_arguments.delta":
      case "response.custom_tool_call_input.delta":
        this.#toolDelta(data, data.delta);
        break;
      case "response.function_call_arguments.done":
        this.#toolDelta(data, data.arguments, true);
        break;
      case "response.custom_tool_call_input.done":
        this.#toolDelta(data, data.input, true);
        break;
      case "response.output_item.done":
        if (isRecord(data.item)) this.#itemDone(data.item, data.output_index);
        break;
      case "response.completed":
      case "response.incomplete":
        return this.#completed(type, data.response);
      case "response.failed": {
        const response = isRecord(data.response) ? data.response : {};
        throw streamedError(response.error);
      }
      case "error":
        throw streamedError(data);
    }
    return this.#out.drain();
  }

  end(): EnginePart[] {
    if (this.#reason === undefined) throw protocolError("the stream ended before response.completed");
    return this.#out.finish(this.#reason);
  }

  cancel(): EnginePart[] {
    return this.#out.finish("cancelled");
  }

  #completed(type: string, response: unknown): EnginePart[] {
    const body = isRecord(response) ? response : {};
    if (isRecord(body.usage)) {
      const details = isRecord(body.usage.input_tokens_details) ? body.usage.input_tokens_details : {};
      this.#out.usage = {
        inputTokens: count(body.usage.input_tokens),
        cachedInputTokens: count(details.cached_tokens),
        outputTokens: count(body.usage.output_tokens),
      };
    }
    const incomplete = isRecord(body.incomplete_details) ? body.incomplete_details.reason : undefined;
    if (type === "response.incomplete" && incomplete === "max_output_tokens") this.#reason = "length";
    else this.#reason = this.#out.sawToolCall ? "tool_calls" : "stop";
    // The finish part itself waits for the end of the body, so the connection goes back to the pool.
    this.#out.closeAll();
    return this.#out.drain();
  }

  #lookup(itemId: unknown, outputIndex: unknown): ResponsesToolCall | undefined {
    return (
      (typeof itemId === "string" ? this.#byItem.get(itemId) : undefined) ??
      (typeof outputIndex === "number" ? this.#byIndex.get(outputIndex) : undefined)
    );
  }

  #itemAdded(item: Json, outputIndex: unknown): ResponsesToolCall | undefined {
    if (item.type !== "function_call" && item.type !== "custom_tool_call") return undefined;
    const existing = this.#lookup(item.id, outputIndex);
    if (existing) return existing;
    const kind: ToolKind = item.type === "function_call" ? "function" : "custom";
    const name = typeof item.name === "string" ? item.name : "";
    if (name === "") throw protocolError(`a ${item.type} item has no name`);
    const callId = typeof item.call_id === "string" && item.call_id !== "" ? item.call_id : newCallId();
    const call: ResponsesToolCall = { id: this.#out.startTool(kind, name, callId), streamed: false };
    if (typeof item.id === "string") this.#byItem.set(item.id, call);
    if (typeof outputIndex === "number") this.#byIndex.set(outputIndex, call);
    this.#emitWhole(call, kind === "function" ? item.arguments : item.input);
    return call;
  }

  #itemDone(item: Json, outputIndex: unknown): void {
    if (item.type === "message") {
      this.#out.endText();
      return;
    }
    const call = this.#itemAdded(item, outputIndex);
    if (!call) return;
    this.#emitWhole(call, item.type === "function_call" ? item.arguments : item.input);
    this.#out.endTool(call.id);
  }

  /** A delta event, or with `whole` a done event whose full text only counts when nothing was streamed. */
  #toolDelta(data: Json, text: unknown, whole = false): void {
    const call = this.#lookup(data.item_id, data.output_index);
    if (!call || typeof text !== "string") return;
    if (whole) {
      this.#emitWhole(call, text);
      return;
    }
    this.#out.toolDelta(call.id, text);
    if (text !== "") call.streamed = true;
  }

  #emitWhole(call: ResponsesToolCall, text: unknown): void {
    if (call.streamed || typeof text !== "string" || text === "") return;
    this.#out.toolDelta(call.id, text);
    call.streamed = true;
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers

function isRecord(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function count(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) ? value : 0;
}

interface UpstreamError {
  message: string | undefined;
  code: string | undefined;
  param: string | undefined;
}

/** Reads the OpenAI error shape `{error:{message,code,param}}` and the flat variants of vLLM and FastAPI. */
function parseUpstreamError(text: string): UpstreamError | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!isRecord(body)) return undefined;
  const error = isRecord(body.error) ? body.error : body;
  const message =
    typeof error.message === "string"
      ? error.message
      : typeof body.error === "string"
        ? body.error
        : typeof body.detail === "string"
          ? body.detail
          : undefined;
  return {
    message,
    code: typeof error.code === "string" && error.code !== "" ? error.code : undefined,
    param: typeof error.param === "string" ? error.param : undefined,
  };
}

function errorTypeFor(status: number): OpenAIErrorType {
  if (status === 404) return "not_found_error";
  if (status === 429) return "rate_limit_error";
  return "invalid_request_error";
}

/**
 * Reads a body up to `limit` bytes. A longer body is cut there and destroyed (closing its
 * connection), so an upstream sending without end costs at most `limit` bytes and never a stall.
 */
async function readAtMost(
  body: Dispatcher.ResponseData["body"],
  limit: number,
): Promise<{ text: string; complete: boolean }> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Uint8Array>) {
    if (size + chunk.length > limit) {
      chunks.push(chunk.subarray(0, limit - size));
      body.destroy();
      return { text: Buffer.concat(chunks, limit).toString("utf8"), complete: false };
    }
    chunks.push(chunk);
    size += chunk.length;
  }
  return { text: Buffer.concat(chunks, size).toString("utf8"), complete: true };
}

/** The system error code of a connection failure, which Node may nest in `cause` or an AggregateError. */
function errorCode(error: unknown): string | undefined {
  if (!isRecord(error) && !(error instanceof Error)) return undefined;
  const record = error as Json;
  if (typeof record.code === "string") return record.code;
  const nested = Array.isArray(record.errors) ? record.errors[0] : record.cause;
  return nested === undefined || nested === error ? undefined : errorCode(nested);
}
