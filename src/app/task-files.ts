/**
 * A task's own files in the data directory, and reading them back. `DATA_DIR/app/tasks/ID.json`
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
import { z } from "zod";
import type { InputItem } from "../agent/agent.js";
import { readRegularFile, SessionFile } from "../agent/session-file.js";
import { taskWorkspacesFolder } from "../agent/worktree/task-workspace.js";
import { logEntry, savedTask, type SavedTask } from "./saved-task.js";
import { removeTaskWorkspace } from "./task-worktree.js";
import type { LogEntry, TaskState, TaskSummary } from "./protocol.js";

/** Where an app's tasks are saved. */
export function taskDirectory(dataDir: string): string {
  return join(dataDir, "app", "tasks");
}

/** A saved task as read back: repaired, with its session opened (or started afresh) and its log. */
export interface ReadTask {
  saved: SavedTask;
  summary: TaskSummary;
  session: { file: SessionFile; transcript: InputItem[] };
  /** The transcript's entries, in order, each once (the last line of an id wins), made final. */
  entries: LogEntry[];
  /** The next entry number (`e N`) free after those read. */
  counter: number;
}

/**
 * Reads task `id`: undefined when it belongs to another workspace (`root`); throws (with the reason)
 * when its file is not a saved task.
 */
export function readTask(
  dataDir: string,
  root: string,
  id: string,
  report: (problem: string) => void,
): ReadTask | undefined {
  const dir = taskDirectory(dataDir);
  const path = join(dir, `${id}.json`);
  let json: unknown;
  try {
    json = JSON.parse(readRegularFile(path));
  } catch (error) {
    throw new Error(
      error instanceof SyntaxError ? `not valid JSON (${error.message})` : (error as Error).message,
      {
        cause: error,
      },
    );
  }
  const parsed = savedTask.safeParse(json);
  if (!parsed.success)
    throw new Error(`not a saved task: ${z.prettifyError(parsed.error).replace(/\n/g, "; ")}`);
  const saved = parsed.data;
  if (saved.workspace !== root) return undefined;
  if (saved.summary.id !== id)
    throw new Error(`its id is ${JSON.stringify(saved.summary.id)}, not its name's`);
  let opened: { file: SessionFile; transcript: InputItem[] };
  try {
    const session = SessionFile.open(dataDir, saved.sessionId);
    if (session.skipped > 0)
      report(`${session.file.path}: ${session.skipped} unreadable line(s) skipped (task ${id})`);
    opened = session;
  } catch (error) {
    // The transcript the browser shows is kept; the model's side of the conversation starts afresh.
    report(
      `the session of task ${id} (${saved.sessionId}) cannot be read (${(error as Error).message}): ` +
        "the task is shown, and its next message starts a new conversation",
    );
    opened = {
      file: SessionFile.create(dataDir, {
        cwd: root,
        model: saved.summary.model,
      }),
      transcript: [],
    };
  }
  // A task that was running (or waiting to run) when the app stopped is no longer running.
  const state: TaskState =
    saved.summary.state === "running" ||
    saved.summary.state === "approval" ||
    saved.summary.state === "queued"
      ? "interrupted"
      : saved.summary.state;
  const createdAt = saved.summary.createdAt ?? new Date(0).toISOString();
  const summary: TaskSummary = {
    id,
    title: saved.summary.title,
    model: saved.summary.model,
    state,
    background: saved.summary.background,
    changedFiles: saved.summary.changedFiles,
    createdAt,
    updatedAt: saved.summary.updatedAt ?? createdAt,
    ...(saved.summary.parent === undefined ? {} : { parent: saved.summary.parent }),
    ...(saved.summary.cutOff === undefined ? {} : { cutOff: saved.summary.cutOff }),
    // As last measured; re-opening the workspace says nothing new until the next turn ends.
    ...(saved.summary.workspace === undefined || saved.taskWorkspace === undefined
      ? {}
      : { workspace: saved.summary.workspace as NonNullable<TaskSummary["workspace"]> }),
    // What Undo turn would undo (the checkpoints are read back when the agent connects); a redo
    // does not outlive the app.
    ...(saved.summary.undoTurn === undefined ? {} : { undoTurn: saved.summary.undoTurn }),
  };
  const { entries, counter } = readLog(join(dir, `${id}.log.jsonl`), id, report);
  return { saved: saved as SavedTask, summary, session: opened, entries, counter };
}

/** The task's transcript log: each entry once, in order, as it last was; nothing left running. */
function readLog(
  logPath: string,
  id: string,
  report: (problem: string) => void,
): { entries: LogEntry[]; counter: number } {
  const byId = new Map<string, LogEntry>();
  const order: string[] = [];
  let text = "";
  try {
    text = readRegularFile(logPath);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT")
      report(
        `${logPath} cannot be read (${(error as Error).message}): task ${id} is shown without its transcript`,
      );
  }
  let skipped = 0;
  let counter = 0;
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue;
    let entry: LogEntry;
    try {
      const valid = logEntry.safeParse(JSON.parse(line));
      if (!valid.success) throw new Error("not an entry");
      entry = valid.data as LogEntry;
    } catch {
      skipped++;
      continue;
    }
    if (!byId.has(entry.id)) order.push(entry.id);
    byId.set(entry.id, entry);
    const number = /^e(\d+)$/.exec(entry.id);
    if (number) counter = Math.max(counter, Number(number[1]) + 1);
  }
  if (skipped > 0) report(`${logPath}: ${skipped} unreadable line(s) skipped`);
  const entries: LogEntry[] = [];
  for (const entryId of order) {
    const entry = byId.get(entryId)!;
    if (entry.kind === "assistant") entry.streaming = false;
    if (entry.kind === "approval" && entry.answer === undefined) entry.answer = "no";
    // Variants of an earlier run cannot be picked any more (their worktrees are pruned at start).
    if (entry.kind === "variants" && entry.cards) {
      entry.done = true;
      for (const card of entry.cards) {
        if (entry.chosen === undefined) card.state = "discarded";
        delete card.preview; // served by the process that ran them
      }
    }
    entries.push(entry);
  }
  return { entries, counter: Math.max(counter, order.length) };
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
