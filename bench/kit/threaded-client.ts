/**
 * An `SseClient` on a worker thread. A real client runs in another process and parses the stream
 * while the server produces it; on the server's own event loop the two would take turns instead.
 * Times in results are the worker's `performance.now()`: only differences between them mean anything.
 */
import type { StreamClient, StreamOptions, StreamPath, StreamResult } from "./sse-client.js";
import { TsWorker } from "./ts-worker.js";

export class ThreadedSseClient implements StreamClient {
  readonly #worker = new TsWorker<StreamResult>(new URL("./client-worker.ts", import.meta.url), "result");

  constructor(
    private readonly baseUrl: string,
    private readonly headers: Record<string, string> = {},
  ) {}

  stream(body: Record<string, unknown>, path?: StreamPath, options?: StreamOptions): Promise<StreamResult> {
    return this.#worker.call({ url: this.baseUrl, headers: this.headers, body, path, options });
  }

  close(): Promise<void> {
    return this.#worker.close();
  }
}
