/**
 * The tasks of one workspace: loads the saved ones, creates, renames and deletes them, starts
 * background deep tasks, and turns the browser's messages into calls on the right task.
 */
import { mkdirSync, readdirSync } from "node:fs";
import type { ClientMessage, ServerMessage, TaskSummary } from "./protocol.js";
import { Task, type TaskContext } from "./task.js";

export type ManagerContext = Omit<TaskContext, "delegate" | "changed">;

/** Most variants (parallel lanes) one request may ask for. */
const MAX_VARIANTS = 4;

export class TaskManager {
  readonly #tasks = new Map<string, Task>();
  readonly #context: TaskContext;

  constructor(context: ManagerContext) {
    this.#context = {
      ...context,
      delegate: async (parent, text) => this.#background(text, parent.id).summary,
      changed: () => context.broadcast({ type: "tasks", tasks: this.summaries() }),
    };
    const dir = Task.directory(context.dataDir);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    for (const name of readdirSync(dir)) {
      if (!name.endsWith(".json")) continue;
      const task = Task.load(this.#context, name.slice(0, -".json".length));
      if (task) this.#tasks.set(task.id, task);
    }
  }

  summaries(): TaskSummary[] {
    return [...this.#tasks.values()]
      .map((task) => task.summary)
      .sort((a, b) => b.createdAt.localeCompare(a.createdAt));
  }

  get(id: string): Task | undefined {
    return this.#tasks.get(id);
  }

  create(options: { model: string; title?: string; background?: boolean; parent?: string }): Task {
    const task = Task.create(this.#context, {
      model: options.model,
      title: options.title ?? "New task",
      background: options.background ?? false,
      ...(options.parent ? { parent: options.parent } : {}),
    });
    this.#tasks.set(task.id, task);
    this.#context.broadcast({ type: "tasks", tasks: this.summaries() });
    return task;
  }

  /** A deep task in the background, started with `text`. */
  #background(text: string, parent?: string): Task {
    const task = this.create({
      model: "deep",
      title: text.trim().split("\n")[0]?.slice(0, 60) || "Background task",
      background: true,
      ...(parent ? { parent } : {}),
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

  /** Handles one browser message; replies go to `reply`, changes to every browser. */
  async handle(message: ClientMessage, reply: (message: ServerMessage) => void): Promise<void> {
    if (message.type === "hello") return; // answered by the server, which knows the version
    if (message.type === "task.create") {
      if (message.background) {
        const task = this.#background(message.text ?? "", undefined);
        reply({ type: "task.log", task: task.id, entries: task.entries, status: task.status });
        return;
      }
      const task = this.create({ model: message.model, ...(message.title ? { title: message.title } : {}) });
      reply({ type: "task.log", task: task.id, entries: task.entries, status: task.status });
      if (message.text) await task.send(message.text);
      return;
    }
    const task = this.#tasks.get(message.task);
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
        this.#context.broadcast({ type: "tasks", tasks: this.summaries() });
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
