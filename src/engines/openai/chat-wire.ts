/**
 * The Chat Completions wire (`POST /chat/completions`, streamed): the request body and the decoder
 * of its `chat.completion.chunk` events.
 *
 * Custom (freeform) tools have no Chat Completions equivalent, so they are sent as function tools
 * taking `{"input": string}` and their calls are converted back, the `input` string being streamed
 * out of the JSON arguments as they arrive.
 */
import type {
  ContentPart,
  ConversationItem,
  EnginePart,
  EngineRequest,
  FinishReason,
  ToolSpec,
  Usage,
} from "../../engine/types.js";
import type { SseEvent } from "./sse-lines.js";
import {
  count,
  isRecord,
  newCallId,
  parseData,
  PartWriter,
  formatFields,
  logprobsFields,
  protocolError,
  samplingFields,
  streamedError,
  upstreamLogprobs,
} from "./wire-common.js";
import type { Json, StreamDecoder, UpstreamWire } from "./wire-common.js";

export const chatWire: UpstreamWire = {
  path: "/chat/completions",
  requestBody: chatRequestBody,
  decoder: (request) => new ChatDecoder(request.tools),
};

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
    ...formatFields(request, "chat"),
    ...logprobsFields(request, "chat"),
  };
  // Predicted Outputs: OpenAI and vLLM take it; an upstream that does not ignores or rejects it.
  if (request.prediction) body.prediction = { type: "content", content: request.prediction };
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
      typeof choice === "string"
        ? choice
        : "name" in choice
          ? { type: "function", function: { name: choice.name } }
          : {
              type: "allowed_tools",
              allowed_tools: {
                mode: choice.mode,
                tools: choice.allowed.map((name) => ({ type: "function", function: { name } })),
              },
            };
    body.parallel_tool_calls = request.parallelToolCalls;
  }
  return body;
}

type ChatAssistantMessage = { role: "assistant"; content: string | null; tool_calls?: Json[] };

/** Text and image parts as Chat Completions content parts. */
function chatContent(parts: readonly ContentPart[]): Json[] {
  return parts.map((part) =>
    part.type === "text"
      ? { type: "text", text: part.text }
      : { type: "image_url", image_url: { url: part.url, ...(part.detail ? { detail: part.detail } : {}) } },
  );
}

/**
 * Consecutive assistant items (text and tool calls of one turn) merge into one assistant message.
 * Images (sent only to an upstream that sees, see `ConversationItem`) go as `image_url` parts; a
 * tool message carries text only, so a tool result's images follow the turn's tool messages as one
 * user message that names the call.
 */
function chatMessages(items: readonly ConversationItem[]): Json[] {
  const messages: Json[] = [];
  let assistant: ChatAssistantMessage | undefined;
  let toolImages: Json[] = [];
  const flushToolImages = (): void => {
    if (toolImages.length === 0) return;
    messages.push({ role: "user", content: toolImages });
    toolImages = [];
  };
  for (const item of items) {
    if (item.type !== "tool_result") flushToolImages();
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
      const images = item.parts?.filter((part) => part.type === "image") ?? [];
      if (images.length > 0)
        toolImages.push(
          { type: "text", text: `Images from the result of tool call ${item.callId}:` },
          ...chatContent(images),
        );
    } else {
      const role = item.role === "developer" ? "system" : item.role;
      messages.push({ role, content: item.parts ? chatContent(item.parts) : item.text });
    }
  }
  flushToolImages();
  return messages;
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
      const logprobs = isRecord(choice.logprobs) ? upstreamLogprobs(choice.logprobs.content) : undefined;
      if (typeof delta.content === "string" || logprobs)
        this.#out.text(typeof delta.content === "string" ? delta.content : "", logprobs);
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

export function chatUsage(usage: Json): Usage {
  const details = isRecord(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  const completion = isRecord(usage.completion_tokens_details) ? usage.completion_tokens_details : {};
  const accepted = count(completion.accepted_prediction_tokens);
  const rejected = count(completion.rejected_prediction_tokens);
  return {
    inputTokens: count(usage.prompt_tokens),
    cachedInputTokens: count(details.cached_tokens),
    outputTokens: count(usage.completion_tokens),
    // The upstream's own Predicted Outputs counts (its verification steps are not reported).
    ...(accepted + rejected > 0
      ? {
          speculation: {
            drafted: accepted + rejected,
            accepted,
            rejected,
            steps: 0,
            predictionAccepted: accepted,
            predictionRejected: rejected,
          },
        }
      : {}),
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
  /** Progress of #matchPrefix: the next index of #raw to look at, and the prefix characters matched. */
  #prefixScan = 0;
  #prefixMatched = 0;
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

  /** Resumes where the previous fragment left off: many small fragments cost linear work in all. */
  #matchPrefix(): void {
    const prefix = CustomInputExtractor.#PREFIX;
    for (; this.#prefixScan < this.#raw.length; this.#prefixScan++) {
      const char = this.#raw[this.#prefixScan] as string;
      if (/\s/.test(char)) continue;
      if (char !== prefix[this.#prefixMatched]) {
        this.#streamable = false;
        return;
      }
      if (++this.#prefixMatched === prefix.length) {
        this.#pos = this.#prefixScan + 1;
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
