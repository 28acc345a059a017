/**
 * What every tool handler shares: a call's arguments checked (`parseArguments`, `stringArg`,
 * `optionalString`, `optionalNumber`: a wrong one is a `ToolError` the model reads), an error as
 * the model reads it, a long result shortened for display, and a generic tool call's display item.
 */
import { ToolError } from "../files/workspace.js";
import type { ThreadItem } from "../thread-item.js";
import type { ToolCall } from "./context.js";

export function parseArguments(call: ToolCall): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(call.input || "{}");
  } catch {
    throw new ToolError(
      "invalid_argument",
      `the arguments of ${call.name} are not valid JSON: ${call.input.slice(0, 200)}`,
    );
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new ToolError("invalid_argument", `the arguments of ${call.name} must be a JSON object`);
  }
  return parsed as Record<string, unknown>;
}

export function stringArg(args: Record<string, unknown>, name: string): string {
  const value = args[name];
  if (typeof value !== "string" || value === "") {
    throw new ToolError("invalid_argument", `"${name}" is required and must be a non-empty string`);
  }
  return value;
}

export function optionalString<K extends string>(
  args: Record<string, unknown>,
  name: K,
): { [P in K]?: string } {
  const value = args[name];
  return (typeof value === "string" && value !== "" ? { [name]: value } : {}) as { [P in K]?: string };
}

export function optionalNumber<K extends string>(
  args: Record<string, unknown>,
  name: K,
): { [P in K]?: number } {
  const value = args[name];
  return (typeof value === "number" && Number.isFinite(value) ? { [name]: value } : {}) as {
    [P in K]?: number;
  };
}

export function errorText(error: unknown): string {
  if (error instanceof ToolError) return error.message;
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

export function summarize(text: string): string {
  const lines = text.split("\n");
  return lines.length <= 20 ? text : `${lines.slice(0, 20).join("\n")}\n… ${lines.length - 20} more lines`;
}

/** The transcript's item for a generic tool call, in the state given (with its result once known). */
export function toolCallItem(
  id: string,
  call: ToolCall,
): (status: "in_progress" | "completed" | "failed", result?: string) => ThreadItem {
  return (status, result) => ({
    id,
    type: "tool_call",
    tool: call.name,
    arguments: call.input,
    status,
    ...(result === undefined ? {} : { result }),
  });
}
