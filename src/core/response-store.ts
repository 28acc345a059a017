/**
 * Where finished responses live so `previous_response_id` can continue a chain and
 * `GET /v1/responses/{id}` can find them. The seam is this interface; `MemoryResponseStore` is the
 * bounded in-memory implementation (tests, `--store memory`), `src/store/sqlite-store.ts` the
 * durable embedded one, `src/store/postgres-store.ts` the one many instances share.
 *
 * Contract:
 * - Every method may answer synchronously or with a promise (`Awaitable`): the memory and SQLite
 *   stores answer at once (no promise, no extra tick on the hot path), Postgres over the network.
 *   Callers always `await`.
 * - Every record belongs to one owner (the API key's id, or `anonymous` without keys). `get`, `item`
 *   and `delete` with another owner behave exactly as if the id did not exist: one key can never see,
 *   continue, reference or delete another key's responses.
 * - A record holds its own turn (`items`) and links to its predecessor; `chainConversation` walks the
 *   links. Deleting a response removes its turn: its successors can then no longer be continued
 *   (`previous_response_not_found`), though they can still be read.
 * - `put` is durable when it returns (for durable stores): a response whose terminal event a client
 *   has seen survives a crash of the server.
 * - Records are immutable once written; `put` with an existing id replaces the record.
 * - A `put` or `delete` that cannot write throws `StoreWriteError` and changes nothing: what the store
 *   held before stays intact, and a later write succeeds once the cause (a full disk, a database
 *   that went away) is gone. A read that cannot reach the store throws `StoreUnavailableError`.
 * - Whatever a store keeps in memory is bounded in bytes as well as in count, so large inputs cannot
 *   grow the heap without limit.
 */
import type { ConversationItem } from "../engine/types.js";
import type { ResponseObject } from "../protocol/responses.js";
import { MemoryConversationStore, type ConversationStore } from "./conversation-store.js";
import type { EventChunk } from "./event-log.js";
import { MemoryRunStore, type RunStore } from "./run-store.js";

import type { Awaitable, InputItemRecord } from "./store-records.js";

export type { Awaitable, InputItemRecord } from "./store-records.js";

export interface StoredResponse {
  /** Id of the API key that created the response. */
  owner: string;
  response: ResponseObject;
  /** The response's own input items as the client sent them (normalized, each with an id). */
  inputItems: readonly InputItemRecord[];
  /**
   * The conversation items this response added to its chain: its own input (steering input
   * included) followed by its output, without instructions (a successor does not inherit them).
   * What came before them is the conversation of `response.previous_response_id`, unless
   * `standalone`. Storing each turn once keeps a chain of n turns O(n) in size, not O(n²).
   */
  items: readonly ConversationItem[];
  /**
   * `items` is the whole conversation, and no predecessor is read: a chain's first response, one
   * whose input starts from a compaction item (or that compacted its context), one whose
   * predecessor was not stored, and records written before the store kept turns apart.
   */
  standalone: boolean;
  /**
   * Events of the response not stored yet (a stored streaming or background response: its last
   * ones, terminal included), written in the same transaction as the record and never read back
   * with it (see `RunStore.events`).
   */
  events?: EventChunk;
}

/**
 * A stored item as `item_reference` resolves it: an output item of a stored response, or one of
 * its input items, in wire shape with its `id`.
 */
export type StoredItem = InputItemRecord;

/**
 * A store could not write: the disk (or quota) is full, the file system failed, or the database is
 * unreachable. The message is a short reason (e.g. `SQLITE_FULL: database or disk is full`), without
 * paths, addresses or credentials.
 */
export class StoreWriteError extends Error {
  override readonly name = "StoreWriteError";
  /** True when the database could not be reached (a retry may succeed once it is back). */
  readonly unavailable: boolean;
  constructor(
    message: string,
    /** True when the write failed for lack of space. */
    readonly full: boolean,
    options?: ErrorOptions & { unavailable?: boolean },
  ) {
    super(message, options);
    this.name = "StoreWriteError";
    this.unavailable = options?.unavailable ?? false;
  }
}

/**
 * A store could not be read: its database is unreachable (down, restarting, connection lost). The
 * message is a short reason without addresses or credentials; the caller may retry.
 */
export class StoreUnavailableError extends Error {
  override readonly name = "StoreUnavailableError";
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "StoreUnavailableError";
  }
}

export interface ResponseStore {
  get(id: string, owner: string): Awaitable<StoredResponse | undefined>;
  /** Whether `owner` has a stored response `id` (without reading it). */
  has(id: string, owner: string): Awaitable<boolean>;
  /** The conversation a successor of `owner`'s response `id` continues (see `chainConversation`). */
  chain(id: string, owner: string): Awaitable<ChainConversation>;
  /**
   * The item with id `itemId` among the output and input items of `owner`'s stored responses (for
   * `item_reference`). When several responses hold an item with that id (a client resent an output
   * item with its id), the first stored wins.
   */
  item(itemId: string, owner: string): Awaitable<StoredItem | undefined>;
  /**
   * Writes a record, and its `events` with it. A record of a background response
   * (`response.background`) ends its run: the run row is deleted in the same transaction.
   */
  put(record: StoredResponse): Awaitable<void>;
  /** Deletes a record with its stored events (and its run row, if it still has one). */
  delete(id: string, owner: string): Awaitable<boolean>;
  /**
   * Background responses and the events of resumable streams; absent in a store that keeps none
   * (then `background: true` and `GET …?stream=true` are refused).
   */
  readonly runs?: RunStore;
  /** The Conversations API's conversations; absent in a store that keeps none (the API is refused). */
  readonly conversations?: ConversationStore;
  /** Releases files, handles and connections; the store is unusable afterwards. */
  close(): Awaitable<void>;
  /**
   * Whether the store can serve now, for `/healthz`; answers promptly (a store shared over the
   * network bounds its probe). Absent where there is nothing to check (memory, SQLite).
   */
  health?(): Promise<StoreHealth>;
}

/** A store's health: `ok`, or not (degraded) with a short reason, never an address or password. */
export interface StoreHealth {
  ok: boolean;
  detail: string;
}

/** The item `itemId` of `record`: one of its output items, else one of its input items. */
export function itemOf(record: StoredResponse, itemId: string): StoredItem | undefined {
  const output = record.response.output.find((item) => item.id === itemId);
  if (output !== undefined) return output as unknown as StoredItem;
  return record.inputItems.find((item) => item.id === itemId);
}

/** Ids of the items `item` resolves: those of `record`'s output and input items. */
export function itemIdsOf(record: StoredResponse): string[] {
  const ids = record.response.output.map((item) => item.id);
  for (const item of record.inputItems) if (typeof item.id === "string") ids.push(item.id);
  return ids;
}

/** The conversation a successor of a stored response continues, or why there is none. */
export type ChainConversation =
  | { found: true; conversation: ConversationItem[] }
  /** `missing` is the earlier response of the chain that is gone (deleted); absent when `id` itself is unknown. */
  | { found: false; missing?: string };

/**
 * The whole conversation of `owner`'s stored response `id` in a store that reads synchronously: the
 * `items` of every response of its chain, walked back through `previous_response_id` (iteratively:
 * chains can be long) to a standalone record, oldest first, without system messages (instructions
 * are not inherited). A
 * chain one of whose earlier responses was deleted cannot be continued: the deleted turn is gone,
 * and a conversation with a hole in it is not what the client asked to continue.
 */
export function chainConversation(
  store: { get(id: string, owner: string): StoredResponse | undefined },
  id: string,
  owner: string,
): ChainConversation {
  let record = store.get(id, owner);
  if (record === undefined) return { found: false };
  const turns: (readonly ConversationItem[])[] = [];
  const seen = new Set<string>();
  for (;;) {
    turns.push(record.items);
    seen.add(record.response.id);
    const previous = record.response.previous_response_id;
    if (record.standalone || previous === null || seen.has(previous)) break;
    const earlier = store.get(previous, owner);
    if (earlier === undefined) return { found: false, missing: previous };
    record = earlier;
  }
  const conversation: ConversationItem[] = [];
  for (let index = turns.length - 1; index >= 0; index--) {
    for (const item of turns[index]!) {
      if (item.type === "message" && item.role === "system") continue;
      conversation.push(item);
    }
  }
  return { found: true, conversation };
}

/** Records and bytes `MemoryResponseStore` keeps by default (`--store memory`). */
export const MEMORY_STORE_CAPACITY = 1000;
export const MEMORY_STORE_MAX_BYTES = 256 * 1024 * 1024;

/**
 * The last `capacity` records, and at most about `maxBytes` of them (estimated with
 * `approximateBytes`): the oldest are evicted first. The newest record is always kept, whatever its
 * size, so a chain can continue from it. An evicted record's conversation is folded into the
 * records that continue it (they become standalone), so eviction, unlike `delete`, never stops a
 * kept response from being continued.
 */
export class MemoryResponseStore implements ResponseStore {
  readonly #records = new Map<string, { record: StoredResponse; bytes: number }>();
  /** Ids of the records that continue each record (`previous_response_id`, not standalone). */
  readonly #successors = new Map<string, Set<string>>();
  /** Per owner, the response holding each item id (the first stored). */
  readonly #items = new Map<string, Map<string, string>>();
  #bytes = 0;
  readonly runs = new MemoryRunStore();
  readonly conversations = new MemoryConversationStore();

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

  has(id: string, owner: string): boolean {
    return this.get(id, owner) !== undefined;
  }

  chain(id: string, owner: string): ChainConversation {
    return chainConversation(this, id, owner);
  }

  item(itemId: string, owner: string): StoredItem | undefined {
    const responseId = this.#items.get(owner)?.get(itemId);
    const record = responseId === undefined ? undefined : this.get(responseId, owner);
    return record === undefined ? undefined : itemOf(record, itemId);
  }

  put(stored: StoredResponse): void {
    const { events, ...record } = stored;
    const id = record.response.id;
    if (events !== undefined) this.runs.appendEvents(id, record.owner, events);
    if (record.response.background) this.runs.finish(id);
    // A replaced record keeps the records that continue it.
    const successors = this.#successors.get(id);
    this.#forget(id, false);
    this.#add(record);
    if (successors !== undefined) this.#successors.set(id, successors);
    while (this.#records.size > this.capacity || (this.#bytes > this.maxBytes && this.#records.size > 1)) {
      const oldest = this.#records.keys().next().value;
      if (oldest === undefined) break;
      this.#evict(oldest);
    }
  }

  delete(id: string, owner: string): boolean {
    if (this.#records.get(id)?.record.owner !== owner) return false;
    return this.#forget(id);
  }

  close(): void {
    this.#records.clear();
    this.#successors.clear();
    this.#items.clear();
    this.#bytes = 0;
    this.runs.clear();
    this.conversations.clear();
  }

  #add(record: StoredResponse): void {
    const id = record.response.id;
    const bytes = approximateBytes(record) + this.runs.eventBytes(id);
    this.#records.set(id, { record, bytes });
    this.#bytes += bytes;
    const previous = record.response.previous_response_id;
    if (!record.standalone && previous !== null) {
      const successors = this.#successors.get(previous) ?? new Set<string>();
      successors.add(id);
      this.#successors.set(previous, successors);
    }
    let items = this.#items.get(record.owner);
    if (items === undefined) this.#items.set(record.owner, (items = new Map()));
    for (const itemId of itemIdsOf(record)) if (!items.has(itemId)) items.set(itemId, id);
  }

  /** Forgets `id` to make room, first making its successors standalone with its conversation. */
  #evict(id: string): void {
    const entry = this.#records.get(id);
    const successors = this.#successors.get(id);
    if (entry !== undefined && successors !== undefined) {
      const { owner } = entry.record;
      const chain = chainConversation(this, id, owner);
      for (const successor of successors) {
        const next = this.#records.get(successor)?.record;
        if (next === undefined || next.owner !== owner || next.standalone || !chain.found) continue;
        // Replaced in place: the successor keeps its place in the eviction order.
        const folded: StoredResponse = {
          ...next,
          items: [...chain.conversation, ...next.items],
          standalone: true,
        };
        const bytes = approximateBytes(folded) + this.runs.eventBytes(successor);
        this.#bytes += bytes - this.#records.get(successor)!.bytes;
        this.#records.set(successor, { record: folded, bytes });
      }
    }
    this.#forget(id);
  }

  /** Forgets a record (and, unless it is being replaced, its events and run). */
  #forget(id: string, dropEvents = true): boolean {
    const entry = this.#records.get(id);
    if (entry === undefined) return false;
    this.#records.delete(id);
    if (dropEvents) this.runs.forget(id);
    this.#bytes -= entry.bytes;
    this.#successors.delete(id);
    const { record } = entry;
    const previous = record.response.previous_response_id;
    if (previous !== null) this.#successors.get(previous)?.delete(id);
    const items = this.#items.get(record.owner);
    if (items !== undefined) {
      for (const itemId of itemIdsOf(record)) if (items.get(itemId) === id) items.delete(itemId);
      if (items.size === 0) this.#items.delete(record.owner);
    }
    return true;
  }
}

/** What a record costs beyond its JSON text: objects, maps, the cache entry (measured at ~1.4× for small records). */
export const RECORD_OVERHEAD_BYTES = 1024;

/**
 * A record's size in memory, estimated as the length of its JSON text plus `RECORD_OVERHEAD_BYTES`
 * (without building the text): string contents dominate large records. Items shared between records
 * (an evicted record's conversation, folded into each of its successors) are counted in each, so
 * the estimate errs on the large side.
 */
export function approximateBytes(record: StoredResponse): number {
  return (
    RECORD_OVERHEAD_BYTES +
    record.owner.length +
    jsonLength(record.response) +
    jsonLength(record.inputItems) +
    jsonLength(record.items)
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
