/**
 * The numbered events of one response, kept so a client can resume its stream
 * (`GET /v1/responses/{id}?stream=true&starting_after=N`): live on the instance that generates it,
 * and in the store in chunks (background responses as they go, stored streaming responses with
 * their record).
 *
 * Contract:
 * - Events are pushed in sequence order, each once; `read(after)` yields every event whose
 *   `sequence_number` is greater than `after`, in order, then waits for more until the terminal
 *   event (`response.completed`, `response.incomplete`, `response.failed`) has been yielded or the
 *   log is closed. Readers never hold up the writer: they are woken, never awaited.
 * - `unsaved()` is what the store does not hold yet (for its next write), oldest first; every
 *   event stays in memory for live readers until the log is dropped.
 * - A chunk in the store is `encodeEvents`' bytes: JSON lines compressed with raw deflate (level 1:
 *   delta events are ~150 bytes of repeated keys around a few characters, and compress ~25×).
 */
import { deflateRawSync, inflateRawSync } from "node:zlib";
import type { ResponseEvent } from "../protocol/responses.js";

export const TERMINAL_EVENTS: ReadonlySet<string> = new Set([
  "response.completed",
  "response.incomplete",
  "response.failed",
]);

/** A run of consecutive events as the store keeps them. */
export interface EventChunk {
  /** `sequence_number` of the first and last event in `data`. */
  first: number;
  last: number;
  data: Uint8Array;
}

export function isTerminal(event: ResponseEvent): boolean {
  return TERMINAL_EVENTS.has(event.type);
}

export function sequenceOf(event: ResponseEvent): number {
  return event.sequence_number as number;
}

export function encodeEvents(events: readonly ResponseEvent[]): EventChunk {
  const text = events.map((event) => JSON.stringify(event)).join("\n");
  return {
    first: sequenceOf(events[0]!),
    last: sequenceOf(events.at(-1)!),
    data: deflateRawSync(text, { level: 1 }),
  };
}

/** The events of stored chunks (in order) whose sequence number is greater than `after`. */
export function decodeEvents(chunks: readonly EventChunk[], after: number): ResponseEvent[] {
  const events: ResponseEvent[] = [];
  for (const chunk of chunks) {
    if (chunk.last <= after) continue;
    const text = inflateRawSync(chunk.data).toString("utf8");
    for (const line of text.split("\n")) {
      const event = JSON.parse(line) as ResponseEvent;
      if (sequenceOf(event) > after) events.push(event);
    }
  }
  return events;
}

export class EventLog {
  readonly #events: ResponseEvent[] = [];
  /** The sequence number of the last event the store holds. */
  #savedThrough = -1;
  #closed = false;
  readonly #waiters = new Set<() => void>();

  get terminal(): ResponseEvent | undefined {
    const last = this.#events.at(-1);
    return last !== undefined && isTerminal(last) ? last : undefined;
  }

  get lastSequence(): number {
    const last = this.#events.at(-1);
    return last === undefined ? -1 : sequenceOf(last);
  }

  push(event: ResponseEvent): void {
    if (this.#closed) return;
    this.#events.push(event);
    this.#wake();
  }

  /**
   * The events the store does not hold yet, plus `terminal` when given (a response's last event,
   * written with its record before it is pushed here).
   */
  unsaved(terminal?: ResponseEvent): ResponseEvent[] {
    let start = this.#events.length;
    while (start > 0 && sequenceOf(this.#events[start - 1]!) > this.#savedThrough) start--;
    const events = this.#events.slice(start);
    if (terminal !== undefined && sequenceOf(terminal) > this.lastSequence) events.push(terminal);
    return events;
  }

  /** The store now holds every event up to sequence number `through`. */
  saved(through: number): void {
    this.#savedThrough = Math.max(this.#savedThrough, through);
  }

  /** Ends live reading: readers get what there is and stop. */
  close(): void {
    this.#closed = true;
    this.#wake();
  }

  async *read(after: number, signal?: AbortSignal): AsyncGenerator<ResponseEvent> {
    let next = this.#events.findIndex((event) => sequenceOf(event) > after);
    if (next < 0) next = this.#events.length;
    for (;;) {
      while (next < this.#events.length) {
        const event = this.#events[next++]!;
        yield event;
        if (isTerminal(event)) return;
      }
      if (this.#closed || signal?.aborted) return;
      await new Promise<void>((resolve) => {
        const done = (): void => {
          this.#waiters.delete(done);
          signal?.removeEventListener("abort", done);
          resolve();
        };
        this.#waiters.add(done);
        signal?.addEventListener("abort", done, { once: true });
      });
    }
  }

  #wake(): void {
    for (const waiter of [...this.#waiters]) waiter();
  }
}
