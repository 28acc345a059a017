/**
 * Normalizes the two wire APIs (Responses input items, Chat Completions messages) into the engine
 * seam's `ConversationItem`s, tools and tool choice.
 */
import type { ChatCompletionBody, ChatMessage } from "../protocol/chat.js";
import type { InputItem, ResponseCreateBody } from "../protocol/responses.js";
import type { ContentPart, ConversationItem, ImagePart, ToolSpec } from "../engine/types.js";
import { SparkError } from "../protocol/errors.js";
import { modelToolName } from "./namespace-tools.js";

type Part = {
  type: string;
  text?: string | undefined;
  refusal?: string | undefined;
  image_url?: unknown;
  file_id?: unknown;
  detail?: unknown;
};

function partsText(content: string | readonly Part[] | null | undefined): string {
  if (content == null) return "";
  if (typeof content === "string") return content;
  let text = "";
  for (const part of content) text += part.text ?? part.refusal ?? "";
  return text;
}

/** `data:image/<type>;base64,<data>`: what a client inlines; anything else must be http(s). */
const DATA_IMAGE_URL = /^data:image\/[a-z0-9.+-]+;base64,[A-Za-z0-9+/=\s]+$/i;

/**
 * The image of an `input_image` (Responses) or `image_url` (Chat Completions) part, or undefined
 * for a part that is no image. A malformed one is a 400 naming it (`param`), never dropped.
 */
function imageOf(part: Part, param: string): ImagePart | undefined {
  let url: unknown;
  let detail: unknown;
  if (part.type === "input_image") {
    if (part.image_url == null && typeof part.file_id === "string")
      throw SparkError.invalid(
        "Images by file_id are not supported (Spark has no Files API): send image_url, a data URL or an http(s) URL.",
        `${param}.file_id`,
        "unsupported_value",
      );
    url = part.image_url;
    detail = part.detail;
  } else if (part.type === "image_url") {
    const given = part.image_url as string | { url?: unknown; detail?: unknown } | undefined;
    url = typeof given === "object" && given !== null ? given.url : given;
    detail = typeof given === "object" && given !== null ? given.detail : undefined;
  } else {
    return undefined;
  }
  const where = part.type === "input_image" ? `${param}.image_url` : `${param}.image_url.url`;
  if (typeof url !== "string" || !(DATA_IMAGE_URL.test(url) || /^https?:\/\/[^\s]+$/i.test(url)))
    throw SparkError.invalid(
      "An image must be a data URL (data:image/png;base64,...) or an http(s) URL.",
      where,
      "invalid_image_url",
    );
  const image: ImagePart = { type: "image", url };
  if (detail === "auto" || detail === "low" || detail === "high") image.detail = detail;
  return image;
}

/** The text and images of a content array in order, or undefined when it has no image. */
function partsWithImages(
  content: string | readonly Part[] | null | undefined,
  param: string,
): ContentPart[] | undefined {
  if (content == null || typeof content === "string") return undefined;
  const ordered: ContentPart[] = [];
  let images = 0;
  content.forEach((part, index) => {
    const image = imageOf(part, `${param}[${index}]`);
    if (image) {
      images++;
      ordered.push(image);
    } else {
      const text = part.text ?? part.refusal;
      if (text) ordered.push({ type: "text", text });
    }
  });
  return images > 0 ? ordered : undefined;
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
  input.forEach((item, index) => {
    const normalized = normalizeInputItem(item, `input[${index}]`);
    if (normalized) items.push(normalized);
  });
  return items;
}

function normalizeInputItem(item: InputItem, param: string): ConversationItem | undefined {
  if ("role" in item) {
    const message = item as { role: "system" | "developer" | "user" | "assistant"; content: string | Part[] };
    const parts = partsWithImages(message.content, `${param}.content`);
    if (parts && message.role === "assistant")
      throw SparkError.invalid(
        "Images are accepted in user messages only.",
        `${param}.content`,
        "invalid_value",
      );
    const text = partsText(message.content);
    return parts
      ? { type: "message", role: message.role, text, parts }
      : { type: "message", role: message.role, text };
  }
  switch (item.type) {
    case "function_call":
    case "custom_tool_call": {
      const call = item as {
        call_id: string;
        name: string;
        namespace?: unknown;
        arguments?: string;
        input?: string;
      };
      const kind = item.type === "function_call" ? "function" : "custom";
      return {
        type: "tool_call",
        kind,
        callId: call.call_id,
        // A call to a namespace's tool: the model knows it by its qualified name.
        name: modelToolName(call),
        input: call.arguments ?? call.input ?? "",
      };
    }
    case "function_call_output":
    case "custom_tool_call_output": {
      const result = item as { call_id: string; output: string | Part[] };
      const kind = item.type === "function_call_output" ? "function" : "custom";
      const output = partsText(result.output);
      const parts = partsWithImages(result.output, `${param}.output`);
      return parts
        ? { type: "tool_result", kind, callId: result.call_id, output, parts }
        : { type: "tool_result", kind, callId: result.call_id, output };
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

export function itemsFromChatMessages(messages: readonly ChatMessage[]): ConversationItem[] {
  const items: ConversationItem[] = [];
  messages.forEach((message, index) => {
    const content = message.content as string | Part[] | null | undefined;
    const text = partsText(content);
    const parts = partsWithImages(content, `messages[${index}].content`);
    switch (message.role) {
      case "tool":
        items.push(
          parts
            ? { type: "tool_result", kind: "function", callId: message.tool_call_id, output: text, parts }
            : { type: "tool_result", kind: "function", callId: message.tool_call_id, output: text },
        );
        break;
      case "assistant":
        if (parts)
          throw SparkError.invalid(
            "Images are accepted in user messages only.",
            `messages[${index}].content`,
            "invalid_value",
          );
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
        items.push(
          parts
            ? { type: "message", role: message.role, text, parts }
            : { type: "message", role: message.role, text },
        );
    }
  });
  return items;
}

/**
 * Hosted tools in a request (`web_search`, `file_search`, …): every tool that is neither a
 * `function` nor a `custom` tool nor a `namespace` of them (see namespace-tools.ts). They are accepted (Codex sends them) but Spark cannot run them;
 * the response says so (`metadata.spark_unavailable_tools`) instead of pretending. Distinct, in order.
 */
export function unavailableTools(tools: ResponseCreateBody["tools"]): string[] {
  const names: string[] = [];
  for (const tool of tools ?? []) {
    const type = (tool as { type: string }).type;
    if (type !== "function" && type !== "custom" && type !== "namespace" && !names.includes(type))
      names.push(type);
  }
  return names;
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
