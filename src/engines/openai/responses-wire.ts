/**
 * The Responses wire (`POST /responses`, streamed): the request body and the decoder of its typed
 * `response.*` events.
 */
import type {
  ContentPart,
  ConversationItem,
  EnginePart,
  EngineRequest,
  FinishReason,
  ToolKind,
  ToolSpec,
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

export const responsesWire: UpstreamWire = {
  path: "/responses",
  requestBody: responsesRequestBody,
  decoder: () => new ResponsesDecoder(),
};

function responsesRequestBody(request: EngineRequest): Json {
  const body: Json = {
    model: request.model,
    input: request.items.map(responsesInputItem),
    stream: true,
    store: false,
    ...samplingFields(request, "max_output_tokens"),
    ...formatFields(request, "responses"),
    ...logprobsFields(request, "responses"),
  };
  if (request.tools.length > 0) {
    body.tools = request.tools.map(responsesTool);
    const choice = request.toolChoice;
    const kindOf = (name: string): string =>
      request.tools.find((tool) => tool.name === name)?.kind ?? "function";
    if (typeof choice === "string") {
      body.tool_choice = choice;
    } else if ("name" in choice) {
      body.tool_choice = { type: kindOf(choice.name), name: choice.name };
    } else {
      body.tool_choice = {
        type: "allowed_tools",
        mode: choice.mode,
        tools: choice.allowed.map((name) => ({ type: kindOf(name), name })),
      };
    }
    body.parallel_tool_calls = request.parallelToolCalls;
  }
  return body;
}

/** Text and image parts as Responses content parts (images are sent only to an upstream that sees). */
function responsesContent(parts: readonly ContentPart[], textType: "input_text" | "output_text"): Json[] {
  return parts.map((part) =>
    part.type === "text"
      ? { type: textType, text: part.text }
      : { type: "input_image", image_url: part.url, ...(part.detail ? { detail: part.detail } : {}) },
  );
}

function responsesInputItem(item: ConversationItem): Json {
  switch (item.type) {
    case "message":
      return {
        type: "message",
        role: item.role,
        content: item.parts
          ? responsesContent(item.parts, item.role === "assistant" ? "output_text" : "input_text")
          : item.text,
      };
    case "tool_call":
      return item.kind === "function"
        ? { type: "function_call", call_id: item.callId, name: item.name, arguments: item.input }
        : { type: "custom_tool_call", call_id: item.callId, name: item.name, input: item.input };
    case "tool_result":
      return {
        type: item.kind === "function" ? "function_call_output" : "custom_tool_call_output",
        call_id: item.callId,
        output: item.parts ? responsesContent(item.parts, "input_text") : item.output,
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
        if (typeof data.delta === "string") this.#out.text(data.delta, upstreamLogprobs(data.logprobs));
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
