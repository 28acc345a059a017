/**
 * A bench client on a worker thread of its own, as a real client runs in a process of its own
 * (on the server's event loop the two would take turns instead). The worker loads its TypeScript
 * entry through tsx, like the main thread (`node --import tsx`). `call(message)` posts
 * `{ id, ...message }`; the entry answers `{ id, [key]: value }` or `{ id, error }`.
 */
import { Worker } from "node:worker_threads";

type Reply = { id: number; error?: string } & Record<string, unknown>;

export class TsWorker<T> {
  readonly #worker: Worker;
  readonly #pending = new Map<number, { resolve: (value: T) => void; reject: (e: Error) => void }>();
  #nextId = 0;

  /** `entry`: the worker's module (a `.ts` file); `key`: the reply's field that holds the answer. */
  constructor(entry: URL, key: string) {
    const tsx = import.meta.resolve("tsx/esm/api");
    const source =
      `import(${JSON.stringify(tsx)}).then(({ tsImport }) => ` +
      `tsImport(${JSON.stringify(entry.href)}, ${JSON.stringify(import.meta.url)}));`;
    this.#worker = new Worker(source, { eval: true });
    this.#worker.on("message", (reply: Reply) => {
      const pending = this.#pending.get(reply.id);
      this.#pending.delete(reply.id);
      if (reply.error !== undefined) pending?.reject(new Error(reply.error));
      else pending?.resolve(reply[key] as T);
    });
    this.#worker.on("error", (error) => {
      for (const pending of this.#pending.values()) pending.reject(error);
      this.#pending.clear();
    });
  }

  call(message: Record<string, unknown>): Promise<T> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#worker.postMessage({ id, ...message });
    });
  }

  async close(): Promise<void> {
    await this.#worker.terminate();
  }
}
