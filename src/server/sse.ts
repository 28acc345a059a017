import { once } from "node:events";
import type { ServerResponse } from "node:http";

/**
 * Writes Server-Sent Events with back-pressure. Writes made in the same tick are coalesced into one
 * socket write (cork until the tick ends), so a fast engine costs one syscall per burst, not per
 * token, while a paced engine still gets every event out immediately.
 */
export class SseWriter {
  #corked = false;
  readonly #uncork = (): void => {
    this.#corked = false;
    this.response.uncork();
  };

  constructor(private readonly response: ServerResponse) {}

  open(headers: Record<string, string> = {}): void {
    this.response.writeHead(200, {
      "content-type": "text/event-stream; charset=utf-8",
      "cache-control": "no-cache",
      connection: "keep-alive",
      "x-accel-buffering": "no",
      ...headers,
    });
    this.response.flushHeaders();
  }

  /** Writes one event; resolves once the socket can take more (immediately unless the client reads slowly). */
  send(data: string, event?: string): Promise<void> | undefined {
    if (this.response.destroyed) return undefined;
    if (!this.#corked) {
      this.#corked = true;
      this.response.cork();
      process.nextTick(this.#uncork);
    }
    const ok = this.response.write(event ? `event: ${event}\ndata: ${data}\n\n` : `data: ${data}\n\n`);
    return ok ? undefined : this.#drained();
  }

  async #drained(): Promise<void> {
    if (this.response.destroyed) return;
    // The losing `once` must be removed, or every drain leaves a close (and error) listener behind.
    const settled = new AbortController();
    try {
      await Promise.race([
        once(this.response, "drain", { signal: settled.signal }),
        once(this.response, "close", { signal: settled.signal }),
      ]);
    } finally {
      settled.abort();
    }
  }

  end(): void {
    if (!this.response.destroyed) this.response.end();
  }
}
