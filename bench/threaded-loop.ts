/**
 * Figure 5's tool-loop client on a worker thread, so that the server's thread does only the
 * server's work (its CPU time per turn is then the server's, engine included) and the client runs
 * beside it, as a real client in its own process does.
 */
import { Worker } from "node:worker_threads";
import type { ClientTurn, LoopMode } from "./tool-loop.js";

type Reply = { id: number; turns: ClientTurn[] } | { id: number; error: string };

export class ThreadedLoopClient {
  readonly #worker: Worker;
  readonly #pending = new Map<number, { resolve: (t: ClientTurn[]) => void; reject: (e: Error) => void }>();
  #nextId = 0;

  constructor() {
    // The worker loads TypeScript through tsx, like the main thread (`node --import tsx`).
    const tsx = import.meta.resolve("tsx/esm/api");
    const entry = new URL("./tool-loop-worker.ts", import.meta.url).href;
    const source =
      `import(${JSON.stringify(tsx)}).then(({ tsImport }) => ` +
      `tsImport(${JSON.stringify(entry)}, ${JSON.stringify(import.meta.url)}));`;
    this.#worker = new Worker(source, { eval: true });
    this.#worker.on("message", (reply: Reply) => {
      const pending = this.#pending.get(reply.id);
      this.#pending.delete(reply.id);
      if ("error" in reply) pending?.reject(new Error(reply.error));
      else pending?.resolve(reply.turns);
    });
    this.#worker.on("error", (error) => {
      for (const pending of this.#pending.values()) pending.reject(error);
      this.#pending.clear();
    });
  }

  loop(mode: LoopMode, url: string, turns: number): Promise<ClientTurn[]> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#worker.postMessage({ id, mode, url, turns });
    });
  }

  async close(): Promise<void> {
    await this.#worker.terminate();
  }
}
