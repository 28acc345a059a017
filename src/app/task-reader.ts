/**
 * Reading a saved task back (its files: task-files.ts): validated, never trusted. Fields that only
 * describe the task are repaired, transcript lines that are not entries are skipped, and a session
 * that cannot be read is started afresh; each such repair is passed to `report`.
 *
 * Its own module because it holds the schemas (zod, ~0.75 MB of code, ~60 ms to load on the test
 * VM): `spark app` loads it only when there are saved tasks to read, so a first start serves its
 * page without it (figures 27 and 34).
 */
import { join } from "node:path";
import { z } from "zod";
import type { InputItem } from "../agent/agent.js";
import { readRegularFile, SessionFile } from "../agent/session-file.js";
import { logEntry, savedTask, type SavedTask } from "./saved-task.js";
import { taskDirectory } from "./task-files.js";
import type { LogEntry, TaskState, TaskSummary } from "./protocol.js";

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
