/**
 * Converts the seam's conversation and tools into node-llama-cpp's chat history and function
 * definitions. Freeform (custom) tools become functions with one string parameter, `input`.
 */
import type {
  ChatHistoryItem,
  ChatModelFunctionCall,
  ChatModelFunctions,
  ChatModelResponse,
} from "node-llama-cpp";
import { callableTools } from "../../engine/tool-choice.js";
import type { ConversationItem, ToolChoice, ToolSpec } from "../../engine/types.js";
import { enforceableSchema } from "./json-schema-grammar.js";

export function toChatHistory(items: readonly ConversationItem[]): ChatHistoryItem[] {
  const results = new Map<string, string>();
  for (const item of items) if (item.type === "tool_result") results.set(item.callId, item.output);

  const history: ChatHistoryItem[] = [];
  const modelTurn = (): ChatModelResponse => {
    const last = history[history.length - 1];
    if (last?.type === "model") return last;
    const turn: ChatModelResponse = { type: "model", response: [] };
    history.push(turn);
    return turn;
  };
  for (const item of items) {
    if (item.type === "message") {
      if (item.role === "assistant") modelTurn().response.push(item.text);
      else if (item.role === "user") history.push({ type: "user", text: item.text });
      else history.push({ type: "system", text: item.text });
    } else if (item.type === "tool_call") {
      const call: ChatModelFunctionCall = {
        type: "functionCall",
        name: item.name,
        params: item.kind === "custom" ? { input: item.input } : parseArguments(item.input),
        result: results.get(item.callId) ?? "",
      };
      modelTurn().response.push(call);
    }
  }
  // The model answers into the last model turn when it is waiting on tool results; else a new one.
  const last = history[history.length - 1];
  const lastPart = last?.type === "model" ? last.response[last.response.length - 1] : undefined;
  const continuesToolLoop = typeof lastPart === "object" && lastPart.type === "functionCall";
  if (!continuesToolLoop) history.push({ type: "model", response: [] });
  return history;
}

function parseArguments(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * The functions the model may call under `choice` (all, the named one, the allowed ones, none), in
 * node-llama-cpp's shape. A strict tool's schema is enforced exactly or refused (a 400 naming it,
 * see `json-schema-grammar.ts`); other tools' schemas are followed as far as the grammar can.
 */
export function toChatFunctions(
  tools: readonly ToolSpec[],
  choice: ToolChoice,
): ChatModelFunctions | undefined {
  const selected = callableTools(tools, choice);
  if (selected.length === 0) return undefined;
  const functions: Record<string, { description?: string; params?: object }> = {};
  for (const tool of selected) {
    const params =
      tool.kind === "custom"
        ? { type: "object", properties: { input: { type: "string" } }, required: ["input"] }
        : tool.strict
          ? enforceableSchema(
              tool.parameters ?? { type: "object", properties: {} },
              `${tool.param ?? "tools"}.parameters`,
              "tool",
            )
          : sanitizeSchema(tool.parameters ?? { type: "object", properties: {} });
    functions[tool.name] = tool.description ? { description: tool.description, params } : { params };
  }
  return functions as ChatModelFunctions;
}

const KEPT_KEYS = [
  "type",
  "description",
  "enum",
  "const",
  "required",
  "minItems",
  "maxItems",
  "minLength",
  "maxLength",
];

/**
 * Keeps the JSON Schema subset that node-llama-cpp can turn into a grammar. Everything else
 * (`$schema`, `default`, `format`, `additionalProperties`, …) is dropped rather than rejected,
 * because clients send rich schemas and the grammar only needs the shape.
 */
export function sanitizeSchema(schema: unknown): object {
  if (!schema || typeof schema !== "object") return {};
  const input = schema as Record<string, unknown>;
  const out: Record<string, unknown> = {};
  for (const key of KEPT_KEYS) if (input[key] !== undefined) out[key] = input[key];
  if (Array.isArray(input.type)) {
    delete out.type;
    out.oneOf = input.type.map((type) => sanitizeSchema({ ...input, type }));
    return out;
  }
  if (input.properties && typeof input.properties === "object") {
    const properties: Record<string, object> = {};
    for (const [name, value] of Object.entries(input.properties)) properties[name] = sanitizeSchema(value);
    out.properties = properties;
    if (!out.type) out.type = "object";
  }
  if (input.items) out.items = sanitizeSchema(input.items);
  const variants = input.oneOf ?? input.anyOf;
  if (Array.isArray(variants)) out.oneOf = variants.map(sanitizeSchema);
  if (out.type === "object" && !out.properties) out.properties = {};
  if (out.type === "integer" || out.type === "number" || out.type === "string" || out.type === "boolean") {
    delete out.required;
  }
  return out;
}
