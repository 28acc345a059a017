/**
 * Runs the model's tool calls: the one place a call is checked, approved and run. Each call goes
 * between the user's PreToolUse and PostToolUse hooks, to its tool's module (one per tool or group,
 * see index.ts), and yields a display item (for the TUI, `spark exec --json` and the app) and the
 * output the model sees next. The runner holds the approvals the user gave with "always".
 */
import type { HookOutcome } from "../hooks/runner.js";
import { readSkill } from "../context/skills.js";
import { ToolError } from "../files/workspace.js";
import type { FileDiff, ThreadItem } from "../thread-item.js";
import { decidePatch, type ApprovalDecision } from "./approval.js";
import {
  errorText,
  optionalString,
  parseArguments,
  stringArg,
  summarize,
  toolCallItem,
} from "./call-helpers.js";
import type { ApprovalRequest, ToolCall, ToolCallScope, ToolContext, ToolRun } from "./context.js";

// Each tool's module (and what it needs: the patch engine, checkpoints, the sandbox's command
// runner, the file walker) loads at its first call: a session's first request goes out without them.
const patchTool = () => import("./patch.js");
const shellTool = () => import("./shell.js");
const readTools = () => import("./read-files.js");

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
    const scope: ToolCallScope = {
      id,
      call,
      context: this.context,
      signal,
      onStarted,
      reply,
      approve: (decision, request, key, diffs) => this.#approve(decision, request, key, diffs),
      approveWrite: (protectedPaths, summary, diffs) => this.#approveWrite(protectedPaths, summary, diffs),
    };
    try {
      if (call.name === "apply_patch") return await (await patchTool()).runApplyPatch(scope);
      const args = parseArguments(call);
      if (this.context.mcp && call.name.startsWith("mcp__"))
        return await (await import("./mcp.js")).runMcpTool(scope, args);
      if (call.name === "edit_file" && this.context.rewrite)
        return await (await import("./edit-file.js")).runEditFile(scope, args);
      if (call.name === "shell") return await (await shellTool()).runShellTool(scope, args);
      const item = toolCallItem(id, call);
      let text: string;
      if (call.name === "read_file") {
        text = await (await readTools()).readFileTool(this.context.workspace, args);
      } else if (call.name === "list_files") {
        text = await (await readTools()).listFilesTool(this.context.workspace, args);
      } else if (call.name === "search") {
        text = await (await readTools()).searchTool(this.context.workspace, args, signal);
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
