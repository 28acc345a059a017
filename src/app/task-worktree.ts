/**
 * An app task's own workspace (a worktree on `spark/ID`, or a copy outside git) and when it goes:
 * with the task (deleted), or (see `unneededWorkspace`) after a turn that
 * left nothing in it, so a task that only answered questions leaves no worktree or branch behind.
 */
import {
  discardTaskWorkspace,
  pruneTaskWorkspaces,
  type TaskWorkspace,
} from "../agent/worktree/task-workspace.js";

/** Removes a task's worktree (or copy) and branch, and the worktrees its variants made from it. */
export async function removeTaskWorkspace(ws: TaskWorkspace): Promise<void> {
  if (ws.kind === "in-place") return;
  await pruneTaskWorkspaces(ws.path, () => false).catch(() => {});
  await discardTaskWorkspace(ws);
}
