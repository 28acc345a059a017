import { once } from "node:events";
import type { ServerResponse } from "node:http";

/** A burst larger than this is written at once instead of waiting for the end of the tick. */
const FLUSH_BYTES = 64 * 1024;

/**
 * Writes Server-Sent Events with back-pressure. Events sent in the same tick are joined into one
 * string and written once when the tick ends, so a fast engine costs one write per burst rather than
 * per token, while a paced engine still gets every event out at once.
 */
export class SseWriter {
  #pending = "";
  #scheduled = false;
  #drain: Promise<void> | undefined;
  readonly #flush = (): void => {
    this.#scheduled = false;
    if (this.#pending === "" || this.response.destroyed) return;
    const ok = this.response.write(this.#pending);
    this.#pending = "";
    if (!ok && !this.#drain) this.#drain = this.#drained().finally(() => (this.#drain = undefined));
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

  /**
   * Queues one event. Returns a promise while the client is not keeping up (wait for it before
   * sending more), so a slow reader bounds the memory a stream can hold.
   */
  send(data: string, event?: string): Promise<void> | undefined {
    if (this.response.destroyed) return undefined;
    this.#pending += event ? `event: ${event}\ndata: ${data}\n\n` : `data: ${data}\n\n`;
    if (this.#pending.length >= FLUSH_BYTES) this.#flush();
    else if (!this.#scheduled) {
      this.#scheduled = true;
      process.nextTick(this.#flush);
    }
    return this.#drain;
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
    } catch {
      // An error on the response ends the stream like a close does.
    } finally {
      settled.abort();
    }
  }

  end(): void {
    this.#flush();
    if (!this.response.destroyed) this.response.end();
  }
}
