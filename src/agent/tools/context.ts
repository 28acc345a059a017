/**
 * The tools' seam: what a tool call is, what the agent (or the app) gives the tools to run with
 * (`ToolContext`), what a run yields (`ToolRun`), and what each tool module's handler gets for one
 * call (`ToolCallScope`: the call, its item id, how to reply, how to ask the user). Types only.
 */
import type { TurnRecorder } from "../checkpoints/checkpoints.js";
import type { Skill } from "../context/skills.js";
import type { Workspace } from "../files/workspace.js";
import type { Hooks } from "../hooks/runner.js";
import type { Sandbox } from "../sandbox/sandbox.js";
import type { FileDiff, ThreadItem } from "../thread-item.js";
import type { ApprovalDecision, ApprovalMode } from "./approval.js";

/** A tool call from a response's output. */
export interface ToolCall {
  kind: "function" | "custom";
  callId: string;
  name: string;
  /** JSON arguments for `function` calls, the raw text for `custom` ones. */
  input: string;
}

export type ApprovalAnswer = "yes" | "no" | "always";
/** An answer, or a refusal with the user's reason (which the model sees). */
export type ApprovalReply = ApprovalAnswer | { answer: "no"; reason: string };

export interface ApprovalRequest {
  kind: "command" | "patch" | "tool";
  /** The command line (whole), the files a patch touches, or an MCP tool and its arguments. */
  summary: string;
  reason: string;
  /** For a patch: what it would change, per file, computed against the files as they are now. */
  diffs?: FileDiff[];
}

/** A whole-file rewrite for the `edit_file` tool. */
export interface RewriteRequest {
  path: string;
  original: string;
  instructions: string;
}

export interface RewriteResult {
  text: string;
  /** Why the rewrite stopped short (`max_output_tokens`, `cancelled`…); the file is then kept. */
  incomplete?: string;
  /** What the server verified while drafting from the original (Predicted Outputs), if it says. */
  prediction?: { accepted: number; rejected: number };
}

/**
 * The MCP servers' tools (mcp/manager.ts): named `mcp__SERVER__TOOL`, defined by the servers that
 * are ready, called through the same approvals as a command.
 */
export interface McpTools {
  /** Resolves when every server has started or failed (the agent waits before a turn's first request). */
  ready(): Promise<void>;
  definitions(): Record<string, unknown>[];
  /** The configured server a tool name belongs to. */
  serverOf(name: string): string | undefined;
  trusted(name: string): boolean;
  /** Why the tool cannot be called at all (its server is disabled or failed), if so. */
  unavailable(name: string): string | undefined;
  call(
    name: string,
    args: Record<string, unknown>,
    signal: AbortSignal,
  ): Promise<{ text: string; isError: boolean; images?: { mimeType: string; data: string }[] }>;
}

/** What the server says (`/v1/models` `vision`) about who sees images. */
export interface VisionInfo {
  /** The model asked about sees images. */
  sees: boolean;
  /** Some model of the server sees them (then `auto` routes an image to it). */
  anySees: boolean;
}

export interface ToolContext {
  workspace: Workspace;
  /** A promise while the sandbox is still being probed (a session's first request does not wait for it). */
  sandbox: Sandbox | Promise<Sandbox>;
  approval: ApprovalMode;
  /** Present in the interactive UI; without it, requests that need approval are refused. */
  ask?: (request: ApprovalRequest) => Promise<ApprovalReply>;
  commandTimeoutMs?: number;
  maxOutputBytes?: number;
  /** Secret environment variables (names or `*` globs) commands may see anyway (`--allow-env`). */
  allowEnv?: readonly string[];
  /**
   * Hands a task to a background agent (the app's deep tasks); present, it adds the `delegate`
   * tool. Resolves with what the model is told (the task started, or why not).
   */
  delegate?: (task: string) => Promise<string>;
  /**
   * Rewrites a file with the fast tier, the original as the prediction (Predicted Outputs), for the
   * `edit_file` tool; present, it adds that tool. The agent provides it.
   */
  rewrite?: (request: RewriteRequest, signal: AbortSignal) => Promise<RewriteResult>;
  /** The session's skills (see context/skills.ts); any present adds the `skill` tool that reads them. */
  skills?: readonly Skill[];
  /** The MCP servers' tools, when the config names servers. */
  mcp?: McpTools;
  /** The user's hooks (PreToolUse, PostToolUse around every call; the agent runs the others). */
  hooks?: Hooks;
  /** The session's model (tier) now; the agent provides it (it changes with `/tier`). */
  model?: () => string;
  /**
   * Whether `model` sees images, from the server's `/v1/models`; undefined when the server does not
   * say. An MCP result's images go to the model as `input_image` parts only when it sees: else
   * the request would be refused (`image_unsupported`), so they become a placeholder saying why.
   * A promise while the list is still being read (a client reads it beside its first answer, not
   * before): the result waits for it, so what the model gets does not depend on which came first.
   */
  vision?: (model: string) => VisionInfo | undefined | Promise<VisionInfo | undefined>;
  /** Records what each turn's writes and commands change, for `/undo` (checkpoints/checkpoints.ts). */
  checkpoints?: TurnRecorder;
}

export interface ToolRun {
  /** The item before the tool runs (status in_progress), when the tool has a visible start. */
  started?: ThreadItem;
  completed: ThreadItem;
  /** The `*_output` item sent back to the model. */
  output: Record<string, unknown>;
  /** What a file change did, per file (a patch, an edit_file rewrite), for display. */
  diffs?: FileDiff[];
}

/**
 * One call as a tool module's handler sees it. `approve` asks (or not) as the decision says and
 * returns why the call was declined, undefined when it may run; `approveWrite` does so for a file
 * write (a patch, a rewrite) as the approval mode decides. The runner holds the session's "always".
 */
export interface ToolCallScope {
  /** The display item's id. */
  id: string;
  call: ToolCall;
  context: ToolContext;
  signal: AbortSignal;
  onStarted: (item: ThreadItem) => void;
  /** The `*_output` item for the model, carrying `text`. */
  reply: (text: string) => Record<string, unknown>;
  approve(
    decision: ApprovalDecision,
    request: ApprovalRequest,
    key: string,
    diffs?: () => Promise<FileDiff[]>,
  ): Promise<string | undefined>;
  approveWrite(
    protectedPaths: string[],
    summary: string,
    diffs?: () => Promise<FileDiff[]>,
  ): Promise<string | undefined>;
}
