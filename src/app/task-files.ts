/**
 * A task's own files in the data directory (reading them back is task-reader.ts's). `DATA_DIR/app/tasks/ID.json`
 * (the summary, the change record, the session id, where it works) is rewritten whole on every
 * change; `ID.log.jsonl` gets one line per finished transcript entry (a later line with the same id
 * replaces the earlier one). The agent's own transcript is a saved session (`DATA_DIR/sessions/`).
 *
 * Reading back validates, never trusts: fields that only describe the task are repaired,
 * transcript lines that are not entries are skipped, and a session that cannot be read is started
 * afresh; each such repair is passed to `report`. Writes throw; the task decides what a failed one
 * costs (a notice, never the running turn).
 */
import { appendFileSync, existsSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { taskWorkspacesFolder } from "../agent/worktree/task-workspace.js";
import type { SavedTask } from "./saved-task.js";
import { removeTaskWorkspace } from "./task-worktree.js";
import type { LogEntry } from "./protocol.js";

/** Where an app's tasks are saved. */
export function taskDirectory(dataDir: string): string {
  return join(dataDir, "app", "tasks");
}

/** Rewrites the task's saved state (`ID.json`); throws when it cannot. */
export function writeTask(dataDir: string, saved: SavedTask): void {
  writeFileSync(join(taskDirectory(dataDir), `${saved.summary.id}.json`), JSON.stringify(saved), {
    mode: 0o600,
  });
}

/** Appends a finished entry to the task's log (`ID.log.jsonl`); throws when it cannot. */
export function appendEntry(dataDir: string, id: string, entry: LogEntry): void {
  appendFileSync(join(taskDirectory(dataDir), `${id}.log.jsonl`), `${JSON.stringify(entry)}\n`, {
    mode: 0o600,
  });
}

/** Removes the task's files: its saved state, its log and its session. */
export function removeTaskFiles(dataDir: string, id: string, sessionPath: string): void {
  const dir = taskDirectory(dataDir);
  rmSync(join(dir, `${id}.json`), { force: true });
  rmSync(join(dir, `${id}.log.jsonl`), { force: true });
  rmSync(sessionPath, { force: true });
}

/** A worktree or copy of task `id` that no saved task names (a crash between making and saving it). */
export async function removeLeftover(root: string, id: string): Promise<void> {
  const path = join(taskWorkspacesFolder(root), id);
  if (!existsSync(path) && !existsSync(`${path}.base`)) return;
  await removeTaskWorkspace({ id, kind: "worktree", root, path, branch: `spark/${id}`, base: "" }).catch(
    () => {},
  );
}
