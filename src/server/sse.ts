import { once } from "node:events";
import type { ServerResponse } from "node:http";
import { DEFAULT_COALESCE, WriteCoalescer, type CoalesceOptions } from "./coalesce.js";

/** A burst larger than this is written at once instead of waiting for its flush. */
const FLUSH_BYTES = 64 * 1024;

/**
 * Writes Server-Sent Events with back-pressure, coalesced (see `WriteCoalescer`): events are joined
 * into one string and written once per flush: at the end of the tick for anything but a token
 * delta, and a few together for deltas that arrive faster than a millisecond apart. A fast engine
 * costs one write per few tokens rather than per token; the first token and a paced engine's go out
 * at once.
 */
export class SseWriter {
  #pending = "";
  #drain: Promise<void> | undefined;
  readonly #coalescer: WriteCoalescer;

  constructor(
    private readonly response: ServerResponse,
    coalesce: CoalesceOptions = DEFAULT_COALESCE,
  ) {
    this.#coalescer = new WriteCoalescer(() => this.#write(), coalesce);
  }

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
   * Queues one event; `delta` marks a token delta, which may wait a little for company. Returns a
   * promise while the client is not keeping up (wait for it before sending more), so a slow reader
   * bounds the memory a stream can hold.
   */
  send(data: string, event?: string, delta = false): Promise<void> | undefined {
    if (this.response.destroyed) return undefined;
    this.#pending += event ? `event: ${event}\ndata: ${data}\n\n` : `data: ${data}\n\n`;
    if (this.#pending.length >= FLUSH_BYTES) this.#coalescer.flushNow();
    else this.#coalescer.queued(delta);
    return this.#drain;
  }

  #write(): void {
    if (this.#pending === "" || this.response.destroyed) return;
    const ok = this.response.write(this.#pending);
    this.#pending = "";
    if (!ok && !this.#drain) this.#drain = this.#drained().finally(() => (this.#drain = undefined));
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

  /** Writes what is queued and ends the response, in one write. */
  end(): void {
    this.#coalescer.stop();
    const rest = this.#pending;
    this.#pending = "";
    if (this.response.destroyed) return;
    if (rest === "") this.response.end();
    else this.response.end(rest);
  }
}
