/**
 * What a \`ToolChoice\` means for the tools of a request, shared by the engines: which tools the
 * model may call this turn, and whether it must call one.
 */
import type { ToolChoice, ToolSpec } from "./types.js";

/** The tools the model may call under `choice` (all of them, one, the allowed ones, or none). */
export function callableTools(tools: readonly ToolSpec[], choice: ToolChoice): readonly ToolSpec[] {
  if (choice === "none") return [];
  if (typeof choice === "string") return tools;
  if ("name" in choice) return tools.filter((tool) => tool.name === choice.name);
  const allowed = new Set(choice.allowed);
  return tools.filter((tool) => allowed.has(tool.name));
}

/** Whether `choice` demands at least one call. */
export function callRequired(choice: ToolChoice): boolean {
  return (
    choice === "required" || (typeof choice === "object" && ("name" in choice || choice.mode === "required"))
  );
}
