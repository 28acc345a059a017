/**
 * An app task's own workspace (a worktree on `spark/ID`, or a copy outside git) and when it goes:
 * with the task (deleted), or after a turn that left nothing in it (`unneededWorkspace`), so a task
 * that only answered questions leaves no worktree or branch behind, as `spark exec --worktree`
 * leaves none. Its next turn makes it again, at the same path and on the same branch name, from the
 * workspace as it is then.
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

/** What decides whether a task's workspace can go once a turn ended. */
export interface WorkspaceFacts {
  kind: TaskWorkspace["kind"];
  /** Files that differ from where the task started (its own patches and commands' changes alike). */
  changes: number;
  /** A turn runs, or messages wait to run one (queued, or held for the server). */
  busy: boolean;
  /** Variants of the task wait for a pick (they were made from its worktree). */
  variants: boolean;
  /** Undo turn or Redo has something to put back (checkpoints of the task's turns). */
  undoable: boolean;
}

/** Whether nothing of the task lives in its workspace: removing it loses nothing. */
export function unneededWorkspace(facts: WorkspaceFacts): boolean {
  return (
    facts.kind !== "in-place" && facts.changes === 0 && !facts.busy && !facts.variants && !facts.undoable
  );
}
