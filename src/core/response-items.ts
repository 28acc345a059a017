/**
 * Items in the two shapes a stored response keeps them: the wire shape `input_items` lists (every
 * item an object with an id) and the engine's conversation items a successor continues from.
 */
import type { ConversationItem } from "../engine/types.js";
import type { OutputItem, ResponseCreateBody } from "../protocol/responses.js";
import { newId } from "./ids.js";
import { modelToolName } from "./namespace-tools.js";
import type { InputItemRecord } from "./response-store.js";

export function conversationItemsOf(output: readonly OutputItem[]): ConversationItem[] {
  const items: ConversationItem[] = [];
  for (const item of output) {
    if (item.type === "message") {
      items.push({
        type: "message",
        role: "assistant",
        text: item.content.map((part) => part.text).join(""),
      });
    } else if (item.type === "function_call") {
      items.push({
        type: "tool_call",
        kind: "function",
        callId: item.call_id,
        name: modelToolName(item),
        input: item.arguments,
      });
    } else if (item.type === "custom_tool_call") {
      items.push({
        type: "tool_call",
        kind: "custom",
        callId: item.call_id,
        name: modelToolName(item),
        input: item.input,
      });
    }
  }
  return items;
}

/** The request's input in the shape `input_items` lists it: every item an object with an id. */
export function inputItemRecords(input: ResponseCreateBody["input"]): InputItemRecord[] {
  if (input === undefined || input === null) return [];
  if (typeof input === "string") {
    return [
      {
        id: newId("msg"),
        type: "message",
        role: "user",
        status: "completed",
        content: [{ type: "input_text", text: input }],
      },
    ];
  }
  return input.map((raw) => {
    const item = raw as Record<string, unknown>;
    const type = typeof item.type === "string" ? item.type : "message";
    const record: InputItemRecord = {
      ...item,
      id: typeof item.id === "string" ? item.id : newId(idPrefix(type)),
      type,
    };
    if (type === "message" && typeof item.content === "string") {
      const partType = item.role === "assistant" ? "output_text" : "input_text";
      record.content = [{ type: partType, text: item.content }];
    }
    return record;
  });
}

export function idPrefix(type: string): string {
  if (type === "message") return "msg";
  if (type.endsWith("_output")) return "out";
  if (type.endsWith("_call")) return "call";
  return "item";
}
