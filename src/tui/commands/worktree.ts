/**
 * The `--worktree` session's commands: /apply lands the session's changes in the user's files (a
 * 3-way merge, all or nothing: a conflict writes nothing) and /discard drops them, the session going
 * on in a fresh worktree made from the user's files as they are now. (What is left at /quit is
 * leaveTaskWorkspace's.)
 */
import { dim, green, red, yellow } from "../style.js";
import type { Command, CommandCall, Tui } from "./command.js";

/** `/apply`: the `--worktree` session's changes land in the user's files (all or nothing). */
async function applySession(tui: Tui): Promise<void> {
  const ws = tui.runtime?.taskWorkspace;
  if (!ws)
    return tui.screen.line(
      yellow("/apply is for a session started with --worktree; this one works in place"),
    );
  const { applyTaskWorkspace, taskChanges } = await import("../../agent/worktree/task-changes.js");
  const changes = await taskChanges(ws);
  if (changes.length === 0) return tui.screen.line(dim("nothing to apply: the session changed no files"));
  const result = await applyTaskWorkspace(ws);
  if (result.conflicts.length > 0) {
    tui.screen.line(red(`✗ not applied: ${result.conflicts.length} file(s) conflict; nothing was written`));
    for (const conflict of result.conflicts) tui.screen.line(red(`  ${conflict.path}: ${conflict.reason}`));
    return;
  }
  const { changeSummary } = await import("../../client/worktree-session.js");
  tui.screen.line(green(`✓ applied to ${ws.root}: ${changeSummary(changes)}`));
  for (const change of changes) tui.screen.line(dim(`  ${change.path} +${change.added} −${change.removed}`));
}

/**
 * `/discard`: drops the `--worktree` session's changes; the session goes on in a fresh worktree
 * (same id and path) made from the user's files as they are now.
 */
async function discardSession(tui: Tui): Promise<void> {
  const runtime = tui.runtime;
  const ws = runtime?.taskWorkspace;
  if (!runtime || !ws) return tui.screen.line(yellow("/discard is for a session started with --worktree"));
  const { createTaskWorkspace, discardTaskWorkspace } =
    await import("../../agent/worktree/task-workspace.js");
  const { taskChanges } = await import("../../agent/worktree/task-changes.js");
  const changes = await taskChanges(ws).catch(() => []);
  await discardTaskWorkspace(ws);
  runtime.taskWorkspace = await createTaskWorkspace(ws.root, ws.id);
  tui.files.forget();
  tui.screen.line(
    yellow(
      `discarded ${changes.length} changed file${changes.length === 1 ? "" : "s"}; a fresh worktree from ${ws.root} now`,
    ),
  );
}

/** Either, once idle; a failure is said with the command's name. */
async function worktreeCommand(
  { tui, name, idle }: CommandCall,
  act: (tui: Tui) => Promise<void>,
): Promise<void> {
  if (!idle()) return;
  try {
    await act(tui);
  } catch (error) {
    tui.screen.line(red(`✗ /${name}: ${(error as Error).message}`));
  }
}

export const apply: Command = { names: ["apply"], run: (call) => worktreeCommand(call, applySession) };
export const discard: Command = { names: ["discard"], run: (call) => worktreeCommand(call, discardSession) };
