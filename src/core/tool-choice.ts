/**
 * `tool_choice` and `parallel_tool_calls` of both wire APIs, checked against the request's tools and
 * normalized into the engine seam's `ToolChoice`. What the engine must then do (`engine/types.ts`):
 * `required` at least one call, a named tool a call to it, `none` no call, `allowed_tools` calls
 * only to those tools. A choice that names a tool the request does not define, or a hosted tool
 * Spark does not run, is a 400 naming `tool_choice`: it could never be honoured.
 *
 * Also marks each tool spec with `strict` and where the client sent it (`param`), so an engine that
 * cannot enforce a strict tool's schema can name it in its 400.
 */
import type { ToolChoice, ToolSpec } from "../engine/types.js";
import { shown, SparkError } from "../protocol/errors.js";

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The name a Responses or Chat Completions tool definition declares (`name`, `function.name`, `custom.name`). */
function declaredName(tool: Json): string | undefined {
  if (typeof tool.name === "string") return tool.name;
  for (const key of ["function", "custom"]) {
    const inner = tool[key];
    if (isRecord(inner) && typeof inner.name === "string") return inner.name;
  }
  return undefined;
}

/** Sets `strict` and `param` on each spec from the raw tool definition it came from. */
export function annotateTools(specs: ToolSpec[], rawTools: readonly unknown[] | null | undefined): void {
  const indexByName = new Map<string, number>();
  (rawTools ?? []).forEach((raw, index) => {
    if (!isRecord(raw)) return;
    const name = declaredName(raw);
    if (name !== undefined && !indexByName.has(name)) indexByName.set(name, index);
  });
  for (const spec of specs) {
    const index = indexByName.get(spec.name);
    if (index === undefined) continue;
    const raw = rawTools![index] as Json;
    const definition = isRecord(raw.function) ? raw.function : raw;
    spec.param = isRecord(raw.function)
      ? `tools[${index}].function`
      : isRecord(raw.custom)
        ? `tools[${index}].custom`
        : `tools[${index}]`;
    if (definition.strict === true) spec.strict = true;
  }
}

/** Hosted tool types a `tool_choice` may name; Spark runs none of them (see `unavailableTools`). */
const HOSTED_CHOICE_TYPES = new Set([
  "file_search",
  "web_search",
  "web_search_preview",
  "web_search_preview_2025_03_11",
  "computer",
  "computer_use_preview",
  "computer-use-preview",
  "code_interpreter",
  "image_generation",
  "mcp",
  "apply_patch",
  "shell",
  "local_shell",
]);

/**
 * `tool_choice` as sent on `/v1/responses` (`"auto"|"none"|"required"`, `{type:"function"|"custom",
 * name}`, `{type:"allowed_tools", mode, tools}`, hosted types) or `/v1/chat/completions`
 * (`{type:"function", function:{name}}`, `{type:"custom", custom:{name}}`,
 * `{type:"allowed_tools", allowed_tools:{mode, tools}}`).
 */
export function toolChoiceOf(choice: unknown, tools: readonly ToolSpec[]): ToolChoice {
  if (choice === undefined || choice === null || choice === "auto") return "auto";
  if (choice === "none") return "none";
  if (choice === "required") {
    if (tools.length === 0)
      throw SparkError.invalid(
        "tool_choice 'required' needs at least one tool in 'tools' that Spark can call.",
        "tool_choice",
        "invalid_value",
      );
    return "required";
  }
  if (!isRecord(choice) || typeof choice.type !== "string")
    throw SparkError.invalid(`Invalid tool_choice: ${shown(choice)}.`, "tool_choice", "invalid_value");
  if (choice.type === "allowed_tools") {
    const spec = isRecord(choice.allowed_tools) ? choice.allowed_tools : choice;
    const mode = spec.mode ?? "auto";
    if (mode !== "auto" && mode !== "required")
      throw SparkError.invalid(
        `Invalid allowed_tools mode ${shown(mode)}: expected 'auto' or 'required'.`,
        "tool_choice.mode",
        "invalid_value",
      );
    if (!Array.isArray(spec.tools) || spec.tools.length === 0)
      throw SparkError.invalid(
        "allowed_tools needs a non-empty 'tools' list.",
        "tool_choice.tools",
        "invalid_value",
      );
    const allowed = spec.tools.map((tool: unknown, index) => {
      const name = isRecord(tool) ? declaredName(tool) : undefined;
      if (name === undefined) {
        const type = isRecord(tool) ? tool.type : undefined;
        throw SparkError.invalid(
          `allowed_tools lists ${typeof type === "string" ? `a hosted '${shown(type)}' tool, which Spark does not run` : "a tool without a name"}: only function and custom tools can be allowed.`,
          `tool_choice.tools[${index}]`,
          "invalid_value",
        );
      }
      requireTool(name, tools, `tool_choice.tools[${index}]`);
      return name;
    });
    return { allowed, mode };
  }
  if (choice.type === "function" || choice.type === "custom") {
    const name = declaredName(choice);
    if (name === undefined)
      throw SparkError.invalid(
        `tool_choice of type '${choice.type}' needs the tool's name.`,
        "tool_choice",
        "invalid_value",
      );
    requireTool(name, tools, "tool_choice");
    return { name };
  }
  if (HOSTED_CHOICE_TYPES.has(choice.type))
    throw SparkError.invalid(
      `tool_choice forces the hosted tool '${shown(choice.type)}', which Spark does not run; force a function or custom tool, or use 'auto'.`,
      "tool_choice",
      "unsupported_value",
    );
  throw SparkError.invalid(
    `Unknown tool_choice type ${shown(choice.type)}.`,
    "tool_choice.type",
    "invalid_value",
  );
}

function requireTool(name: string, tools: readonly ToolSpec[], param: string): void {
  if (tools.some((tool) => tool.name === name)) return;
  throw SparkError.invalid(
    `Tool choice names '${shown(name)}', which is not among the function and custom tools of this request.`,
    param,
    "invalid_value",
  );
}
