/**
 * Normalizes the two wire APIs (Responses input items, Chat Completions messages) into the engine
 * seam's `ConversationItem`s, tools and tool choice.
 */
import type { ChatCompletionBody, ChatMessage } from "../protocol/chat.js";
import type { InputItem, ResponseCreateBody } from "../protocol/responses.js";
import type { ConversationItem, ToolChoice, ToolSpec } from "../engine/types.js";

type Part = { type: string; text?: string | undefined; refusal?: string | undefined };

function partsText(content: string | readonly Part[] | null | undefined): string {
  if (content == null) return "";
  if (typeof content === "string") return content;
  let text = "";
  for (const part of content) text += part.text ?? part.refusal ?? "";
  return text;
}

export function itemsFromResponsesInput(
  input: ResponseCreateBody["input"],
  instructions: string | null | undefined,
): ConversationItem[] {
  const items: ConversationItem[] = [];
  if (instructions) items.push({ type: "message", role: "system", text: instructions });
  if (input === undefined) return items;
  if (typeof input === "string") {
    items.push({ type: "message", role: "user", text: input });
    return items;
  }
  for (const item of input) {
    const normalized = normalizeInputItem(item);
    if (normalized) items.push(normalized);
  }
  return items;
}

function normalizeInputItem(item: InputItem): ConversationItem | undefined {
  if ("role" in item) {
    const message = item as { role: "system" | "developer" | "user" | "assistant"; content: string | Part[] };
    return { type: "message", role: message.role, text: partsText(message.content) };
  }
  switch (item.type) {
    case "function_call":
    case "custom_tool_call": {
      const call = item as { call_id: string; name: string; arguments?: string; input?: string };
      const kind = item.type === "function_call" ? "function" : "custom";
      return {
        type: "tool_call",
        kind,
        callId: call.call_id,
        name: call.name,
        input: call.arguments ?? call.input ?? "",
      };
    }
    case "function_call_output":
    case "custom_tool_call_output": {
      const result = item as { call_id: string; output: string | Part[] };
      const kind = item.type === "function_call_output" ? "function" : "custom";
      return { type: "tool_result", kind, callId: result.call_id, output: partsText(result.output) };
    }
    default:
      return undefined;
  }
}

export function toolsFromResponses(tools: ResponseCreateBody["tools"]): ToolSpec[] {
  const specs: ToolSpec[] = [];
  for (const tool of tools ?? []) {
    const t = tool as {
      type: string;
      name?: string;
      description?: string | null;
      parameters?: unknown;
      format?: unknown;
    };
    if ((t.type !== "function" && t.type !== "custom") || !t.name) continue;
    const spec: ToolSpec = { kind: t.type, name: t.name };
    if (t.description) spec.description = t.description;
    if (t.type === "function" && t.parameters) spec.parameters = t.parameters as Record<string, unknown>;
    if (t.type === "custom" && t.format) spec.format = t.format as Record<string, unknown>;
    specs.push(spec);
  }
  return specs;
}

export function toolChoiceFrom(choice: unknown): ToolChoice {
  if (choice === "none" || choice === "required" || choice === "auto") return choice;
  if (choice && typeof choice === "object") {
    const named = choice as { name?: unknown; function?: { name?: unknown } };
    const name = typeof named.name === "string" ? named.name : named.function?.name;
    if (typeof name === "string") return { name };
  }
  return "auto";
}

export function itemsFromChatMessages(messages: readonly ChatMessage[]): ConversationItem[] {
  const items: ConversationItem[] = [];
  for (const message of messages) {
    const text = partsText(message.content as string | Part[] | null | undefined);
    switch (message.role) {
      case "tool":
        items.push({ type: "tool_result", kind: "function", callId: message.tool_call_id, output: text });
        break;
      case "assistant":
        if (text) items.push({ type: "message", role: "assistant", text });
        for (const call of message.tool_calls ?? []) {
          items.push({
            type: "tool_call",
            kind: "function",
            callId: call.id,
            name: call.function.name,
            input: call.function.arguments,
          });
        }
        break;
      default:
        items.push({ type: "message", role: message.role, text });
    }
  }
  return items;
}

export function toolsFromChat(tools: ChatCompletionBody["tools"]): ToolSpec[] {
  const specs: ToolSpec[] = [];
  for (const tool of tools ?? []) {
    if (tool.type === "function") {
      const fn = tool.function as {
        name: string;
        description?: string | null;
        parameters?: Record<string, unknown> | null;
      };
      const spec: ToolSpec = { kind: "function", name: fn.name };
      if (fn.description) spec.description = fn.description;
      if (fn.parameters) spec.parameters = fn.parameters;
      specs.push(spec);
    } else {
      const custom = tool.custom as { name: string; description?: string | null };
      const spec: ToolSpec = { kind: "custom", name: custom.name };
      if (custom.description) spec.description = custom.description;
      specs.push(spec);
    }
  }
  return specs;
}

/** Prediction content of Chat Completions' Predicted Outputs, as plain text. */
export function predictionText(prediction: ChatCompletionBody["prediction"]): string | undefined {
  if (!prediction) return undefined;
  return partsText(prediction.content as string | Part[]);
}
