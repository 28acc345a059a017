/**
 * Runs the user's hooks (see config.ts) at agent events. Every matching command of an event starts
 * at once (as Claude Code and Codex do), as `bash -c COMMAND` in the workspace, with the event as
 * one JSON object on stdin (`session_id`, `transcript_path`, `cwd`, `hook_event_name`, and the
 * event's fields: `tool_name` and `tool_input`, `tool_response`, `prompt`), its own process group
 * (killed whole at its timeout) and the user's environment plus `SPARK_PROJECT_DIR`.
 *
 * What a hook's result means, as in Claude Code:
 * - exit 0: fine; stdout may hold a JSON decision, `{"decision": "block", "reason"}` or
 *   `{"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason"}}`.
 * - exit 2: PreToolUse and UserPromptSubmit are blocked, with stderr as the reason (the model sees
 *   it for a tool call); PostToolUse hands stderr to the model with the tool's output.
 * - anything else (another exit code, a timeout, a command that cannot start): the hook failed;
 *   the failure is reported to the user and the agent goes on. Never fatal.
 *
 * Hooks come only from the user's config file (never from the workspace's files: a cloned
 * repository must not run commands on open). A hook that runs code from the workspace (which the
 * sandboxed agent can write: a script there, package.json scripts, a Makefile…) is refused unless
 * its config entry says `"trustWorkspace": true` (workspace-code.ts): it never runs, and
 * `refused` says why, for a one-line warning at start.
 */
import { spawn } from "node:child_process";
import { flattenHooks, type HookCommand, type HookEventName, type HooksConfig } from "./config.js";
import { workspaceCodeOf } from "./workspace-code.js";

/** What the event's hooks decided. */
export interface HookOutcome {
  /** A hook blocked the action; the reason (for the model, or the user). */
  blocked?: string;
  /** Text hooks handed to the model (PostToolUse's exit 2). */
  feedback?: string;
  /** Hooks that failed, one line each, for the user. */
  failures: string[];
}

/** The seam the agent calls (the tool runner for tool events, the turn loop for the others). */
export interface Hooks {
  /** Runs the event's matching hooks; `tool` is the tool's name, for the tool events' matchers. */
  run(event: HookEventName, fields: Record<string, unknown>, tool?: string): Promise<HookOutcome>;
}

export interface HookRunnerOptions {
  /** The workspace: where hooks run, and `cwd` in their input. */
  cwd: string;
  sessionId?: string;
  transcriptPath?: string;
}

/** Most output kept of one hook's stdout or stderr. */
const MAX_OUTPUT = 64 * 1024;

export class HookRunner implements Hooks {
  readonly #commands: HookCommand[] = [];
  /** One line per hook refused because it runs code from the workspace, for the user. */
  readonly refused: string[] = [];

  constructor(
    config: HooksConfig | undefined,
    private readonly options: HookRunnerOptions,
  ) {
    for (const hook of flattenHooks(config)) {
      const reason = hook.trustWorkspace ? undefined : workspaceCodeOf(hook.command, options.cwd);
      if (reason === undefined) this.#commands.push(hook);
      else
        this.refused.push(
          `${hook.event} hook \`${shorten(hook.command)}\` not run: ${reason}, which the agent can write; ` +
            `add "trustWorkspace": true to it in your config to run it anyway`,
        );
    }
  }

  get size(): number {
    return this.#commands.length;
  }

  async run(event: HookEventName, fields: Record<string, unknown>, tool?: string): Promise<HookOutcome> {
    const matching = this.#commands.filter(
      (hook) =>
        hook.event === event && (hook.matcher === undefined || tool === undefined || hook.matcher.test(tool)),
    );
    const outcome: HookOutcome = { failures: [] };
    if (matching.length === 0) return outcome;
    const input = JSON.stringify({
      session_id: this.options.sessionId ?? "",
      transcript_path: this.options.transcriptPath ?? "",
      cwd: this.options.cwd,
      hook_event_name: event,
      ...fields,
    });
    const results = await Promise.all(matching.map((hook) => this.#exec(hook, input)));
    const blocks: string[] = [];
    const feedback: string[] = [];
    for (const [index, result] of results.entries()) {
      const hook = matching[index]!;
      const name = `${event} hook \`${shorten(hook.command)}\``;
      if (result.error !== undefined) {
        outcome.failures.push(`${name} failed: ${result.error}`);
        continue;
      }
      const blocking = event === "PreToolUse" || event === "UserPromptSubmit";
      if (result.code === 2) {
        const reason = result.stderr.trim() || result.stdout.trim() || "blocked by a hook";
        if (blocking) blocks.push(reason);
        else if (event === "PostToolUse") feedback.push(reason);
        else outcome.failures.push(`${name} exited with 2: ${shorten(reason, 500)}`);
        continue;
      }
      if (result.code !== 0) {
        const detail = (result.stderr.trim() || result.stdout.trim()).split("\n").slice(-3).join(" ");
        outcome.failures.push(
          `${name} failed: exit code ${result.code}${detail ? `: ${shorten(detail, 500)}` : ""}`,
        );
        continue;
      }
      const decision = jsonDecision(result.stdout);
      if (decision !== undefined) {
        if (blocking) blocks.push(decision);
        else if (event === "PostToolUse") feedback.push(decision);
      }
    }
    if (blocks.length > 0) outcome.blocked = blocks.join("\n");
    if (feedback.length > 0) outcome.feedback = feedback.join("\n");
    return outcome;
  }

  #exec(
    hook: HookCommand,
    input: string,
  ): Promise<{ code: number | null; stdout: string; stderr: string; error?: string }> {
    return new Promise((resolve) => {
      let stdout = "";
      let stderr = "";
      let timedOut = false;
      const child = spawn("bash", ["-c", hook.command], {
        cwd: this.options.cwd,
        env: { ...process.env, SPARK_PROJECT_DIR: this.options.cwd },
        stdio: ["pipe", "pipe", "pipe"],
        // Its own process group, so a timeout kills what it started too.
        detached: true,
      });
      const killGroup = (): void => {
        try {
          if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
        } catch {
          // Already gone.
        }
      };
      const timer = setTimeout(() => {
        timedOut = true;
        killGroup();
      }, hook.timeoutMs);
      child.stdout.setEncoding("utf8").on("data", (chunk: string) => {
        if (stdout.length < MAX_OUTPUT) stdout += chunk;
      });
      child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
        if (stderr.length < MAX_OUTPUT) stderr += chunk;
      });
      // A hook that does not read its input must not fail on EPIPE.
      child.stdin.on("error", () => {});
      child.stdin.end(input);
      child.once("error", (error) => {
        clearTimeout(timer);
        resolve({ code: null, stdout, stderr, error: error.message });
      });
      child.once("close", (code, signal) => {
        clearTimeout(timer);
        // Whatever it left running in its group goes with it.
        killGroup();
        if (timedOut) resolve({ code, stdout, stderr, error: `timed out after ${hook.timeoutMs} ms` });
        else if (code === null) resolve({ code, stdout, stderr, error: `killed by ${signal ?? "a signal"}` });
        else resolve({ code, stdout, stderr });
      });
    });
  }
}

/** A block (or PostToolUse's feedback) a hook printed as JSON on stdout, as Claude Code reads it. */
function jsonDecision(stdout: string): string | undefined {
  const text = stdout.trim();
  if (!text.startsWith("{")) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof json !== "object" || json === null) return undefined;
  const record = json as {
    decision?: unknown;
    reason?: unknown;
    hookSpecificOutput?: { permissionDecision?: unknown; permissionDecisionReason?: unknown };
  };
  if (record.decision === "block")
    return typeof record.reason === "string" ? record.reason : "blocked by a hook";
  const specific = record.hookSpecificOutput;
  if (specific?.permissionDecision === "deny") {
    return typeof specific.permissionDecisionReason === "string"
      ? specific.permissionDecisionReason
      : "blocked by a hook";
  }
  return undefined;
}

function shorten(text: string, max = 60): string {
  const line = text.replace(/\s+/g, " ").trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}
