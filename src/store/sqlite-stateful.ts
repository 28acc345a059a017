/**
 * The SQLite store's background runs, event chunks and conversations (`ResponseStore.runs` and
 * `.conversations`), in the same database and connection as its responses (schema version 3), with
 * the same guarantees: every method filters on the owner, each write is one transaction committed
 * (to the WAL) before it returns, and a failed write is `StoreWriteError` and changes nothing.
 *
 * One process owns a data directory, so every run a starting server finds is an orphan (whatever
 * instance name it had: `--port 0` gives a new one each start); the lease and the cancel flag still
 * work through the rows, as in Postgres.
 */
import type Database from "better-sqlite3";
import {
  type ConversationRecord,
  type ConversationStore,
  type ItemPage,
  type ItemPageResult,
} from "../core/conversation-store.js";
import type { EventChunk } from "../core/event-log.js";
import { StoreWriteError, type InputItemRecord } from "../core/response-store.js";
import type { BackgroundRun, RunStore } from "../core/run-store.js";
import type { ResponseObject } from "../protocol/responses.js";

/** Schema version 3: background runs, event chunks, conversations and their items. */
export const STATEFUL_MIGRATION = `
  CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    instance TEXT NOT NULL,
    lease_until INTEGER NOT NULL,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    response TEXT NOT NULL,
    input_items TEXT NOT NULL
  );
  CREATE TABLE response_events (
    response_id TEXT NOT NULL,
    owner TEXT NOT NULL,
    first_seq INTEGER NOT NULL,
    last_seq INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (response_id, first_seq)
  );
  CREATE TABLE conversations (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    metadata TEXT NOT NULL
  );
  CREATE TABLE conversation_items (
    conversation_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (conversation_id, position)
  );
  CREATE UNIQUE INDEX conversation_items_id ON conversation_items (conversation_id, id);`;

interface RunRow {
  id: string;
  owner: string;
  instance: string;
  lease_until: number;
  cancel_requested: number;
  response: string;
  input_items: string;
}

interface ChunkRow {
  first_seq: number;
  last_seq: number;
  data: Buffer;
}

function runOf(row: RunRow): BackgroundRun {
  return {
    id: row.id,
    owner: row.owner,
    instance: row.instance,
    leaseUntil: row.lease_until,
    cancelRequested: row.cancel_requested !== 0,
    response: JSON.parse(row.response) as ResponseObject,
    inputItems: JSON.parse(row.input_items) as InputItemRecord[],
  };
}

/** A write as one transaction; what SQLite refuses is `StoreWriteError`. */
function writing<T>(write: () => T): T {
  try {
    return write();
  } catch (error) {
    const code = (error as { code?: unknown } | null)?.code;
    const message = error instanceof Error ? error.message : String(error);
    if (typeof code === "string" && code.startsWith("SQLITE_"))
      throw new StoreWriteError(`${code}: ${message}`, code === "SQLITE_FULL", { cause: error });
    throw error;
  }
}

export class SqliteRunStore implements RunStore {
  readonly local = true;
  readonly #run: Database.Statement<[string, string], RunRow>;
  readonly #insert: Database.Statement<[string, string, string, number, string, string]>;
  readonly #progress: (id: string, owner: string, response: string, events: EventChunk | undefined) => void;
  readonly #cancel: Database.Statement<[string, string]>;
  readonly #renew: (instance: string, ids: readonly string[], leaseUntil: number) => string[];
  readonly #orphans: Database.Statement<[], RunRow>;
  readonly #events: Database.Statement<[string, string, number], ChunkRow>;
  /** Appends a chunk (within the caller's transaction). */
  readonly appendEvents: (id: string, owner: string, chunk: EventChunk) => void;
  /** Deletes a run row (within the caller's transaction). */
  readonly finish: (id: string) => void;
  /** Deletes a response's run row and event chunks (within the caller's transaction). */
  readonly forget: (id: string) => void;

  constructor(db: Database.Database) {
    this.#run = db.prepare("SELECT * FROM runs WHERE id = ? AND owner = ?");
    this.#insert = db.prepare(
      `INSERT OR REPLACE INTO runs (id, owner, instance, lease_until, cancel_requested, response, input_items)
       VALUES (?, ?, ?, ?, 0, ?, ?)`,
    );
    const update = db.prepare<[string, string, string]>(
      "UPDATE runs SET response = ? WHERE id = ? AND owner = ?",
    );
    const append = db.prepare<[string, string, number, number, Buffer]>(
      "INSERT OR REPLACE INTO response_events (response_id, owner, first_seq, last_seq, data) VALUES (?, ?, ?, ?, ?)",
    );
    this.appendEvents = (id, owner, chunk) =>
      void append.run(id, owner, chunk.first, chunk.last, Buffer.from(chunk.data));
    this.#progress = db.transaction(
      (id: string, owner: string, response: string, events: EventChunk | undefined) => {
        if (update.run(response, id, owner).changes === 0) return;
        if (events !== undefined) this.appendEvents(id, owner, events);
      },
    );
    this.#cancel = db.prepare("UPDATE runs SET cancel_requested = 1 WHERE id = ? AND owner = ?");
    const lease = db.prepare<[number, string, string], { id: string; cancel_requested: number }>(
      "UPDATE runs SET lease_until = ? WHERE id = ? AND instance = ? RETURNING id, cancel_requested",
    );
    this.#renew = db.transaction((instance: string, ids: readonly string[], leaseUntil: number) => {
      const cancelled: string[] = [];
      for (const id of ids) {
        const row = lease.get(leaseUntil, id, instance);
        if (row !== undefined && row.cancel_requested !== 0) cancelled.push(row.id);
      }
      return cancelled;
    });
    // One process owns a data directory: every run a starting server finds was left by an earlier one.
    this.#orphans = db.prepare("SELECT * FROM runs");
    this.#events = db.prepare(
      "SELECT first_seq, last_seq, data FROM response_events WHERE response_id = ? AND owner = ? AND last_seq > ? ORDER BY first_seq",
    );
    const deleteRun = db.prepare<[string]>("DELETE FROM runs WHERE id = ?");
    const deleteEvents = db.prepare<[string]>("DELETE FROM response_events WHERE response_id = ?");
    this.finish = (id) => void deleteRun.run(id);
    this.forget = (id) => {
      deleteRun.run(id);
      deleteEvents.run(id);
    };
  }

  start(run: BackgroundRun): void {
    writing(() =>
      this.#insert.run(
        run.id,
        run.owner,
        run.instance,
        run.leaseUntil,
        JSON.stringify(run.response),
        JSON.stringify(run.inputItems),
      ),
    );
  }

  progress(id: string, owner: string, response: ResponseObject, events?: EventChunk): void {
    writing(() => this.#progress(id, owner, JSON.stringify(response), events));
  }

  run(id: string, owner: string): BackgroundRun | undefined {
    const row = this.#run.get(id, owner);
    return row === undefined ? undefined : runOf(row);
  }

  requestCancel(id: string, owner: string): boolean {
    return writing(() => this.#cancel.run(id, owner).changes > 0);
  }

  renew(instance: string, ids: readonly string[], leaseUntil: number): string[] {
    return writing(() => this.#renew(instance, ids, leaseUntil));
  }

  /** Every run: this process owns the data directory, so none of them runs any more. */
  orphans(): BackgroundRun[] {
    return this.#orphans.all().map(runOf);
  }

  events(id: string, owner: string, after: number): EventChunk[] {
    return this.#events
      .all(id, owner, after)
      .map((row) => ({ first: row.first_seq, last: row.last_seq, data: row.data }));
  }
}

interface ConversationRow {
  id: string;
  owner: string;
  created_at: number;
  metadata: string;
}

function conversationOf(row: ConversationRow): ConversationRecord {
  return {
    id: row.id,
    owner: row.owner,
    createdAt: row.created_at,
    metadata: JSON.parse(row.metadata) as Record<string, string>,
  };
}

export class SqliteConversationStore implements ConversationStore {
  readonly #get: Database.Statement<[string, string], ConversationRow>;
  readonly #create: (conversation: ConversationRecord, items: readonly InputItemRecord[]) => void;
  readonly #update: Database.Statement<[string, string, string]>;
  readonly #delete: (id: string, owner: string) => boolean;
  readonly #append: (id: string, owner: string, items: readonly InputItemRecord[]) => boolean;
  readonly #items: Database.Statement<[string], { item: string }>;
  readonly #item: Database.Statement<[string, string, string], { item: string }>;
  readonly #deleteItem: Database.Statement<[string, string, string]>;
  readonly #position: Database.Statement<[string, string], { position: number }>;
  readonly #pageAsc: Database.Statement<[string, number, number], { item: string }>;
  readonly #pageDesc: Database.Statement<[string, number, number], { item: string }>;

  constructor(db: Database.Database) {
    this.#get = db.prepare("SELECT * FROM conversations WHERE id = ? AND owner = ?");
    const insert = db.prepare<[string, string, number, string]>(
      "INSERT INTO conversations (id, owner, created_at, metadata) VALUES (?, ?, ?, ?)",
    );
    const addItem = db.prepare<[string, number, string, string]>(
      "INSERT INTO conversation_items (conversation_id, position, id, item) VALUES (?, ?, ?, ?)",
    );
    const lastPosition = db.prepare<[string], { position: number | null }>(
      "SELECT max(position) AS position FROM conversation_items WHERE conversation_id = ?",
    );
    const add = (id: string, items: readonly InputItemRecord[]): void => {
      let position = (lastPosition.get(id)?.position ?? -1) + 1;
      for (const item of items) addItem.run(id, position++, item.id, JSON.stringify(item));
    };
    this.#create = db.transaction((conversation: ConversationRecord, items: readonly InputItemRecord[]) => {
      insert.run(
        conversation.id,
        conversation.owner,
        conversation.createdAt,
        JSON.stringify(conversation.metadata),
      );
      add(conversation.id, items);
    });
    this.#update = db.prepare("UPDATE conversations SET metadata = ? WHERE id = ? AND owner = ?");
    const remove = db.prepare<[string, string]>("DELETE FROM conversations WHERE id = ? AND owner = ?");
    const removeItems = db.prepare<[string]>("DELETE FROM conversation_items WHERE conversation_id = ?");
    this.#delete = db.transaction((id: string, owner: string) => {
      if (remove.run(id, owner).changes === 0) return false;
      removeItems.run(id);
      return true;
    });
    const exists = db.prepare<[string, string], { found: number }>(
      "SELECT 1 AS found FROM conversations WHERE id = ? AND owner = ?",
    );
    this.#append = db.transaction((id: string, owner: string, items: readonly InputItemRecord[]) => {
      if (exists.get(id, owner) === undefined) return false;
      add(id, items);
      return true;
    });
    this.#items = db.prepare(
      "SELECT item FROM conversation_items WHERE conversation_id = ? ORDER BY position",
    );
    this.#item = db.prepare(
      `SELECT i.item FROM conversation_items AS i JOIN conversations AS c ON c.id = i.conversation_id
       WHERE c.id = ? AND c.owner = ? AND i.id = ?`,
    );
    this.#position = db.prepare(
      "SELECT position FROM conversation_items WHERE conversation_id = ? AND id = ?",
    );
    this.#pageAsc = db.prepare(
      "SELECT item FROM conversation_items WHERE conversation_id = ? AND position > ? ORDER BY position LIMIT ?",
    );
    this.#pageDesc = db.prepare(
      "SELECT item FROM conversation_items WHERE conversation_id = ? AND position < ? ORDER BY position DESC LIMIT ?",
    );
    this.#deleteItem = db.prepare(
      `DELETE FROM conversation_items WHERE conversation_id = ? AND id = ?
       AND EXISTS (SELECT 1 FROM conversations WHERE id = conversation_id AND owner = ?)`,
    );
  }

  create(conversation: ConversationRecord, items: readonly InputItemRecord[]): void {
    writing(() => this.#create(conversation, items));
  }

  get(id: string, owner: string): ConversationRecord | undefined {
    const row = this.#get.get(id, owner);
    return row === undefined ? undefined : conversationOf(row);
  }

  update(id: string, owner: string, metadata: Record<string, string>): ConversationRecord | undefined {
    if (writing(() => this.#update.run(JSON.stringify(metadata), id, owner)).changes === 0) return undefined;
    return this.get(id, owner);
  }

  delete(id: string, owner: string): boolean {
    return writing(() => this.#delete(id, owner));
  }

  append(id: string, owner: string, items: readonly InputItemRecord[]): boolean {
    return writing(() => this.#append(id, owner, items));
  }

  items(id: string, owner: string): InputItemRecord[] | undefined {
    if (this.#get.get(id, owner) === undefined) return undefined;
    return this.#items.all(id).map((row) => JSON.parse(row.item) as InputItemRecord);
  }

  /** One page in one indexed range query (a page past `after` by its position), one row more to tell `hasMore`. */
  list(id: string, owner: string, page: ItemPage): ItemPageResult {
    if (this.#get.get(id, owner) === undefined) return { found: false, missing: "conversation" };
    const asc = page.order === "asc";
    let from = asc ? -1 : Number.MAX_SAFE_INTEGER;
    if (page.after !== undefined) {
      const at = this.#position.get(id, page.after);
      if (at === undefined) return { found: false, missing: "after" };
      from = at.position;
    }
    const rows = (asc ? this.#pageAsc : this.#pageDesc).all(id, from, page.limit + 1);
    return {
      found: true,
      data: rows.slice(0, page.limit).map((row) => JSON.parse(row.item) as InputItemRecord),
      hasMore: rows.length > page.limit,
    };
  }

  item(id: string, owner: string, itemId: string): InputItemRecord | undefined {
    const row = this.#item.get(id, owner, itemId);
    return row === undefined ? undefined : (JSON.parse(row.item) as InputItemRecord);
  }

  deleteItem(id: string, owner: string, itemId: string): boolean {
    return writing(() => this.#deleteItem.run(id, itemId, owner)).changes > 0;
  }
}
