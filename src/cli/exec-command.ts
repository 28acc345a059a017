/**
 * `spark exec "TASK"`: one task, no questions, then exit. Exit status 0 when the turn finished,
 * 1 when it failed, 2 for bad settings, 3 when the answer was cut off, 130 when a signal stopped it
 * (`exec-outcome.ts`).
 *
 * With `--json`, stdout carries one event per line, in the shapes of `codex exec --json`:
 * `thread.started`, `turn.started`, `item.started` / `item.completed` (agent_message,
 * command_execution, file_change, tool_call, error), `turn.completed` with usage, `turn.failed`,
 * and `error`; a cut-off or stopped turn ends with `turn.incomplete` (its `reason`) instead of
 * `turn.completed`. Without it, the answer streams to stdout and tool activity goes to stderr.
 *
 * `--worktree`: the task works in a worktree of its own (a copy outside git) and the user's files
 * stay as they are. At the end its result is committed to the branch `spark/exec-<session>` and
 * stderr says where (branch, path, files changed, how to see and land it); with `--json` a last
 * `worktree` event says the same. A task that changed nothing leaves no worktree behind.
 */
import type { AgentEvent } from "../agent/agent.js";
import type { ThreadItem } from "../agent/tools/index.js";
import { describeSandbox } from "../agent/sandbox/sandbox.js";
import { ImageFileError, imageDataUrl } from "../agent/images.js";
import { startRuntime, type ClientFlags } from "../client/agent-runtime.js";
import { startInProcessServer } from "./in-process-server.js";
import { describeInstructionFiles } from "../agent/context/session-context.js";
import {
  cutOffTurn,
  EXIT_CUT_OFF,
  EXIT_FAILED,
  EXIT_FINISHED,
  EXIT_STOPPED,
  STOPPED,
  type CutOffTurn,
} from "./exec-outcome.js";
import type { TaskWorkspace } from "../agent/worktree/task-workspace.js";
import {
  changeLines,
  changeSummary,
  commitTaskWorkspace,
  describeTaskWorkspace,
} from "../client/worktree-session.js";

export interface ExecOptions {
  json: boolean;
  /** Image files attached to the task (`--image`), sent as `input_image` parts. */
  images?: readonly string[];
  resume?: string | null;
}

export async function runExec(task: string, flags: ClientFlags, options: ExecOptions): Promise<number> {
  // A bad image path is a usage error before anything starts.
  const images: string[] = [];
  for (const path of options.images ?? []) {
    try {
      images.push(await imageDataUrl(path));
    } catch (error) {
      if (!(error instanceof ImageFileError)) throw error;
      process.stderr.write(`spark: --image ${error.message}\n`);
      return 2;
    }
  }
  const out = (line: Record<string, unknown>): void => {
    process.stdout.write(`${JSON.stringify(line)}\n`);
  };
  const note = (line: string): void => {
    process.stderr.write(`spark: ${line}\n`);
  };
  const runtime = await startRuntime({
    flags,
    interactive: false,
    progress: note,
    startServer: startInProcessServer,
    ...(options.resume === undefined ? {} : { resume: options.resume }),
  });
  const { agent } = runtime;
  const context = runtime.context.summary();
  if (options.json) {
    // What the session loaded (AGENTS.md files, skills, prompts) rides on the first event.
    out({
      type: "thread.started",
      thread_id: runtime.session.meta.id,
      instructions: context.instructions.map(({ path, bytes, truncated }) => ({ path, bytes, truncated })),
      skills: context.skills.map((skill) => skill.name),
      prompts: context.prompts.map((prompt) => prompt.name),
      ...(context.warnings.length > 0 ? { warnings: context.warnings } : {}),
      ...(runtime.taskWorkspace ? { worktree: worktreeJson(runtime.taskWorkspace) } : {}),
    });
  } else {
    note(
      `${runtime.inProcess ? "in-process server" : runtime.serverUrl}, model ${agent.model}, approval ${runtime.approval}`,
    );
    // Said once the sandbox probe answers (the request does not wait for it).
    void runtime.sandbox.then((sandbox) => note(describeSandbox(sandbox)));
    if (context.instructions.length > 0)
      note(`instructions: ${describeInstructionFiles(context.instructions)}`);
    if (context.skills.length > 0) note(`skills: ${context.skills.map((skill) => skill.name).join(", ")}`);
    if (runtime.taskWorkspace)
      note(`working in ${describeTaskWorkspace(runtime.taskWorkspace)}; ${runtime.root} stays as it is`);
  }
  if (!options.json) for (const warning of context.warnings) note(`warning: ${warning}`);
  // `spark exec "/NAME args"` runs the custom prompt NAME.
  const prompt = task.startsWith("/") ? runtime.context.expandPrompt(task) : undefined;

  let midLine = false;
  // The last main-lane response's cut, if it stopped short: the turn ends "cut off", never "done".
  let cutOff: CutOffTurn | undefined;
  let interrupted = false;
  let stopped = false;
  agent.on((event: AgentEvent) => {
    if (event.type === "turn.interrupted") stopped = true;
    if (event.type === "response.done" && event.lane === "")
      cutOff =
        event.status === "incomplete"
          ? cutOffTurn(event.reason, event.contextTokens, agent.contextWindow)
          : undefined;
    if (options.json) {
      const line = jsonEvent(event, cutOff);
      if (line) out(line);
      return;
    }
    switch (event.type) {
      case "text.delta":
        process.stdout.write(event.delta);
        midLine = !event.delta.endsWith("\n");
        return;
      case "item.completed":
        if (midLine && event.item.type === "agent_message") {
          process.stdout.write("\n");
          midLine = false;
        }
        if (event.item.type !== "agent_message") note(describeItem(event.item));
        return;
      case "steer":
        if (event.status === "failed") note(`steer refused: ${event.message ?? ""}`);
        return;
      case "compacted":
        note(`context compacted (${event.items} items kept)`);
        return;
      case "turn.completed":
        note(
          `${cutOff?.message ?? "done"}: ${event.usage.input_tokens} input tokens (${event.usage.cached_input_tokens} cached), ` +
            `${event.usage.output_tokens} output tokens`,
        );
        return;
      case "turn.failed":
        note(`failed: ${event.error.message}`);
        return;
      case "turn.interrupted":
        note(STOPPED.message);
        return;
      default:
        return;
    }
  });

  const onSignal = (): void => {
    if (interrupted) process.exit(EXIT_STOPPED);
    interrupted = true;
    agent.interrupt();
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  try {
    const ok = await agent.submit(prompt ?? task, images);
    if (runtime.taskWorkspace) {
      await reportWorktree(runtime.taskWorkspace, task, options.json ? out : undefined, note).catch(
        (error: unknown) => note(`worktree: ${error instanceof Error ? error.message : String(error)}`),
      );
    }
    if (stopped) return EXIT_STOPPED;
    if (!ok) return EXIT_FAILED;
    return cutOff === undefined ? EXIT_FINISHED : EXIT_CUT_OFF;
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    await runtime.close();
  }
}

function worktreeJson(ws: TaskWorkspace): Record<string, unknown> {
  return { kind: ws.kind, path: ws.path, ...(ws.branch ? { branch: ws.branch } : {}), base: ws.base };
}

/**
 * The end of a `--worktree` task: its changes committed to its branch and said where (stderr, and
 * a `worktree` event with `--json`); no changes: the worktree is removed.
 */
async function reportWorktree(
  ws: TaskWorkspace,
  task: string,
  out: ((line: Record<string, unknown>) => void) | undefined,
  note: (line: string) => void,
): Promise<void> {
  const { discardTaskWorkspace } = await import("../agent/worktree/task-workspace.js");
  const { taskChanges } = await import("../agent/worktree/task-changes.js");
  const changes = await taskChanges(ws);
  const files = changes.map(({ path, status, added, removed }) => ({ path, status, added, removed }));
  if (changes.length === 0) {
    await discardTaskWorkspace(ws);
    note("worktree: no changes; removed");
    out?.({ type: "worktree", ...worktreeJson(ws), files, removed: true });
    return;
  }
  const title = task.split("\n")[0]!.slice(0, 72);
  const commit = await commitTaskWorkspace(ws, `spark exec: ${title}`);
  out?.({ type: "worktree", ...worktreeJson(ws), ...(commit ? { commit } : {}), files, removed: false });
  if (ws.kind === "worktree" && ws.branch) {
    note(
      `result on branch ${ws.branch}${commit ? ` (commit ${commit.slice(0, 10)})` : ""}: ${changeSummary(changes)}`,
    );
    for (const line of changeLines(changes)) note(line);
    note(`worktree: ${ws.path}`);
    note(`see it: git diff ${ws.base.slice(0, 10)} ${ws.branch}`);
    note(`land it: git diff ${ws.base.slice(0, 10)} ${ws.branch} | git apply`);
    note(`drop it: git worktree remove --force ${ws.path} && git branch -D ${ws.branch}`);
  } else {
    note(`result in ${ws.path}: ${changeSummary(changes)}`);
    for (const line of changeLines(changes)) note(line);
  }
}

/**
 * The `--json` line for an agent event, or undefined for events it does not show. `cutOff`: the
 * turn's last response stopped short, so its end is `turn.incomplete`.
 */
function jsonEvent(event: AgentEvent, cutOff: CutOffTurn | undefined): Record<string, unknown> | undefined {
  switch (event.type) {
    case "turn.started":
      return { type: "turn.started" };
    case "item.started":
    case "item.completed":
      return { type: event.type, item: event.item };
    case "turn.completed":
      return cutOff === undefined
        ? { type: "turn.completed", usage: event.usage }
        : { type: "turn.incomplete", ...cutOff, usage: event.usage };
    case "turn.interrupted":
      return { type: "turn.incomplete", ...STOPPED, usage: event.usage };
    case "turn.failed":
      return { type: "turn.failed", error: event.error };
    case "steer":
      return event.status === "failed"
        ? { type: "error", message: `steer refused: ${event.message ?? ""}` }
        : undefined;
    case "compacted":
      return { type: "context.compacted", trigger: event.trigger, items: event.items };
    default:
      return undefined;
  }
}

function describeItem(item: ThreadItem): string {
  switch (item.type) {
    case "command_execution": {
      const output = item.aggregated_output.trimEnd();
      const shown = output.length > 400 ? `${output.slice(0, 400)}…` : output;
      return `$ ${item.command}  (${item.status}${item.exit_code === null ? "" : `, exit ${item.exit_code}`})${shown ? `\n${shown}` : ""}`;
    }
    case "file_change":
      return (
        `patch ${item.status}: ${item.changes.map((c) => `${c.kind} ${c.path}`).join(", ")}` +
        (item.error ? `\n${item.error}` : "")
      );
    case "tool_call":
      return `${item.tool} ${item.arguments} (${item.status})${item.status === "failed" && item.result ? `: ${item.result}` : ""}`;
    case "error":
      return `error: ${item.message}`;
    case "agent_message":
      return item.text;
  }
}
