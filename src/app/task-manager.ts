/**
 * The tasks of one workspace: loads the saved ones, creates, renames and deletes them, starts
 * background deep tasks, and turns the browser's messages into calls on the right task.
 */
import { mkdirSync, readdirSync } from "node:fs";
import type { ClientMessage, ServerMessage, TaskSummary } from "./protocol.js";
import { Task, type TaskContext } from "./task.js";

export type ManagerContext = Omit<TaskContext, "delegate" | "changed" | "broadcast"> & {
  /** Sends a message to the browsers signed in as `owner` (see `Task.owner`), and only to them. */
  broadcast(message: ServerMessage, owner: string | undefined): void;
};

/** Most variants (parallel lanes) one request may ask for. */
const MAX_VARIANTS = 4;

export class TaskManager {
  readonly #tasks = new Map<string, Task>();
  readonly #context: TaskContext;
  readonly #broadcast: ManagerContext["broadcast"];

  constructor(context: ManagerContext) {
    this.#broadcast = context.broadcast;
    this.#context = {
      ...context,
      broadcast: (message) => this.#toOwner(message),
      // A delegated task belongs to the owner of the task that delegated it.
      delegate: async (parent, text) => this.#background(text, parent.id, parent.owner).summary,
      changed: (task) => this.#listChanged(task.owner),
    };
    const dir = Task.directory(context.dataDir);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const name of readdirSync(dir)) {
      if (!name.endsWith(".json")) continue;
      const task = Task.load(this.#context, name.slice(0, -".json".length));
      if (task) this.#tasks.set(task.id, task);
    }
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
  }): Task {
    const task = Task.create(this.#context, {
      model: options.model,
      title: options.title ?? "New task",
      background: options.background ?? false,
      ...(options.parent ? { parent: options.parent } : {}),
      ...(options.owner === undefined ? {} : { owner: options.owner }),
    });
    this.#tasks.set(task.id, task);
    this.#listChanged(task.owner);
    return task;
  }

  /** A task's messages go to its owner's browsers; one about a task that is gone goes nowhere. */
  #toOwner(message: ServerMessage): void {
    const task = "task" in message ? this.#tasks.get(message.task) : undefined;
    if (task) this.#broadcast(message, task.owner);
  }

  #listChanged(owner: string | undefined): void {
    this.#broadcast({ type: "tasks", tasks: this.summaries(owner) }, owner);
  }

  /** A deep task in the background, started with `text`. */
  #background(text: string, parent: string | undefined, owner: string | undefined): Task {
    const task = this.create({
      model: "deep",
      title: text.trim().split("\n")[0]?.slice(0, 60) || "Background task",
      background: true,
      ...(parent ? { parent } : {}),
      owner,
    });
    void task.send(text).catch((error: unknown) => {
      this.#context.broadcast({
        type: "error",
        task: task.id,
        code: "task_failed",
        message: `the background task could not start: ${(error as Error).message}`,
      });
    });
    return task;
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
    if (message.type === "task.create") {
      if (message.background) {
        const task = this.#background(message.text ?? "", undefined, owner);
        reply({ type: "task.log", task: task.id, entries: task.entries, status: task.status });
        return;
      }
      const task = this.create({
        model: message.model,
        ...(message.title ? { title: message.title } : {}),
        owner,
      });
      reply({ type: "task.log", task: task.id, entries: task.entries, status: task.status });
      if (message.text) await task.send(message.text);
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
        this.#listChanged(owner);
        return;
      case "send":
        await task.send(message.text, message.sentAt);
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
        await task.variants(Math.min(MAX_VARIANTS, Math.max(2, Math.floor(message.count))), message.text);
        return;
      case "choose":
        await task.choose(message.entry, message.index);
        return;
      case "review":
        reply({ type: "review", task: task.id, ...(await task.review()) });
        return;
      case "revert":
        await task.revert(message.path);
        reply({ type: "review", task: task.id, ...(await task.review()) });
        return;
      case "keep":
        task.keep();
        reply({ type: "review", task: task.id, ...(await task.review()) });
        return;
    }
  }

  close(): void {
    for (const task of this.#tasks.values()) task.close();
  }
}
