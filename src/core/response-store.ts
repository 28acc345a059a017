/**
 * Where finished responses live so `previous_response_id` can continue a chain and
 * `GET /v1/responses/{id}` can find them. The seam is this interface; `MemoryResponseStore` is the
 * bounded in-memory implementation (tests, `--no-store-dir`), `src/store/sqlite-store.ts` the
 * durable one.
 *
 * Contract:
 * - Every record belongs to one owner (the API key's id, or `anonymous` without keys). `get` and
 *   `delete` with another owner behave exactly as if the id did not exist: one key can never see,
 *   continue or delete another key's responses.
 * - `put` is durable when it returns (for durable stores): a response whose terminal event a client
 *   has seen survives a crash of the server.
 * - Records are immutable once written; `put` with an existing id replaces the record.
 * - A `put` or `delete` that cannot write throws `StoreWriteError` and changes nothing: what the store
 *   held before stays intact, and a later write succeeds once the cause (a full disk) is gone.
 * - Whatever a store keeps in memory is bounded in bytes as well as in count, so large inputs cannot
 *   grow the heap without limit.
 */
import type { ConversationItem } from "../engine/types.js";
import type { ResponseObject } from "../protocol/responses.js";

/** One item of `GET /v1/responses/{id}/input_items`: the wire shape, with an `id`. */
export type InputItemRecord = { id: string; type: string } & Record<string, unknown>;

export interface StoredResponse {
  /** Id of the API key that created the response. */
  owner: string;
  response: ResponseObject;
  /** The response's own input items as the client sent them (normalized, each with an id). */
  inputItems: readonly InputItemRecord[];
  /** The full conversation the response saw (history included), followed by its output. */
  conversation: readonly ConversationItem[];
}

/**
 * A store could not write: the disk (or quota) is full, or the file system failed. The message is a
 * short reason (e.g. `SQLITE_FULL: database or disk is full`), without paths.
 */
export class StoreWriteError extends Error {
  override readonly name = "StoreWriteError";
  constructor(
    message: string,
    /** True when the write failed for lack of space. */
    readonly full: boolean,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = "StoreWriteError";
  }
}

export interface ResponseStore {
  get(id: string, owner: string): StoredResponse | undefined;
  put(record: StoredResponse): void;
  delete(id: string, owner: string): boolean;
  /** Releases files and handles; the store is unusable afterwards. */
  close(): void;
}

/** Records and bytes `MemoryResponseStore` keeps by default (`--store memory`). */
export const MEMORY_STORE_CAPACITY = 1000;
export const MEMORY_STORE_MAX_BYTES = 256 * 1024 * 1024;

/**
 * The last `capacity` records, and at most about `maxBytes` of them (estimated with
 * `approximateBytes`): the oldest are evicted first. The newest record is always kept, whatever its
 * size, so a chain can continue from it.
 */
export class MemoryResponseStore implements ResponseStore {
  readonly #records = new Map<string, { record: StoredResponse; bytes: number }>();
  #bytes = 0;

  constructor(
    readonly capacity = MEMORY_STORE_CAPACITY,
    readonly maxBytes = MEMORY_STORE_MAX_BYTES,
  ) {}

  /** The estimated size of the records held. */
  get storedBytes(): number {
    return this.#bytes;
  }

  get(id: string, owner: string): StoredResponse | undefined {
    const record = this.#records.get(id)?.record;
    return record?.owner === owner ? record : undefined;
  }

  put(record: StoredResponse): void {
    const id = record.response.id;
    this.#forget(id);
    const bytes = approximateBytes(record);
    this.#records.set(id, { record, bytes });
    this.#bytes += bytes;
    while (this.#records.size > this.capacity || (this.#bytes > this.maxBytes && this.#records.size > 1)) {
      const oldest = this.#records.keys().next().value;
      if (oldest === undefined) break;
      this.#forget(oldest);
    }
  }

  delete(id: string, owner: string): boolean {
    if (this.#records.get(id)?.record.owner !== owner) return false;
    return this.#forget(id);
  }

  close(): void {
    this.#records.clear();
    this.#bytes = 0;
  }

  #forget(id: string): boolean {
    const entry = this.#records.get(id);
    if (entry === undefined) return false;
    this.#records.delete(id);
    this.#bytes -= entry.bytes;
    return true;
  }
}

/** What a record costs beyond its JSON text: objects, maps, the cache entry (measured at ~1.4× for small records). */
export const RECORD_OVERHEAD_BYTES = 1024;

/**
 * A record's size in memory, estimated as the length of its JSON text plus `RECORD_OVERHEAD_BYTES`
 * (without building the text): string contents dominate large records. Items shared between records
 * (a chain's history) are counted in each, so the estimate errs on the large side.
 */
export function approximateBytes(record: StoredResponse): number {
  return (
    RECORD_OVERHEAD_BYTES +
    record.owner.length +
    jsonLength(record.response) +
    jsonLength(record.inputItems) +
    jsonLength(record.conversation)
  );
}

/** The length of `JSON.stringify(value)`, roughly, walked without recursion (inputs may nest deeply). */
function jsonLength(root: unknown): number {
  let length = 0;
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    const value = pending.pop();
    if (typeof value === "string") length += value.length + 2;
    else if (typeof value === "number") length += 8;
    else if (typeof value === "boolean") length += 5;
    else if (value === null) length += 4;
    else if (Array.isArray(value)) {
      length += 2 + value.length;
      for (const item of value as unknown[]) pending.push(item);
    } else if (typeof value === "object") {
      length += 2;
      for (const [key, item] of Object.entries(value)) {
        length += key.length + 4;
        pending.push(item);
      }
    }
  }
  return length;
}
