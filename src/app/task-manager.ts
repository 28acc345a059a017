/**
 * The tasks of one workspace: loads the saved ones, creates, renames and deletes them, starts
 * background deep tasks, and turns the browser's messages into calls on the right task.
 *
 * Bounded: background tasks (the `delegate` tool, the browser's background button) run at most
 * MAX_RUNNING_BACKGROUND at once per workspace, the rest wait their turn (state `queued`); past
 * MAX_PENDING_BACKGROUND waiting or running in the workspace, or MAX_PENDING_PER_TASK delegated by
 * one task, a new one is refused with an error the model can read. An owner keeps at most
 * MAX_TASKS tasks. Browsers hear of a changed task as that one task (`task.updated`), not the list.
 */
import { readdirSync } from "node:fs";
import { join, relative } from "node:path";
import { ToolError } from "../agent/files/workspace.js";
import { CheckpointError } from "../agent/checkpoints/checkpoints.js";
import type { ClientMessage, ServerMessage, TaskState, TaskSummary } from "./protocol.js";
import { Task, type TaskContext } from "./task.js";
import { WorkspaceFiles } from "./workspace-files.js";
import { prepareFolder } from "./data-folders.js";
import { pruneTaskWorkspaces } from "../agent/worktree/task-workspace.js";
import { MAX_VARIANTS, MIN_VARIANTS } from "../agent/variants/runner.js";

export type ManagerContext = Omit<TaskContext, "delegate" | "changed" | "broadcast"> & {
  /** Sends a message to the browsers signed in as `owner` (see `Task.owner`), and only to them. */
  broadcast(message: ServerMessage, owner: string | undefined): void;
};

/** States a turn ends in. */
const ENDED = new Set<TaskState>(["done", "incomplete", "failed", "interrupted"]);
/** Background tasks running at once in a workspace; more wait, queued. */
export const MAX_RUNNING_BACKGROUND = 4;
/** Background tasks running or waiting in a workspace; more are refused. */
export const MAX_PENDING_BACKGROUND = 32;
/** Background tasks one task may have running or waiting; more are refused. */
export const MAX_PENDING_PER_TASK = 8;
/** How long after the start stale task workspaces are pruned. */
const PRUNE_DELAY_MS = 500;
/** Tasks one owner keeps (deleting old ones makes room). */
export const MAX_TASKS = 500;

export class TaskManager {
  readonly #tasks = new Map<string, Task>();
  readonly #context: TaskContext;
  readonly #broadcast: ManagerContext["broadcast"];
  /** Background tasks started and not finished, and those waiting for a slot (oldest first). */
  readonly #running = new Set<Task>();
  readonly #waiting: { task: Task; text: string }[] = [];
  readonly #problems: string[] = [];
  #closed = false;
  /** `@` in the composer: the workspace's file names, and the files a message names attached. */
  readonly #files: WorkspaceFiles;

  constructor(context: ManagerContext) {
    this.#broadcast = context.broadcast;
    this.#files = new WorkspaceFiles(context.workspace.root);
    this.#context = {
      ...context,
      broadcast: (message) => this.#toOwner(message),
      // A delegated task belongs to the owner of the task that delegated it.
      delegate: async (parent, text) => this.#background(text, parent.id, parent.owner).summary,
      changed: (task) => this.#changed(task),
    };
    // Something of the wrong kind where the folders belong is moved aside (and said), not fatal.
    const movedAside = (problem: string): void => {
      this.movedAside.push(problem);
      process.stderr.write(`spark app: ${problem}\n`);
    };
    const dir = prepareFolder(
      context.dataDir,
      relative(context.dataDir, Task.directory(context.dataDir)),
      movedAside,
    );
    prepareFolder(context.dataDir, "sessions", movedAside);
    const saved = new Set<string>();
    for (const name of readdirSync(dir))
      if (name.endsWith(".json")) saved.add(name.slice(0, -".json".length));
    this.ready = this.#loadSaved(dir, [...saved]);
    // Task workspaces no saved task names (a crash, a task deleted while its removal was cut
    // short) are Spark's to remove; a saved task's, even one that cannot be read now, are kept.
    // The terminal's workspaces (`spark --worktree`: tui-SESSION, its variants tui-SESSION-vN-K;
    // `spark exec --worktree`: exec-SESSION, a result left on its branch) are not the app's to prune.
    // Once the page has had its moment: the prune spawns git, and a spawn blocks the main thread
    // (~30 ms here) when the browser or VS Code's pane is asking for the page (figure 34).
    this.pruned = new Promise<void>((resolve) => setTimeout(resolve, PRUNE_DELAY_MS).unref())
      .then(async () =>
        this.#closed
          ? { removed: [] }
          : pruneTaskWorkspaces(
              context.workspace.root,
              (id) => saved.has(id) || this.#tasks.has(id) || /^(tui|exec)-/.test(id),
            ),
      )
      .then(
        ({ removed }) => removed,
        (error: unknown) => {
          this.#report(`stale task workspaces could not be pruned: ${(error as Error).message}`);
          return [];
        },
      );
  }

  /** What stood where the app's data folders belong and was moved aside at start (data-folders.ts). */
  readonly movedAside: string[] = [];

  /** The ids of the stale task workspaces removed at start (once pruning is done). */
  readonly pruned: Promise<string[]>;

  /**
   * Settles once the saved tasks are loaded (never rejects: a file that cannot be read costs its
   * task, and is in `problems`). Until then nothing else here is asked: the app greets a browser
   * and handles its messages after it (app-server.ts).
   */
  readonly ready: Promise<void>;

  /**
   * Loads the saved tasks: the reader (and its schemas: zod) only when there are some, so that a
   * first start does not load them before the page.
   */
  async #loadSaved(dir: string, ids: readonly string[]): Promise<void> {
    if (ids.length === 0) return;
    const { readTask } = await import("./task-reader.js");
    for (const id of ids) {
      if (this.#closed) return;
      // One bad file costs its task, not the app: what cannot be read is skipped and reported.
      try {
        const read = readTask(this.#context.dataDir, this.#context.workspace.root, id, (problem) =>
          this.#report(problem),
        );
        if (read) {
          const task = Task.load(this.#context, read);
          this.#tasks.set(task.id, task);
        }
      } catch (error) {
        this.#report(`${join(dir, `${id}.json`)} was skipped: ${(error as Error).message}`);
      }
    }
  }

  /** Sends the messages held while the Spark server was unreachable (see `Task.sendHeld`). */
  sendHeld(): void {
    void this.ready.then(() => {
      for (const task of this.#tasks.values()) if (task.holding) void task.sendHeld();
    });
  }

  /** What was wrong with the saved tasks at start-up (each names its file). */
  get problems(): readonly string[] {
    return this.#problems;
  }

  #report(problem: string): void {
    this.#problems.push(problem);
    process.stderr.write(`spark app: ${problem}\n`);
  }

  /** The tasks `owner` sees: its own (tasks without an owner when `owner` is undefined). */
  summaries(owner: string | undefined): TaskSummary[] {
    return [...this.#tasks.values()]
      .filter((task) => task.owner === owner)
      .map((task) => task.summary)
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt));
  }

  get(id: string): Task | undefined {
    return this.#tasks.get(id);
  }

  create(options: {
    model: string;
    title?: string;
    background?: boolean;
    parent?: string;
    owner: string | undefined;
    queued?: boolean;
  }): Task {
    let owned = 0;
    for (const task of this.#tasks.values()) if (task.owner === options.owner) owned++;
    if (owned >= MAX_TASKS) {
      throw new ToolError(
        "too_many_tasks",
        `refused: there are already ${owned} tasks (at most ${MAX_TASKS}); delete some old ones first`,
      );
    }
    const task = Task.create(this.#context, {
      model: options.model,
      title: options.title ?? "New task",
      background: options.background ?? false,
      ...(options.parent ? { parent: options.parent } : {}),
      ...(options.owner === undefined ? {} : { owner: options.owner }),
      ...(options.queued ? { state: "queued" as const } : {}),
    });
    this.#tasks.set(task.id, task);
    this.#changed(task);
    return task;
  }

  /** A task's messages go to its owner's browsers; one about a task that is gone goes nowhere. */
  #toOwner(message: ServerMessage): void {
    const task = "task" in message ? this.#tasks.get(message.task) : undefined;
    if (task) this.#broadcast(message, task.owner);
  }

  /** A task's summary changed: its owner's browsers get that task, not the whole list again. */
  #changed(task: Task): void {
    if (this.#tasks.get(task.id) !== task) return; // deleted: nothing more is said about it
    this.#broadcast({ type: "task.updated", summary: task.summary }, task.owner);
    // A background task whose turn ended gives its slot to the next one waiting.
    if (this.#running.has(task) && !task.busy && ENDED.has(task.summary.state)) this.#finished(task);
  }

  /**
   * A deep task in the background, started with `text` now or, past MAX_RUNNING_BACKGROUND, once
   * a slot is free. Throws a ToolError (the model reads its message) past the caps.
   */
  #background(text: string, parent: string | undefined, owner: string | undefined): Task {
    const pending = this.#running.size + this.#waiting.length;
    if (pending >= MAX_PENDING_BACKGROUND) {
      throw new ToolError(
        "too_many_background_tasks",
        `refused: ${pending} background tasks are already running or waiting in this workspace (at most ` +
          `${MAX_PENDING_BACKGROUND}). Wait for some to finish (the user is notified), or do this work yourself.`,
      );
    }
    if (parent !== undefined) {
      let mine = 0;
      for (const task of [...this.#running, ...this.#waiting.map((w) => w.task)])
        if (task.summary.parent === parent) mine++;
      if (mine >= MAX_PENDING_PER_TASK) {
        throw new ToolError(
          "too_many_background_tasks",
          `refused: this task already has ${mine} background tasks running or waiting (at most ` +
            `${MAX_PENDING_PER_TASK}). Wait for them to finish (the user is notified), or do this work yourself.`,
        );
      }
    }
    const task = this.create({
      model: "deep",
      title: text.trim().split("\n")[0]?.slice(0, 60) || "Background task",
      background: true,
      ...(parent ? { parent } : {}),
      owner,
      queued: this.#running.size >= MAX_RUNNING_BACKGROUND,
    });
    this.#waiting.push({ task, text });
    this.#startWaiting();
    return task;
  }

  /** Starts waiting background tasks while there are free slots. */
  #startWaiting(): void {
    while (this.#running.size < MAX_RUNNING_BACKGROUND) {
      const next = this.#waiting.shift();
      if (!next) return;
      const { task, text } = next;
      this.#running.add(task);
      task.send(text).catch((error: unknown) => {
        this.#context.broadcast({
          type: "error",
          task: task.id,
          code: "task_failed",
          message: `the background task could not start: ${(error as Error).message}`,
        });
        this.#finished(task);
      });
    }
  }

  /** A background task ended (or was deleted): its slot is free. */
  #finished(task: Task): void {
    const waiting = this.#waiting.findIndex((w) => w.task === task);
    if (waiting >= 0) this.#waiting.splice(waiting, 1);
    if (this.#running.delete(task)) this.#startWaiting();
  }

  /**
   * Handles one browser message from a browser signed in as `owner`; replies go to `reply`, changes
   * to the owner's browsers. Another owner's task is "not found", exactly like one that never was.
   */
  async handle(
    message: ClientMessage,
    reply: (message: ServerMessage) => void,
    owner: string | undefined,
  ): Promise<void> {
    if (message.type === "hello") return; // answered by the server, which knows the version
    if (message.type === "files") {
      reply({ type: "files", query: message.query, paths: await this.#files.match(message.query) });
      return;
    }
    if (message.type === "task.create") {
      if (message.background) {
        let task: Task;
        try {
          task = this.#background(message.text ?? "", undefined, owner);
        } catch (error) {
          if (!(error instanceof ToolError)) throw error;
          reply({ type: "error", code: error.code, message: error.message });
          return;
        }
        reply({ type: "task.log", task: task.id, entries: task.entries, status: task.status });
        return;
      }
      let task: Task;
      try {
        task = this.create({
          model: message.model,
          ...(message.title ? { title: message.title } : {}),
          owner,
        });
      } catch (error) {
        if (!(error instanceof ToolError)) throw error;
        reply({ type: "error", code: error.code, message: error.message });
        return;
      }
      reply({ type: "task.log", task: task.id, entries: task.entries, status: task.status });
      if (message.text) await task.send(await this.#files.attach(message.text));
      return;
    }
    const found = this.#tasks.get(message.task);
    const task = found?.owner === owner ? found : undefined;
    if (!task) {
      reply({
        type: "error",
        code: "task_not_found",
        message: `no task ${message.task}`,
        task: message.task,
      });
      return;
    }
    switch (message.type) {
      case "task.open":
        reply({ type: "task.log", task: task.id, entries: task.entries, status: task.status });
        return;
      case "task.rename":
        task.rename(message.title);
        return;
      case "task.delete":
        task.delete();
        this.#tasks.delete(task.id);
        this.#finished(task);
        this.#broadcast({ type: "task.removed", task: task.id }, task.owner);
        return;
      case "send":
        await task.send(await this.#files.attach(message.text), message.sentAt, message.images);
        return;
      case "queue":
        await task.queue(message.text);
        return;
      case "stop":
        task.stop();
        return;
      case "model":
        await task.setModel(message.model);
        return;
      case "compact":
        await task.compact();
        return;
      case "new_context":
        await task.newContext();
        return;
      case "approval":
        task.answer(message.entry, message.answer, message.reason);
        return;
      case "variants":
        await task.variants(
          Math.min(MAX_VARIANTS, Math.max(MIN_VARIANTS, Math.floor(message.count))),
          message.text,
        );
        return;
      case "choose":
        await task.choose(message.entry, message.index);
        return;
      case "variants.discard":
        await task.discardVariants(message.entry);
        return;
      case "review":
        reply({ type: "review", task: task.id, ...(await task.review()) });
        return;
      case "variant.diff": {
        const { entry, index } = message;
        reply({
          type: "variant.diff",
          task: task.id,
          entry,
          index,
          files: await task.variantDiff(entry, index),
        });
        return;
      }
      case "undo":
      case "redo":
        try {
          await task.undoRedo(message.type, message.type === "undo" ? message.turn : undefined);
        } catch (error) {
          if (!(error instanceof CheckpointError)) throw error;
          reply({ type: "error", code: error.code, message: error.message, task: task.id });
        }
        return;
      case "revert":
        await task.revert(message.path);
        reply({ type: "review", task: task.id, ...(await task.review()) });
        return;
      case "keep":
        task.keep(message.path);
        reply({ type: "review", task: task.id, ...(await task.review()) });
        return;
      case "apply":
        await task.apply(message.path);
        reply({ type: "review", task: task.id, ...(await task.review()) });
        return;
      case "discard":
        await task.discard(message.path);
        reply({ type: "review", task: task.id, ...(await task.review()) });
        return;
      case "file": {
        // Only a file the task changed: this is not a way to read the workspace.
        const change = await task.fileChange(message.path);
        if (!change) {
          reply({
            type: "error",
            code: "file_not_changed",
            message: `${message.path.slice(0, 200)} is not a file this task changed`,
            task: task.id,
          });
          return;
        }
        reply({ type: "file", task: task.id, path: message.path, ...change });
        return;
      }
    }
  }

  close(): void {
    this.#closed = true;
    this.#waiting.length = 0;
    for (const task of this.#tasks.values()) task.close();
  }
}
