/**
 * Turns one response's engine parts into its Responses events and output items (`ResponseBuilder`),
 * numbering the events; the response object it fills is the one the stream announced.
 */
import type { EnginePart, FinishReason, Usage } from "../engine/types.js";
import type { SparkError } from "../protocol/errors.js";
import { TextBuffer } from "../protocol/text-buffer.js";
import type {
  OutputItem,
  OutputTextPart,
  ResponseEvent,
  ResponseObject,
  ResponseUsage,
} from "../protocol/responses.js";
import { newId } from "./ids.js";
import { wireLogprob } from "./logprobs.js";
import { toolOrigins, type ToolOrigin } from "./namespace-tools.js";

export function usageOf(usage: Usage): ResponseUsage {
  return {
    input_tokens: usage.inputTokens,
    input_tokens_details: { cached_tokens: usage.cachedInputTokens },
    output_tokens: usage.outputTokens,
    output_tokens_details: {
      reasoning_tokens: 0,
      ...(usage.speculation
        ? {
            accepted_prediction_tokens: usage.speculation.predictionAccepted,
            rejected_prediction_tokens: usage.speculation.predictionRejected,
          }
        : {}),
    },
    ...(usage.speculation
      ? {
          speculation: {
            drafted: usage.speculation.drafted,
            accepted: usage.speculation.accepted,
            rejected: usage.speculation.rejected,
            steps: usage.speculation.steps,
          },
        }
      : {}),
    total_tokens: usage.inputTokens + usage.outputTokens,
  };
}

/** Accumulates output items from engine parts and produces the matching Responses events. */
export class ResponseBuilder {
  private sequence = 0;
  /** Items being generated, and their text so far (see `TextBuffer`: many deltas, little memory). */
  private readonly open = new Map<string, { index: number; text: TextBuffer; logprobs?: unknown[] }>();
  /** Namespaced tools by the name the model calls them (none without a namespace tool). */
  private readonly origins: Map<string, ToolOrigin> | undefined;

  constructor(
    private readonly response: ResponseObject,
    /** The request included `message.output_text.logprobs`: text parts carry them. */
    private readonly logprobs = false,
  ) {
    this.origins = toolOrigins(response.tools);
  }

  event(type: string, fields: Record<string, unknown>): ResponseEvent {
    return { type, sequence_number: this.sequence++, ...fields };
  }

  snapshot(): ResponseObject {
    return { ...this.response, output: [...this.response.output] };
  }

  /**
   * The event of a text or tool-call delta (undefined when there is nothing to send), without a
   * generator: this runs once per token.
   */
  delta(part: Extract<EnginePart, { type: "text-delta" | "tool-call-delta" }>): ResponseEvent | undefined {
    const state = this.open.get(part.id);
    if (!state) return undefined;
    const item = this.response.output[state.index]!;
    if (part.type === "text-delta") {
      // An empty delta is dropped, unless it carries log probabilities (a token with no text).
      if (part.delta === "" && !part.logprobs?.length) return undefined;
      state.text.append(part.delta);
      const logprobs = part.logprobs?.map(wireLogprob) ?? [];
      for (const logprob of logprobs) state.logprobs?.push(logprob);
      return {
        type: "response.output_text.delta",
        sequence_number: this.sequence++,
        item_id: item.id,
        output_index: state.index,
        content_index: 0,
        delta: part.delta,
        logprobs,
      };
    }
    if (part.delta === "") return undefined;
    state.text.append(part.delta);
    return {
      type:
        item.type === "function_call"
          ? "response.function_call_arguments.delta"
          : "response.custom_tool_call_input.delta",
      sequence_number: this.sequence++,
      item_id: item.id,
      output_index: state.index,
      delta: part.delta,
    };
  }

  *apply(part: Exclude<EnginePart, { type: "finish" }>): Generator<ResponseEvent> {
    const output = this.response.output;
    switch (part.type) {
      case "text-start": {
        const item: OutputItem = {
          id: newId("msg"),
          type: "message",
          status: "in_progress",
          role: "assistant",
          content: [],
        };
        const index = output.push(item) - 1;
        this.open.set(part.id, { index, text: new TextBuffer(), ...(this.logprobs ? { logprobs: [] } : {}) });
        yield this.event("response.output_item.added", {
          output_index: index,
          item: { ...item, content: [] },
        });
        yield this.event("response.content_part.added", {
          item_id: item.id,
          output_index: index,
          content_index: 0,
          part: { type: "output_text", text: "", annotations: [] },
        });
        return;
      }
      case "text-delta":
      case "tool-call-delta": {
        const event = this.delta(part);
        if (event) yield event;
        return;
      }
      case "text-end": {
        const state = this.open.get(part.id);
        if (!state) return;
        this.open.delete(part.id);
        const item = output[state.index] as Extract<OutputItem, { type: "message" }>;
        const text = state.text.toString();
        const textPart: OutputTextPart = {
          type: "output_text",
          text,
          annotations: [],
          ...(state.logprobs ? { logprobs: state.logprobs } : {}),
        };
        item.content = [textPart];
        item.status = "completed";
        const ids = { item_id: item.id, output_index: state.index, content_index: 0 };
        yield this.event("response.output_text.done", { ...ids, text, logprobs: state.logprobs ?? [] });
        yield this.event("response.content_part.done", { ...ids, part: textPart });
        yield this.event("response.output_item.done", { output_index: state.index, item: { ...item } });
        return;
      }
      case "tool-call-start": {
        // A namespace's tool goes back as the client named it: its own name and its namespace.
        const origin = this.origins?.get(part.name);
        const named = origin ? { name: origin.name, namespace: origin.namespace } : { name: part.name };
        const item: OutputItem =
          part.kind === "function"
            ? {
                id: newId("fc"),
                type: "function_call",
                status: "in_progress",
                call_id: part.callId,
                ...named,
                arguments: "",
              }
            : {
                id: newId("ctc"),
                type: "custom_tool_call",
                status: "in_progress",
                call_id: part.callId,
                ...named,
                input: "",
              };
        const index = output.push(item) - 1;
        this.open.set(part.id, { index, text: new TextBuffer() });
        yield this.event("response.output_item.added", { output_index: index, item: { ...item } });
        return;
      }
      case "tool-call-end": {
        const state = this.open.get(part.id);
        if (!state) return;
        this.open.delete(part.id);
        const item = output[state.index]!;
        item.status = "completed";
        const text = state.text.toString();
        if (item.type === "function_call") {
          item.arguments = text;
          yield this.event("response.function_call_arguments.done", {
            item_id: item.id,
            output_index: state.index,
            name: item.name,
            arguments: text,
          });
        } else if (item.type === "custom_tool_call") {
          item.input = text;
          yield this.event("response.custom_tool_call_input.done", {
            item_id: item.id,
            output_index: state.index,
            input: text,
          });
        }
        yield this.event("response.output_item.done", { output_index: state.index, item: { ...item } });
        return;
      }
    }
  }

  *compaction(encryptedContent: string): Generator<ResponseEvent> {
    const item: OutputItem = { id: newId("cmp"), type: "compaction", encrypted_content: encryptedContent };
    const index = this.response.output.push(item) - 1;
    yield this.event("response.output_item.added", { output_index: index, item });
    yield this.event("response.output_item.done", { output_index: index, item });
  }

  /** Items still open when generation stops are closed as `incomplete` with what they have so far. */
  private closeOpenItems(): void {
    for (const state of this.open.values()) {
      const item = this.response.output[state.index]!;
      item.status = "incomplete";
      const text = state.text.toString();
      if (item.type === "message")
        item.content = [
          {
            type: "output_text",
            text,
            annotations: [],
            ...(state.logprobs ? { logprobs: state.logprobs } : {}),
          },
        ];
      else if (item.type === "function_call") item.arguments = text;
      else if (item.type === "custom_tool_call") item.input = text;
    }
    this.open.clear();
  }

  finish(reason: FinishReason, usage: Usage, abortReason: string | undefined): ResponseEvent {
    this.closeOpenItems();
    this.response.usage = usageOf(usage);
    if (reason === "length" || reason === "cancelled") {
      // A background response cancelled through `POST …/cancel` is `cancelled`, as OpenAI's are.
      const cancelled = this.response.background && abortReason === "cancelled";
      this.response.status = cancelled ? "cancelled" : "incomplete";
      this.response.incomplete_details = cancelled
        ? null
        : { reason: reason === "length" ? "max_output_tokens" : (abortReason ?? "cancelled") };
      return this.event("response.incomplete", { response: this.snapshot() });
    }
    this.response.status = "completed";
    this.response.completed_at = Math.floor(Date.now() / 1000);
    return this.event("response.completed", { response: this.snapshot() });
  }

  fail(error: SparkError): ResponseEvent {
    this.closeOpenItems();
    this.response.status = "failed";
    this.response.error = { code: error.code, message: error.message };
    return this.event("response.failed", { response: this.snapshot() });
  }
}
