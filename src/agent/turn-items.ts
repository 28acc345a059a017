/**
 * The Responses items a conversation is made of, as the agent keeps and sends them: input items
 * (messages, tool calls and their outputs, compaction items), a response and its usage, one
 * request's options, and the conversions between them (a user message, a tool call's output, the
 * tool calls of a response, output items made input again, a message's text, usage summed).
 */
import type { ToolCall } from "./tools/index.js";

/** A Responses input item (messages, tool calls and their outputs, compaction items). */
export type InputItem = Record<string, unknown> & { type: string };

export interface ResponseObject {
  id: string;
  status: string;
  model?: string;
  output: InputItem[];
  usage?: {
    input_tokens: number;
    output_tokens: number;
    input_tokens_details?: { cached_tokens?: number };
    output_tokens_details?: { accepted_prediction_tokens?: number; rejected_prediction_tokens?: number };
  };
  incomplete_details?: { reason?: string } | null;
  error?: { code?: string; message?: string } | null;
  metadata?: Record<string, string> | null;
}

export interface TurnUsage {
  input_tokens: number;
  cached_input_tokens: number;
  output_tokens: number;
}

/** Where one request goes and what becomes of its answer. */
export interface RequestOptions {
  /** The `stream_id` lane; "" is the main conversation's (default) lane. */
  lane: string;
  /** Whether the answer joins the transcript (a file rewrite's does not). */
  record: boolean;
  /** Extra `response.create` fields (a file rewrite's model, instructions and prediction). */
  extra?: Record<string, unknown>;
  /** A request of its own (the file rewrites): only its input, no tools, no compaction. */
  standalone?: boolean;
  /** Receives the text deltas instead of `text.delta` events. */
  onDelta?: (delta: string) => void;
}

export const zeroUsage = (): TurnUsage => ({ input_tokens: 0, cached_input_tokens: 0, output_tokens: 0 });

/** A user message; `images` (data or http(s) URLs) follow the text as `input_image` parts. */
export function userMessage(text: string, images: readonly string[] = []): InputItem {
  return {
    type: "message",
    role: "user",
    content: [
      ...(text !== "" || images.length === 0 ? [{ type: "input_text" as const, text }] : []),
      ...images.map((image) => ({ type: "input_image" as const, image_url: image })),
    ],
  };
}

export function toolOutput(call: ToolCall, text: string): InputItem {
  return {
    type: call.kind === "custom" ? "custom_tool_call_output" : "function_call_output",
    call_id: call.callId,
    output: text,
  };
}

export function toolCallsOf(output: readonly InputItem[]): ToolCall[] {
  const calls: ToolCall[] = [];
  for (const item of output) {
    if (item.type === "function_call") {
      calls.push({
        kind: "function",
        callId: String(item.call_id),
        name: String(item.name),
        input: typeof item.arguments === "string" ? item.arguments : "",
      });
    } else if (item.type === "custom_tool_call") {
      calls.push({
        kind: "custom",
        callId: String(item.call_id),
        name: String(item.name),
        input: typeof item.input === "string" ? item.input : "",
      });
    }
  }
  return calls;
}

/** Output items go back as input without the server-assigned `id` and `status`. */
export function stripOutputFields(item: InputItem): InputItem {
  const { id: _id, status: _status, ...rest } = item;
  return item.type === "compaction" ? item : (rest as InputItem);
}

export function messageText(item: InputItem | undefined): string {
  if (!item) return "";
  const content = item.content;
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.map((part: { text?: unknown }) => (typeof part.text === "string" ? part.text : "")).join("");
}

export function addUsage(total: TurnUsage, response: ResponseObject): void {
  const usage = response.usage;
  if (!usage) return;
  total.input_tokens += usage.input_tokens;
  total.cached_input_tokens += usage.input_tokens_details?.cached_tokens ?? 0;
  total.output_tokens += usage.output_tokens;
}
