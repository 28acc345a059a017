/**
 * A byte budget for things kept in memory only to make later requests cheaper (a WebSocket lane's
 * latest conversation): when what is held passes the limit, the least recently used holders are
 * evicted (their `evict` callback runs) until it fits again. Nothing is ever refused: a holder
 * larger than the whole budget is evicted at once.
 *
 * Sizes are estimates (string lengths plus a fixed overhead per item), not heap measurements.
 */
import type { ConversationItem } from "../engine/types.js";

interface Holding {
  bytes: number;
  evict: () => void;
}

export class ByteBudget {
  /** Insertion order is recency: the first entry is the least recently used. */
  readonly #holdings = new Map<object, Holding>();
  #bytes = 0;

  constructor(readonly limitBytes: number) {}

  get bytes(): number {
    return this.#bytes;
  }

  /** Holds `bytes` for `holder` (replacing what it held), then evicts the least recently used until within the limit. */
  hold(holder: object, bytes: number, evict: () => void): void {
    this.release(holder);
    this.#holdings.set(holder, { bytes, evict });
    this.#bytes += bytes;
    for (const [oldest, holding] of this.#holdings) {
      if (this.#bytes <= this.limitBytes) break;
      this.release(oldest);
      holding.evict();
    }
  }

  /** Marks `holder` as just used, so it is evicted last. */
  touch(holder: object): void {
    const holding = this.#holdings.get(holder);
    if (!holding) return;
    this.#holdings.delete(holder);
    this.#holdings.set(holder, holding);
  }

  /** Forgets `holder` without calling its `evict`; idempotent. */
  release(holder: object): void {
    const holding = this.#holdings.get(holder);
    if (!holding) return;
    this.#holdings.delete(holder);
    this.#bytes -= holding.bytes;
  }
}

/** Fixed cost assumed per item and per object beyond its strings (object headers, fields, ids). */
const ITEM_OVERHEAD_BYTES = 128;

/** Estimated memory of a conversation: its strings (at two bytes a character, the worst case) and items. */
export function conversationBytes(items: readonly ConversationItem[]): number {
  let bytes = 0;
  for (const item of items) {
    bytes += ITEM_OVERHEAD_BYTES;
    if (item.type === "message") bytes += item.text.length * 2;
    else if (item.type === "tool_call") bytes += (item.input.length + item.name.length) * 2;
    else bytes += item.output.length * 2;
    // Images (data URLs of up to megabytes) count too; their text parts are already in `text`.
    if (item.type !== "tool_call")
      for (const part of item.parts ?? []) if (part.type === "image") bytes += part.url.length * 2;
  }
  return bytes;
}
