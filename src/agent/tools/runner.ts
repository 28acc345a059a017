/**
 * The agent's tools: their definitions as sent to the model (Responses API `tools`) and the one
 * place a model's tool call is checked, approved and run. Every call yields a display item (for
 * the TUI and `spark exec --json`) and the output text the model sees next.
 */
import { applyPatch, previewPatch, protectedWrites, type PatchFile } from "../files/apply-patch.js";
import {
  decideCommand,
  decideMcpTool,
  decidePatch,
  type ApprovalDecision,
  type ApprovalMode,
} from "./approval.js";
import type { HookOutcome, Hooks } from "../hooks/runner.js";
import { listFiles, readFile, searchFiles } from "../files/file-tools.js";
import type { Sandbox } from "../sandbox/sandbox.js";
import { commandEnvironment } from "../sandbox/secrets.js";
import { formatCommandOutput, runCommand } from "../sandbox/shell.js";
import { ToolError, type Workspace } from "../files/workspace.js";
import { readSkill, SKILL_TOOL_DEFINITION, type Skill } from "../context/skills.js";
import { patchPaths, type TurnRecorder } from "../checkpoints/checkpoints.js";
import { contentDiff } from "../files/file-diff.js";
import type { FileDiff } from "../thread-item.js";

export type { ThreadItem } from "../thread-item.js";
import type { ThreadItem } from "../thread-item.js";

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

const APPLY_PATCH_GRAMMAR = `Edits files with a patch. The input is the patch text itself, not JSON:
*** Begin Patch
*** Add File: path/new.txt
+every line of the new file, each starting with +
*** Update File: path/existing.ts
@@ optional line that locates the hunk, e.g. a function signature
 context line (starts with a space)
-line to remove
+line to add
*** Delete File: path/old.txt
*** End Patch
Paths are relative to the workspace. Give 3 lines of context around each change.`;

/** The tool definitions sent with every request. */
export const TOOL_DEFINITIONS: readonly Record<string, unknown>[] = [
  {
    type: "function",
    name: "shell",
    description:
      "Runs a shell command (bash -c) in the workspace and returns its exit code and output. Use it to build, " +
      "test, and inspect. Writes outside the workspace or into .git, and network access, are blocked when a " +
      "sandbox is active, and secret environment variables are removed; " +
      "set escalate: true (with a justification) to ask the user to run it outside the sandbox.",
    parameters: {
      type: "object",
      properties: {
        command: { type: "string", description: "The command line, run with bash -c." },
        workdir: { type: "string", description: "Directory relative to the workspace (default: its root)." },
        timeout_ms: { type: "number", description: "Kill the command after this long (default 120000)." },
        escalate: { type: "boolean", description: "Ask to run outside the sandbox." },
        justification: { type: "string", description: "Why escalation is needed, shown to the user." },
      },
      required: ["command"],
      additionalProperties: false,
    },
  },
  { type: "custom", name: "apply_patch", description: APPLY_PATCH_GRAMMAR },
  {
    type: "function",
    name: "read_file",
    description: "Reads a text file of the workspace, optionally a range of lines.",
    parameters: {
      type: "object",
      properties: {
        path: { type: "string" },
        offset: { type: "number", description: "First line to read, 1-based." },
        limit: { type: "number", description: "Number of lines (default 2000)." },
      },
      required: ["path"],
      additionalProperties: false,
    },
  },
  {
    type: "function",
    name: "list_files",
    description: "Lists the workspace's files (recursively, skipping what .gitignore ignores).",
    parameters: {
      type: "object",
      properties: { path: { type: "string", description: "Directory to list (default: the root)." } },
      additionalProperties: false,
    },
  },
  {
    type: "function",
    name: "search",
    description: "Searches the workspace's files for a regular expression (skipping .gitignore'd files).",
    parameters: {
      type: "object",
      properties: {
        pattern: { type: "string", description: "JavaScript regular expression." },
        path: { type: "string" },
        glob: { type: "string", description: "Only files whose name matches, e.g. *.ts" },
        ignore_case: { type: "boolean" },
      },
      required: ["pattern"],
      additionalProperties: false,
    },
  },
];

const DELEGATE_DEFINITION: Record<string, unknown> = {
  type: "function",
  name: "delegate",
  description:
    "Hands a self-contained task to a thorough background agent (the deep tier) on the same workspace, " +
    "and returns at once; the user is notified when it finishes and reviews its changes. Use it for slow, " +
    "thorough work (a refactor across files, a full test run and fix) while you keep helping in the foreground.",
  parameters: {
    type: "object",
    properties: { task: { type: "string", description: "What the background agent should do, in full." } },
    required: ["task"],
    additionalProperties: false,
  },
};

const EDIT_FILE_DEFINITION: Record<string, unknown> = {
  type: "function",
  name: "edit_file",
  description:
    "Edits one existing file by describing the change: give the new code for the parts that change and " +
    "mark unchanged stretches with a comment such as `// ... existing code ...`. A fast model rewrites the " +
    "whole file from it, with the original as its prediction, so large edits and many scattered changes " +
    "cost little. Prefer apply_patch for a small exact change; use edit_file when a patch would have to " +
    "restate much of the file.",
  parameters: {
    type: "object",
    properties: {
      path: { type: "string", description: "The file, relative to the workspace." },
      instructions: {
        type: "string",
        description: "The edit: the changed code in place, unchanged parts elided with comments.",
      },
    },
    required: ["path", "instructions"],
    additionalProperties: false,
  },
};

/** Largest file `edit_file` rewrites (the whole file goes to the model and back). */
const MAX_REWRITE_BYTES = 256 * 1024;

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

/** Runs tool calls. Holds the approvals the user gave with "always" for the rest of the session. */
export class ToolRunner {
  /** Keys of the requests the user answered "always": `command:LINE`, `patch`, `patch:protected:PATHS`. */
  readonly #always = new Set<string>();
  #nextItem: () => string;
  /** Tells the user something went wrong beside the call (a hook that failed). */
  #report: (message: string) => void;

  constructor(
    private readonly context: ToolContext,
    nextItemId: () => string,
    report: (message: string) => void = () => {},
  ) {
    this.#nextItem = nextItemId;
    this.#report = report;
  }

  /**
   * Runs one call between the user's PreToolUse hooks (which may block it: the model gets the
   * reason as the tool's output) and PostToolUse hooks (whose exit-2 text joins the output).
   */
  async run(call: ToolCall, signal: AbortSignal, onStarted: (item: ThreadItem) => void): Promise<ToolRun> {
    const hooks = this.context.hooks;
    if (!hooks) return this.#dispatch(call, signal, onStarted);
    const fields = { tool_name: call.name, tool_input: hookToolInput(call) };
    // A hook runner that throws is a failure to report, never a reason to lose the call.
    const failed = (error: unknown): HookOutcome => ({ failures: [`hooks failed: ${String(error)}`] });
    const pre = await hooks.run("PreToolUse", fields, call.name).catch(failed);
    for (const failure of pre.failures) this.#report(failure);
    if (pre.blocked !== undefined) return this.#blocked(call, pre.blocked);
    const run = await this.#dispatch(call, signal, onStarted);
    const post = await hooks
      .run("PostToolUse", { ...fields, tool_response: run.output.output }, call.name)
      .catch(failed);
    for (const failure of post.failures) this.#report(failure);
    if (post.feedback !== undefined) {
      const note = `[PostToolUse hook] ${post.feedback}`;
      const output = run.output.output;
      run.output = {
        ...run.output,
        // An output with images is a list of parts: the note is one more text part.
        output: Array.isArray(output)
          ? [...(output as unknown[]), { type: "input_text", text: note }]
          : `${String(output)}\n\n${note}`,
      };
    }
    return run;
  }

  /** A call a PreToolUse hook blocked: declined, with the hook's reason for the model. */
  #blocked(call: ToolCall, reason: string): ToolRun {
    const id = this.#nextItem();
    const text = `Blocked by the user's PreToolUse hook: ${reason}`;
    const output = {
      type: call.kind === "custom" ? "custom_tool_call_output" : "function_call_output",
      call_id: call.callId,
      output: text,
    };
    let completed: ThreadItem;
    if (call.name === "shell") {
      let command = call.input;
      try {
        const parsed = JSON.parse(call.input) as { command?: unknown };
        if (typeof parsed.command === "string") command = parsed.command;
        else if (Array.isArray(parsed.command)) command = parsed.command.join(" ");
      } catch {
        // Shown as sent.
      }
      completed = {
        id,
        type: "command_execution",
        command,
        aggregated_output: text,
        exit_code: null,
        status: "declined",
      };
    } else if (call.name === "apply_patch" || call.name === "edit_file") {
      completed = { id, type: "file_change", changes: [], status: "declined", error: text };
    } else {
      completed = {
        id,
        type: "tool_call",
        tool: call.name,
        arguments: call.input,
        status: "failed",
        result: text,
      };
    }
    return { completed, output };
  }

  async #dispatch(
    call: ToolCall,
    signal: AbortSignal,
    onStarted: (item: ThreadItem) => void,
  ): Promise<ToolRun> {
    const id = this.#nextItem();
    const outputType = call.kind === "custom" ? "custom_tool_call_output" : "function_call_output";
    const reply = (text: string): Record<string, unknown> => ({
      type: outputType,
      call_id: call.callId,
      output: text,
    });
    try {
      if (call.name === "apply_patch") return await this.#patch(id, call, onStarted, reply);
      const args = parseArguments(call);
      if (this.context.mcp && call.name.startsWith("mcp__"))
        return await this.#mcpCall(id, call, args, signal, onStarted, reply);
      if (call.name === "edit_file" && this.context.rewrite)
        return await this.#editFile(id, args, signal, onStarted, reply);
      if (call.name === "shell") return await this.#shell(id, args, signal, onStarted, reply);
      const item = toolCallItem(id, call);
      let text: string;
      if (call.name === "read_file") {
        const read = await readFile(this.context.workspace, {
          path: stringArg(args, "path"),
          ...optionalNumber(args, "offset"),
          ...optionalNumber(args, "limit"),
        });
        text = read.truncated
          ? `${read.text}\n[file has ${read.totalLines} lines; read more with offset]`
          : read.text;
      } else if (call.name === "list_files") {
        const list = await listFiles(this.context.workspace, optionalString(args, "path"));
        text = list.files.join("\n") + (list.truncated ? "\n[more files not shown]" : "");
        if (list.files.length === 0) text = "(no files)";
      } else if (call.name === "search") {
        const found = await searchFiles(
          this.context.workspace,
          {
            pattern: stringArg(args, "pattern"),
            ...optionalString(args, "path"),
            ...optionalString(args, "glob"),
            ...(args.ignore_case === true ? { ignoreCase: true } : {}),
          },
          { signal },
        );
        text =
          found.matches.map((m) => `${m.path}:${m.line}: ${m.text}`).join("\n") +
          (found.truncated ? "\n[more matches not shown]" : "");
        if (found.matches.length === 0) text = "no matches";
      } else if (call.name === "delegate" && this.context.delegate) {
        text = await this.context.delegate(stringArg(args, "task"));
      } else if (call.name === "skill" && this.context.skills && this.context.skills.length > 0) {
        text = await readSkill(
          this.context.skills,
          stringArg(args, "name"),
          optionalString(args, "file").file,
        );
      } else {
        throw new ToolError(
          "invalid_argument",
          `unknown tool "${call.name}"; the tools are shell, apply_patch, read_file, list_files and search` +
            (this.context.rewrite ? ", edit_file" : "") +
            (this.context.delegate ? ", delegate" : ""),
        );
      }
      return { completed: item("completed", summarize(text)), output: reply(text) };
    } catch (error) {
      const message = errorText(error);
      return {
        completed: {
          id,
          type: "tool_call",
          tool: call.name,
          arguments: call.input,
          status: "failed",
          result: message,
        },
        output: reply(message),
      };
    }
  }

  /** `diffs`: what a patch would change, computed when the user is about to be asked (it may throw). */
  async #approve(
    decision: ApprovalDecision,
    request: ApprovalRequest,
    key: string,
    diffs?: () => Promise<FileDiff[]>,
  ): Promise<string | undefined> {
    if (decision.action === "run") return undefined;
    if (decision.action === "refuse") return decision.reason;
    if (this.#always.has(key)) return undefined;
    if (!this.context.ask) return `${decision.reason}; no one can approve it in this mode`;
    const reply = await this.context.ask(diffs ? { ...request, diffs: await diffs() } : request);
    if (typeof reply === "object") return `the user declined to run this: ${reply.reason}`;
    if (reply === "always") this.#always.add(key);
    return reply === "no" ? "the user declined to run this" : undefined;
  }

  /**
   * The approval a file write needs (a patch, a rewrite), as the mode decides. "Always" for ordinary
   * writes never covers protected paths; for those it covers the same ones.
   */
  #approveWrite(
    protectedPaths: string[],
    summary: string,
    diffs?: () => Promise<FileDiff[]>,
  ): Promise<string | undefined> {
    const decision = decidePatch(this.context.approval, {
      interactive: this.context.ask !== undefined,
      protectedPaths,
    });
    const key = protectedPaths.length > 0 ? `patch:protected:${protectedPaths.sort().join("\0")}` : "patch";
    return this.#approve(
      decision,
      { kind: "patch", summary, reason: decision.action === "ask" ? decision.reason : "" },
      key,
      diffs,
    );
  }

  async #shell(
    id: string,
    args: Record<string, unknown>,
    signal: AbortSignal,
    onStarted: (item: ThreadItem) => void,
    reply: (text: string) => Record<string, unknown>,
  ): Promise<ToolRun> {
    const raw = args.command;
    const argv =
      Array.isArray(raw) && raw.every((a) => typeof a === "string") ? (raw as string[]) : undefined;
    const command = argv ?? ["bash", "-c", stringArg(args, "command")];
    const shown = argv ? argv.join(" ") : stringArg(args, "command");
    const escalate = args.escalate === true;
    const item = (
      status: "in_progress" | "completed" | "failed" | "declined",
      output = "",
      exitCode: number | null = null,
    ): ThreadItem => ({
      id,
      type: "command_execution",
      command: shown,
      aggregated_output: output,
      exit_code: exitCode,
      status,
    });
    let cwd: string;
    try {
      cwd = await this.context.workspace.resolve(
        typeof args.workdir === "string" && args.workdir !== "" ? args.workdir : ".",
        "read",
      );
    } catch (error) {
      // A workdir outside the workspace (or missing): the command never runs, but it is still a command.
      const message = errorText(error);
      return { completed: item("failed", message), output: reply(message) };
    }
    const sandbox = await this.context.sandbox;
    const sandboxed = sandbox.kind !== "none";
    const decision = decideCommand(this.context.approval, command, {
      sandboxed,
      escalationRequested: escalate,
      interactive: this.context.ask !== undefined,
    });
    const declined = await this.#approve(
      decision,
      {
        kind: "command",
        summary: shown,
        reason:
          decision.action === "ask"
            ? escalate && typeof args.justification === "string"
              ? `${decision.reason}: ${args.justification}`
              : decision.reason
            : "",
      },
      `command:${shown}`,
    );
    if (declined !== undefined) {
      return { completed: item("declined", declined), output: reply(`Command not run: ${declined}`) };
    }
    // An approved escalation runs outside the sandbox; everything else inside it when there is one.
    const runOutside = escalate && decision.action === "ask";
    const started = item("in_progress");
    onStarted(started);
    await this.context.checkpoints?.beforeCommand();
    const result = await runCommand(command, {
      workspaceRoot: this.context.workspace.root,
      cwd,
      sandbox: runOutside ? { kind: "none", reason: "approved to run outside the sandbox" } : sandbox,
      ...(typeof args.timeout_ms === "number" ? { timeoutMs: args.timeout_ms } : {}),
      ...(this.context.commandTimeoutMs === undefined || typeof args.timeout_ms === "number"
        ? {}
        : { timeoutMs: this.context.commandTimeoutMs }),
      ...(this.context.maxOutputBytes === undefined ? {} : { maxOutputBytes: this.context.maxOutputBytes }),
      env: commandEnvironment(process.env, this.context.allowEnv),
      signal,
    });
    await this.context.checkpoints?.afterCommand();
    const ok = result.exitCode === 0 && !result.timedOut && !result.cancelled;
    return {
      started,
      completed: item(ok ? "completed" : "failed", result.output, result.exitCode),
      output: reply(formatCommandOutput(result)),
    };
  }

  async #mcpCall(
    id: string,
    call: ToolCall,
    args: Record<string, unknown>,
    signal: AbortSignal,
    onStarted: (item: ThreadItem) => void,
    reply: (text: string) => Record<string, unknown>,
  ): Promise<ToolRun> {
    const mcp = this.context.mcp!;
    const item = toolCallItem(id, call);
    const server = mcp.serverOf(call.name);
    if (server === undefined) {
      const message = `unknown tool "${call.name}": no MCP server of that name is configured`;
      return { completed: item("failed", message), output: reply(message) };
    }
    const unavailable = mcp.unavailable(call.name);
    if (unavailable !== undefined)
      return { completed: item("failed", unavailable), output: reply(unavailable) };
    const decision = decideMcpTool(this.context.approval, {
      server,
      trusted: mcp.trusted(call.name),
      interactive: this.context.ask !== undefined,
    });
    const declined = await this.#approve(
      decision,
      {
        kind: "tool",
        summary: `${call.name} ${call.input}`.slice(0, 500),
        reason: decision.action === "ask" ? decision.reason : "",
      },
      `tool:${call.name}`,
    );
    if (declined !== undefined) {
      return { completed: item("failed", declined), output: reply(`Tool not run: ${declined}`) };
    }
    const started = item("in_progress");
    onStarted(started);
    try {
      // An MCP server may change files too (a filesystem server): recorded as a command's changes.
      await this.context.checkpoints?.beforeCommand();
      const result = await mcp
        .call(call.name, args, signal)
        .finally(() => this.context.checkpoints?.afterCommand());
      const images = result.images ?? [];
      const model = this.context.model?.() ?? "spark";
      const vision = images.length > 0 ? await this.context.vision?.(model) : undefined;
      const sees = vision?.sees === true && images.length > 0;
      const notes = images.map((image) => imageNote(image, sees ? undefined : unseenReason(model, vision)));
      const shown = [result.text, ...notes].filter((line) => line !== "").join("\n");
      const completed = item(result.isError ? "failed" : "completed", summarize(shown));
      if (!sees) return { started, completed, output: reply(shown) };
      // The text, then each image as a data URL: the server routes `auto` to a model that sees.
      const parts = [
        ...(result.text === "" ? [] : [{ type: "input_text", text: result.text }]),
        ...images.map((image) => ({
          type: "input_image",
          image_url: `data:${image.mimeType};base64,${image.data}`,
        })),
      ];
      return { started, completed, output: { ...reply(""), output: parts } };
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      return { started, completed: item("failed", message), output: reply(message) };
    }
  }

  async #editFile(
    id: string,
    args: Record<string, unknown>,
    signal: AbortSignal,
    onStarted: (item: ThreadItem) => void,
    reply: (text: string) => Record<string, unknown>,
  ): Promise<ToolRun> {
    const path = stringArg(args, "path");
    const instructions = stringArg(args, "instructions");
    const changes = [{ path, kind: "update" as const }];
    const item = (
      status: "in_progress" | "completed" | "failed" | "declined",
      error?: string,
    ): ThreadItem => ({
      id,
      type: "file_change",
      changes,
      status,
      ...(error === undefined ? {} : { error }),
    });
    const workspace = this.context.workspace;
    // Where the path lands (a link to a file inside the workspace is that file), read and later
    // replaced there through the confined layer.
    const target = await workspace.locate(path);
    const bytes = await workspace
      .readFile(target.rel, { final: "entry", maxBytes: MAX_REWRITE_BYTES })
      .catch((error: unknown) => {
        if (error instanceof ToolError && error.code === "too_large") return undefined;
        throw error;
      });
    if (bytes === undefined || bytes.length > MAX_REWRITE_BYTES) {
      throw new ToolError(
        "invalid_argument",
        `${path} has more than ${MAX_REWRITE_BYTES} bytes; edit_file rewrites files up to that: use apply_patch`,
      );
    }
    if (bytes.includes(0)) throw new ToolError("invalid_argument", `${path} is binary; edit_file edits text`);
    const original = bytes.toString("utf8");
    const part = target.protectedPart;
    const protectedPaths = part === undefined ? [] : [part];
    // A write that is refused outright is refused before the rewrite costs anything.
    const refused = decidePatch(this.context.approval, {
      interactive: this.context.ask !== undefined,
      protectedPaths,
    });
    if (refused.action === "refuse") {
      return {
        completed: item("declined", refused.reason),
        output: reply(`Edit not applied: ${refused.reason}`),
      };
    }
    const started = item("in_progress");
    onStarted(started);
    try {
      const result = await this.context.rewrite!({ path, original, instructions }, signal);
      const predicted = result.prediction
        ? `; ${result.prediction.accepted} predicted tokens accepted, ${result.prediction.rejected} rejected`
        : "";
      if (signal.aborted) throw new ToolError("cancelled", "interrupted by the user; the file is unchanged");
      if (result.incomplete !== undefined) {
        throw new ToolError(
          "incomplete",
          `the rewrite did not finish (${result.incomplete}${predicted}); the file is unchanged`,
        );
      }
      let text = stripFence(result.text);
      if (original.endsWith("\n") && !text.endsWith("\n")) text += "\n";
      if (text.trim() === "" && original.trim() !== "") {
        throw new ToolError("invalid_argument", "the rewrite came back empty; the file is unchanged");
      }
      // Asked after the rewrite, so that the approval shows its diff (diff-first).
      const diffs = [contentDiff(path, original, text)];
      const declined = await this.#approveWrite(protectedPaths, `update ${path}`, () =>
        Promise.resolve(diffs),
      );
      if (declined !== undefined) {
        return {
          started,
          completed: item("declined", declined),
          output: reply(`Edit not applied: ${declined}`),
        };
      }
      await this.context.checkpoints?.beforeWrite([path]);
      await workspace.writeFile(target.rel, text, { allowProtected: protectedPaths.length > 0 });
      return {
        started,
        completed: item("completed"),
        output: reply(`Rewrote ${path} (${lineCount(original)} → ${lineCount(text)} lines${predicted}).`),
        diffs,
      };
    } catch (error) {
      const message = errorText(error);
      return { started, completed: item("failed", message), output: reply(message) };
    }
  }

  async #patch(
    id: string,
    call: ToolCall,
    onStarted: (item: ThreadItem) => void,
    reply: (text: string) => Record<string, unknown>,
  ): Promise<ToolRun> {
    // Models also send apply_patch as a function with {"input": PATCH} (or {"patch": …}).
    let text = call.input;
    if (call.kind === "function") {
      const args = parseArguments(call);
      text = typeof args.input === "string" ? args.input : typeof args.patch === "string" ? args.patch : "";
    }
    const touched = [...text.matchAll(/^\*\*\* (Add|Update|Delete) File: (.+)$/gm)].map((m) => ({
      path: m[2]!.trim(),
      kind: (m[1] === "Add" ? "add" : m[1] === "Update" ? "update" : "delete") as "add" | "update" | "delete",
    }));
    const item = (
      status: "in_progress" | "completed" | "failed" | "declined",
      changes = touched,
      error?: string,
    ): ThreadItem => ({
      id,
      type: "file_change",
      changes,
      status,
      ...(error === undefined ? {} : { error }),
    });
    const protectedPaths = await protectedWrites(this.context.workspace, text);
    let declined: string | undefined;
    try {
      // The diff-first approval: what the patch would change, against the files as they are now,
      // computed only when the user is asked. A patch that cannot apply fails then, unasked.
      declined = await this.#approveWrite(
        protectedPaths,
        touched.map((c) => `${c.kind} ${c.path}`).join(", "),
        async () => patchDiffs((await previewPatch(this.context.workspace, text)).files),
      );
    } catch (error) {
      const message = errorText(error);
      return { completed: item("failed", touched, message), output: reply(message) };
    }
    if (declined !== undefined) {
      return {
        completed: item("declined", touched, declined),
        output: reply(`Patch not applied: ${declined}`),
      };
    }
    const started = item("in_progress");
    onStarted(started);
    try {
      await this.context.checkpoints?.beforeWrite(patchPaths(text));
      const result = await applyPatch(this.context.workspace, text, {
        allowProtected: protectedPaths.length > 0,
      });
      return {
        started,
        completed: item(
          "completed",
          result.changes.map((c) => ({ path: c.movedTo ?? c.path, kind: c.kind })),
        ),
        output: reply(result.summary),
        diffs: patchDiffs(result.files),
      };
    } catch (error) {
      const message = errorText(error);
      return { started, completed: item("failed", touched, message), output: reply(message) };
    }
  }
}

function patchDiffs(files: readonly PatchFile[]): FileDiff[] {
  return files.map((file) => contentDiff(file.path, file.before, file.after));
}

/** A call's input as a hook sees it (`tool_input`): the JSON arguments, or `{input}` for raw text. */
function hookToolInput(call: ToolCall): unknown {
  if (call.kind === "custom") return { input: call.input };
  try {
    return JSON.parse(call.input || "{}") as unknown;
  } catch {
    return { input: call.input };
  }
}

/** A rewrite the model wrapped in a code fence, unwrapped. */
function stripFence(text: string): string {
  const match = /^\s*```[^\n]*\n([\s\S]*?)\n?```\s*$/.exec(text);
  return match ? `${match[1]}\n` : text;
}

function lineCount(text: string): number {
  return text === "" ? 0 : text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
}

function parseArguments(call: ToolCall): Record<string, unknown> {
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

function stringArg(args: Record<string, unknown>, name: string): string {
  const value = args[name];
  if (typeof value !== "string" || value === "") {
    throw new ToolError("invalid_argument", `"${name}" is required and must be a non-empty string`);
  }
  return value;
}

function optionalString<K extends string>(args: Record<string, unknown>, name: K): { [P in K]?: string } {
  const value = args[name];
  return (typeof value === "string" && value !== "" ? { [name]: value } : {}) as { [P in K]?: string };
}

function optionalNumber<K extends string>(args: Record<string, unknown>, name: K): { [P in K]?: number } {
  const value = args[name];
  return (typeof value === "number" && Number.isFinite(value) ? { [name]: value } : {}) as {
    [P in K]?: number;
  };
}

function errorText(error: unknown): string {
  if (error instanceof ToolError) return error.message;
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}

/** Display text of a tool result: the first lines only. */
/** `[image/png, 12 KB: …]`: an MCP result's image, shown to the model or not (`unseen` says why). */
function imageNote(image: { mimeType: string; data: string }, unseen: string | undefined): string {
  const bytes = Buffer.byteLength(image.data, "base64");
  const size = bytes < 1024 ? `${bytes} bytes` : `${Math.round(bytes / 1024)} KB`;
  return `[${image.mimeType}, ${size}: ${unseen === undefined ? "sent to the model" : `not shown, ${unseen}`}]`;
}

function unseenReason(model: string, vision: VisionInfo | undefined): string {
  if (vision === undefined) return `the server does not say whether the ${model} tier can see images`;
  if (!vision.anySees) return "no model on this server can see images";
  return `the ${model} tier cannot see images; /tier auto routes to a model that can`;
}

function summarize(text: string): string {
  const lines = text.split("\n");
  return lines.length <= 20 ? text : `${lines.slice(0, 20).join("\n")}\n… ${lines.length - 20} more lines`;
}

/** The transcript's item for a generic tool call, in the state given (with its result once known). */
function toolCallItem(
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
