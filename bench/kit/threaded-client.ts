/**
 * An `SseClient` on a worker thread. A real client runs in another process and parses the stream
 * while the server produces it; on the server's own event loop the two would take turns instead.
 * Times in results are the worker's `performance.now()`: only differences between them mean anything.
 */
import { Worker } from "node:worker_threads";
import type { StreamClient, StreamOptions, StreamPath, StreamResult } from "./sse-client.js";

type Reply = { id: number; result: StreamResult } | { id: number; error: string };

export class ThreadedSseClient implements StreamClient {
  readonly #worker: Worker;
  readonly #pending = new Map<number, { resolve: (r: StreamResult) => void; reject: (e: Error) => void }>();
  #nextId = 0;

  constructor(
    private readonly baseUrl: string,
    private readonly headers: Record<string, string> = {},
  ) {
    // The worker loads TypeScript through tsx, like the main thread (`node --import tsx`).
    const tsx = import.meta.resolve("tsx/esm/api");
    const entry = new URL("./client-worker.ts", import.meta.url).href;
    const source =
      `import(${JSON.stringify(tsx)}).then(({ tsImport }) => ` +
      `tsImport(${JSON.stringify(entry)}, ${JSON.stringify(import.meta.url)}));`;
    this.#worker = new Worker(source, { eval: true });
    this.#worker.on("message", (reply: Reply) => {
      const pending = this.#pending.get(reply.id);
      this.#pending.delete(reply.id);
      if ("error" in reply) pending?.reject(new Error(reply.error));
      else pending?.resolve(reply.result);
    });
    this.#worker.on("error", (error) => {
      for (const pending of this.#pending.values()) pending.reject(error);
      this.#pending.clear();
    });
  }

  stream(body: Record<string, unknown>, path?: StreamPath, options?: StreamOptions): Promise<StreamResult> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#worker.postMessage({ id, url: this.baseUrl, headers: this.headers, body, path, options });
    });
  }

  async close(): Promise<void> {
    await this.#worker.terminate();
  }
}
