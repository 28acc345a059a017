/**
 * The agent's tools, as the rest of Spark imports them. The registry: the definitions sent to the
 * model (`TOOL_DEFINITIONS`, in this order, and `toolDefinitions` for a context, which adds the
 * tools the context can run); `runner.ts` runs a call. One module per tool or group: `shell.ts`,
 * `patch.ts` (apply_patch), `read-files.ts` (read_file, list_files, search), `edit-file.ts`,
 * `delegate.ts`, `mcp.ts` (MCP servers' tools), the skill tool in context/skills.ts; their shared
 * types in `context.ts`, the approval modes in `approval.ts`. The built-in definitions live in
 * `definitions.ts`, apart from the tools' code, which the runner loads at a tool's first call.
 */
import { SKILL_TOOL_DEFINITION } from "../context/skills.js";
import type { ToolContext } from "./context.js";
import { DELEGATE_DEFINITION } from "./delegate.js";
import {
  APPLY_PATCH_DEFINITION,
  EDIT_FILE_DEFINITION,
  LIST_FILES_DEFINITION,
  READ_FILE_DEFINITION,
  SEARCH_DEFINITION,
  SHELL_DEFINITION,
} from "./definitions.js";

export type {
  ApprovalAnswer,
  ApprovalReply,
  ApprovalRequest,
  McpTools,
  RewriteRequest,
  RewriteResult,
  ToolCall,
  ToolContext,
  ToolRun,
  VisionInfo,
} from "./context.js";
export type { ThreadItem } from "../thread-item.js";
export { ToolRunner } from "./runner.js";

/** The tool definitions sent with every request. */
export const TOOL_DEFINITIONS: readonly Record<string, unknown>[] = [
  SHELL_DEFINITION,
  APPLY_PATCH_DEFINITION,
  READ_FILE_DEFINITION,
  LIST_FILES_DEFINITION,
  SEARCH_DEFINITION,
];

/** The tool definitions for a context: the standard ones, plus `edit_file` and `delegate` where they can run. */
export function toolDefinitions(context: ToolContext): readonly Record<string, unknown>[] {
  const extra = [
    ...(context.rewrite ? [EDIT_FILE_DEFINITION] : []),
    ...(context.delegate ? [DELEGATE_DEFINITION] : []),
    ...(context.skills && context.skills.length > 0 ? [SKILL_TOOL_DEFINITION] : []),
    ...(context.mcp ? context.mcp.definitions() : []),
  ];
  return extra.length > 0 ? [...TOOL_DEFINITIONS, ...extra] : TOOL_DEFINITIONS;
}
