/**
 * Where conversations (the Conversations API) live: a conversation's metadata and its ordered
 * items. Part of the response store seam (`ResponseStore.conversations`), in the same database as
 * the responses; `MemoryConversationStore` is the in-memory one, `src/store/sqlite-conversations.ts`
 * and `src/store/postgres-conversations.ts` the others.
 *
 * Contract:
 * - Every method takes the owner (the API key's id); another owner's conversation behaves exactly as
 *   a missing one (`undefined` / `false`), as stored responses do.
 * - Items are kept in the order they were appended, each with an id unique within its
 *   conversation (the caller gives every item one); `append` adds all its items or none (one
 *   transaction) and answers false when the conversation does not exist.
 * - `list` pages by item id: the items after `after` in the given order; `after` naming no item of
 *   the conversation is `{ found: false }` for the whole page (the caller says which parameter).
 * - Deleting a conversation deletes its items.
 */
import type { Awaitable, InputItemRecord } from "./store-records.js";

export interface ConversationRecord {
  id: string;
  owner: string;
  /** Unix seconds. */
  createdAt: number;
  metadata: Record<string, string>;
}

export interface ItemPage {
  limit: number;
  order: "asc" | "desc";
  after?: string;
}

export type ItemPageResult =
  | { found: true; data: InputItemRecord[]; hasMore: boolean }
  /** `conversation`: the conversation is missing; `after`: the `after` item is not in it. */
  | { found: false; missing: "conversation" | "after" };

export interface ConversationStore {
  create(conversation: ConversationRecord, items: readonly InputItemRecord[]): Awaitable<void>;
  get(id: string, owner: string): Awaitable<ConversationRecord | undefined>;
  /** Replaces the metadata; the updated conversation, or undefined when there is none. */
  update(
    id: string,
    owner: string,
    metadata: Record<string, string>,
  ): Awaitable<ConversationRecord | undefined>;
  delete(id: string, owner: string): Awaitable<boolean>;
  /** Appends items at the end; false when the conversation does not exist. */
  append(id: string, owner: string, items: readonly InputItemRecord[]): Awaitable<boolean>;
  /** Every item, oldest first (the context of a response that continues the conversation). */
  items(id: string, owner: string): Awaitable<InputItemRecord[] | undefined>;
  list(id: string, owner: string, page: ItemPage): Awaitable<ItemPageResult>;
  item(id: string, owner: string, itemId: string): Awaitable<InputItemRecord | undefined>;
  deleteItem(id: string, owner: string, itemId: string): Awaitable<boolean>;
}

/** Items of one page of `ordered` (already in the page's order) after the item `after`. */
export function pageOf(ordered: readonly InputItemRecord[], page: ItemPage): ItemPageResult {
  let start = 0;
  if (page.after !== undefined) {
    const at = ordered.findIndex((item) => item.id === page.after);
    if (at < 0) return { found: false, missing: "after" };
    start = at + 1;
  }
  return {
    found: true,
    data: ordered.slice(start, start + page.limit),
    hasMore: start + page.limit < ordered.length,
  };
}

interface Entry {
  record: ConversationRecord;
  items: InputItemRecord[];
  /** Estimated size: the JSON text of the items and metadata. */
  bytes: number;
}

/**
 * Conversations in memory (with `MemoryResponseStore`, `--store memory`): at most `capacity` of
 * them and about `maxBytes` (their items' JSON text); the least recently used go first, never the
 * one being written.
 */
export class MemoryConversationStore implements ConversationStore {
  readonly #conversations = new Map<string, Entry>();
  #bytes = 0;

  constructor(
    readonly capacity = 1000,
    readonly maxBytes = 64 * 1024 * 1024,
  ) {}

  create(conversation: ConversationRecord, items: readonly InputItemRecord[]): void {
    const entry: Entry = {
      record: { ...conversation },
      items: [],
      bytes: JSON.stringify(conversation.metadata).length,
    };
    this.#conversations.set(conversation.id, entry);
    this.#bytes += entry.bytes;
    this.#add(entry, items);
  }

  get(id: string, owner: string): ConversationRecord | undefined {
    const entry = this.#entry(id, owner);
    return entry === undefined ? undefined : { ...entry.record };
  }

  update(id: string, owner: string, metadata: Record<string, string>): ConversationRecord | undefined {
    const entry = this.#entry(id, owner);
    if (entry === undefined) return undefined;
    const delta = JSON.stringify(metadata).length - JSON.stringify(entry.record.metadata).length;
    entry.record.metadata = { ...metadata };
    entry.bytes += delta;
    this.#bytes += delta;
    return { ...entry.record };
  }

  delete(id: string, owner: string): boolean {
    const entry = this.#entry(id, owner);
    if (entry === undefined) return false;
    this.#bytes -= entry.bytes;
    return this.#conversations.delete(id);
  }

  append(id: string, owner: string, items: readonly InputItemRecord[]): boolean {
    const entry = this.#entry(id, owner);
    if (entry === undefined) return false;
    this.#add(entry, items);
    return true;
  }

  items(id: string, owner: string): InputItemRecord[] | undefined {
    const entry = this.#entry(id, owner);
    return entry === undefined ? undefined : [...entry.items];
  }

  list(id: string, owner: string, page: ItemPage): ItemPageResult {
    const entry = this.#entry(id, owner);
    if (entry === undefined) return { found: false, missing: "conversation" };
    return pageOf(page.order === "asc" ? entry.items : [...entry.items].reverse(), page);
  }

  item(id: string, owner: string, itemId: string): InputItemRecord | undefined {
    return this.#entry(id, owner)?.items.find((item) => item.id === itemId);
  }

  deleteItem(id: string, owner: string, itemId: string): boolean {
    const entry = this.#entry(id, owner);
    const at = entry?.items.findIndex((item) => item.id === itemId) ?? -1;
    if (at < 0) return false;
    const [removed] = entry!.items.splice(at, 1);
    const bytes = JSON.stringify(removed).length;
    entry!.bytes -= bytes;
    this.#bytes -= bytes;
    return true;
  }

  clear(): void {
    this.#conversations.clear();
    this.#bytes = 0;
  }

  #add(entry: Entry, items: readonly InputItemRecord[]): void {
    const bytes = items.reduce((sum, item) => sum + JSON.stringify(item).length, 0);
    entry.items.push(...items);
    entry.bytes += bytes;
    this.#bytes += bytes;
    while (
      this.#conversations.size > 1 &&
      (this.#conversations.size > this.capacity || this.#bytes > this.maxBytes)
    ) {
      const [oldest, victim] = this.#conversations.entries().next().value!;
      if (victim === entry) break;
      this.#conversations.delete(oldest);
      this.#bytes -= victim.bytes;
    }
  }

  /** The entry, marked as the most recently used. */
  #entry(id: string, owner: string): Entry | undefined {
    const entry = this.#conversations.get(id);
    if (entry?.record.owner !== owner) return undefined;
    this.#conversations.delete(id);
    this.#conversations.set(id, entry);
    return entry;
  }
}
