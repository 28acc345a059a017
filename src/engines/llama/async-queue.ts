/**
 * A push/pull queue that bridges callback-style producers (node-llama-cpp's onTextChunk and
 * friends) to an async iterator. Unbounded on purpose: the producer is paced by token decoding and
 * stops when the consumer's AbortSignal fires.
 *
 * When the consumer falls behind (a slow client holds the server back, or the event loop is busy),
 * the items waiting are merged where `merge` allows (consecutive text deltas become one), so a
 * backlog is sent as one event and one write instead of one per token.
 */
export class AsyncQueue<T> {
  #items: T[] = [];
  #head = 0;
  #waiter: (() => void) | undefined;
  #closed = false;
  #error: unknown;

  /** `merge(a, b)` returns one item standing for `a` then `b`, or undefined when they stay apart. */
  constructor(private readonly merge?: (a: T, b: T) => T | undefined) {}

  push(item: T): void {
    this.#items.push(item);
    this.#wake();
  }

  close(error?: unknown): void {
    this.#closed = true;
    this.#error = error;
    this.#wake();
  }

  #wake(): void {
    const waiter = this.#waiter;
    this.#waiter = undefined;
    waiter?.();
  }

  #take(): T {
    const items = this.#items;
    let item = items[this.#head++] as T;
    if (this.merge) {
      while (this.#head < items.length) {
        const merged = this.merge(item, items[this.#head] as T);
        if (merged === undefined) break;
        item = merged;
        this.#head++;
      }
    }
    if (this.#head === items.length) {
      this.#items = [];
      this.#head = 0;
    }
    return item;
  }

  async *drain(): AsyncGenerator<T> {
    for (;;) {
      while (this.#head < this.#items.length) yield this.#take();
      if (this.#closed) {
        if (this.#error !== undefined) throw this.#error;
        return;
      }
      await new Promise<void>((resolve) => (this.#waiter = resolve));
    }
  }
}
