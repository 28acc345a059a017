/**
 * A push/pull queue that bridges callback-style producers (node-llama-cpp's onTextChunk and
 * friends) to an async iterator. Unbounded on purpose: the producer is paced by token decoding and
 * stops when the consumer's AbortSignal fires.
 */
export class AsyncQueue<T> {
  readonly #items: T[] = [];
  #waiter: (() => void) | undefined;
  #closed = false;
  #error: unknown;

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

  async *drain(): AsyncGenerator<T> {
    for (;;) {
      while (this.#items.length > 0) yield this.#items.shift()!;
      if (this.#closed) {
        if (this.#error !== undefined) throw this.#error;
        return;
      }
      await new Promise<void>((resolve) => (this.#waiter = resolve));
    }
  }
}
