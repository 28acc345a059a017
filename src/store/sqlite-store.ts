/**
 * The durable `ResponseStore`: one SQLite database, `<dataDir>/responses.sqlite`, through
 * better-sqlite3 (synchronous: every method answers without a promise, and `put` has finished
 * writing when it returns).
 *
 * Contract (see `src/core/response-store.ts`):
 * - Durability: `put` commits one transaction before it returns. The database runs in WAL mode with
 *   `synchronous = NORMAL`: a committed transaction has been written to the WAL file (the OS page
 *   cache) when `put` returns, so it survives the server process being killed, `kill -9` included.
 *   It is not fsync'ed at every commit, so a power loss or kernel crash may lose the last few
 *   transactions (never corrupt the database); that is the usual WAL trade for sub-millisecond puts.
 * - Ownership isolation: every query filters on `id` *and* `owner`, and the in-memory cache checks
 *   the owner on a hit, so another owner's id is indistinguishable from a missing one.
 * - Records are stored as JSON text columns: the store never queries inside a response, records are
 *   immutable, and their shapes (`ResponseObject`, input items, conversation items) belong to the
 *   protocol and the core, which change them without a schema migration here. Only what the store
 *   itself filters or orders on (`id`, `owner`, `created_at`) has a column of its own.
 * - Each row holds its own turn (`items`) and, unless `standalone`, continues its predecessor's
 *   conversation (`previous_response_id` in the response), so a chain of n turns takes O(n) bytes.
 *   Rows written by schema version 1 hold their full conversation and are read as standalone.
 * - `item_ids` maps each output and input item id of a row to the row, per owner, for
 *   `item_reference`; it is written and deleted in the same transaction as the row.
 * - A small LRU of parsed records sits in front of the database so that continuing a hot chain does
 *   not re-parse its history. It is bounded in bytes (`cacheBytes`, 64 MiB by default), each record
 *   counted as the length of its JSON text plus `RECORD_OVERHEAD_BYTES`; a record over a quarter of
 *   the bound is never cached (it is parsed from the database on each read). Callers must treat
 *   records as immutable, as with `MemoryResponseStore`. One server process owns a data directory:
 *   the cache does not see writes by other processes.
 * - A write that fails (`SQLITE_FULL` on a full disk, `SQLITE_IOERR_*`) is rolled back by SQLite and
 *   thrown as `StoreWriteError`; the connection stays usable and the next write succeeds once space
 *   is freed. A checkpoint that fails for lack of space does not fail the commit that triggered it:
 *   committed transactions stay in the WAL, which a later checkpoint or the next open applies.
 * - Small disks. The WAL never keeps the space of large writes: after a write of
 *   `LARGE_WRITE_BYTES` or more (and at open, after a failed write, after a delete) the WAL is
 *   checkpointed and truncated to zero, and `journal_size_limit` caps what it keeps otherwise. A
 *   large write needs room for itself twice (in the WAL, then in the database at the checkpoint); it
 *   is refused up front (`StoreWriteError`, full) when the file system lacks it, rather than leave a
 *   WAL that fills the disk.
 * - Deleting works on a full disk: `RESERVE_FILE` (`RESERVE_BYTES`, created when there is room)
 *   is given up when a delete fails for lack of space, and the delete retried. A deleted response's
 *   pages go back to the file system: new databases use incremental auto-vacuum, run in steps of
 *   `VACUUM_STEP_PAGES` pages each checkpointed (so each step fits in the reserve's room); the
 *   reserve is recreated once there is room again. (A database created before this has no
 *   auto-vacuum: its freed pages are reused by later writes but do not shrink the file.)
 */
import { closeSync, existsSync, mkdirSync, openSync, rmSync, statfsSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import Database from "better-sqlite3";
import {
  chainConversation,
  itemIdsOf,
  itemOf,
  RECORD_OVERHEAD_BYTES,
  StoreWriteError,
  type ChainConversation,
  type InputItemRecord,
  type ResponseStore,
  type StoredItem,
  type StoredResponse,
} from "../core/response-store.js";
import type { ConversationItem } from "../engine/types.js";
import type { ResponseObject } from "../protocol/responses.js";
import { StoreOpenError } from "./open-error.js";
import { SqliteConversationStore, SqliteRunStore, STATEFUL_MIGRATION } from "./sqlite-stateful.js";

/** The schema version this code writes, kept in `PRAGMA user_version`. */
export const SCHEMA_VERSION = 3;
export const DATABASE_FILE = "responses.sqlite";
/** Default bound of the cache of parsed records, in (estimated) bytes. */
export const DEFAULT_CACHE_BYTES = 64 * 1024 * 1024;
const BUSY_TIMEOUT_MS = 5000;
/** What the WAL keeps of its size after a checkpoint (SQLite's `journal_size_limit`). */
export const JOURNAL_SIZE_LIMIT = 1024 * 1024;
/** A write of this many bytes of text or more is checkpointed at once (the WAL truncated to zero). */
export const LARGE_WRITE_BYTES = 256 * 1024;
/** The file kept beside the database so that a delete can still write on a full disk. */
export const RESERVE_FILE = "responses.reserve";
export const RESERVE_BYTES = 256 * 1024;
/** Pages one step of the incremental vacuum moves: well inside the reserve's room in the WAL. */
const VACUUM_STEP_PAGES = 16;

export { defaultDataDir } from "./data-dir.js";
export { StoreOpenError };

export interface SqliteStoreOptions {
  /** Bound of the cache of parsed records in bytes (estimated); 0 disables the cache. */
  cacheBytes?: number;
}

interface Row {
  owner: string;
  response: string;
  input_items: string;
  items: string;
  standalone: number;
}

/** Each entry takes the schema from version `index` to `index + 1`. */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE responses (
     id TEXT PRIMARY KEY,
     owner TEXT NOT NULL,
     created_at INTEGER NOT NULL,
     response TEXT NOT NULL,
     input_items TEXT NOT NULL,
     conversation TEXT NOT NULL
   );
   CREATE INDEX responses_owner ON responses (owner);`,
  // Version 2: rows hold their own turn and link to their predecessor; version 1 rows keep their
  // full conversation (standalone). Item ids of existing rows are indexed, outputs first, oldest
  // first, so an item a client later resent with its id resolves to the original.
  `ALTER TABLE responses RENAME COLUMN conversation TO items;
   ALTER TABLE responses ADD COLUMN standalone INTEGER NOT NULL DEFAULT 1;
   CREATE TABLE item_ids (
     owner TEXT NOT NULL,
     id TEXT NOT NULL,
     response_id TEXT NOT NULL,
     PRIMARY KEY (owner, id)
   ) WITHOUT ROWID;
   CREATE INDEX item_ids_response ON item_ids (response_id);
   INSERT OR IGNORE INTO item_ids (owner, id, response_id)
     SELECT r.owner, json_extract(o.value, '$.id'), r.id
     FROM responses AS r, json_each(r.response, '$.output') AS o
     WHERE json_type(o.value, '$.id') = 'text'
     ORDER BY r.created_at, r.rowid, o.key;
   INSERT OR IGNORE INTO item_ids (owner, id, response_id)
     SELECT r.owner, json_extract(i.value, '$.id'), r.id
     FROM responses AS r, json_each(r.input_items) AS i
     WHERE json_type(i.value, '$.id') = 'text'
     ORDER BY r.created_at, r.rowid, i.key;`,
  // Version 3: background runs, the events of resumable streams, conversations (sqlite-stateful.ts).
  STATEFUL_MIGRATION,
];

export class SqliteResponseStore implements ResponseStore {
  readonly #db: Database.Database;
  readonly #select: Database.Statement<[string, string], Row>;
  readonly #selectItem: Database.Statement<[string, string], { response_id: string }>;
  readonly #exists: Database.Statement<[string, string], { found: number }>;
  /** Writes a row and its item ids in one transaction. */
  readonly #write: (record: StoredResponse, columns: readonly [string, string, string]) => void;
  /** Deletes a row and its item ids in one transaction; true when there was one. */
  readonly #erase: (id: string, owner: string) => boolean;
  /** Parsed records by id with their estimated size, least recently used first. */
  readonly #cache = new Map<string, { record: StoredResponse; bytes: number }>();
  #cachedBytes = 0;
  readonly #cacheBytes: number;
  /** `RESERVE_FILE` in the data directory. */
  readonly #reserve: string;
  readonly #pageSize: number;
  readonly runs: SqliteRunStore;
  readonly conversations: SqliteConversationStore;

  private constructor(
    db: Database.Database,
    /** Path of the database file. */
    readonly path: string,
    options: SqliteStoreOptions,
  ) {
    this.#db = db;
    this.#cacheBytes = options.cacheBytes ?? DEFAULT_CACHE_BYTES;
    this.#reserve = join(dirname(path), RESERVE_FILE);
    this.#pageSize = db.pragma("page_size", { simple: true }) as number;
    this.#select = db.prepare<[string, string], Row>(
      "SELECT owner, response, input_items, items, standalone FROM responses WHERE id = ? AND owner = ?",
    );
    this.#exists = db.prepare<[string, string], { found: number }>(
      "SELECT 1 AS found FROM responses WHERE id = ? AND owner = ?",
    );
    this.#selectItem = db.prepare<[string, string], { response_id: string }>(
      "SELECT response_id FROM item_ids WHERE owner = ? AND id = ?",
    );
    const upsert = db.prepare<[string, string, number, string, string, string, number]>(
      `INSERT OR REPLACE INTO responses (id, owner, created_at, response, input_items, items, standalone)
       VALUES (?, ?, ?, ?, ?, ?, ?)`,
    );
    const remove = db.prepare<[string, string]>("DELETE FROM responses WHERE id = ? AND owner = ?");
    const removeItems = db.prepare<[string]>("DELETE FROM item_ids WHERE response_id = ?");
    const addItem = db.prepare<[string, string, string]>(
      "INSERT OR IGNORE INTO item_ids (owner, id, response_id) VALUES (?, ?, ?)",
    );
    this.runs = new SqliteRunStore(db);
    this.conversations = new SqliteConversationStore(db);
    this.#write = db.transaction((record: StoredResponse, columns: readonly [string, string, string]) => {
      const { response, owner } = record;
      upsert.run(response.id, owner, response.created_at, ...columns, record.standalone ? 1 : 0);
      removeItems.run(response.id);
      for (const itemId of itemIdsOf(record)) addItem.run(owner, itemId, response.id);
      if (record.events !== undefined) this.runs.appendEvents(response.id, owner, record.events);
      if (response.background) this.runs.finish(response.id);
    });
    this.#erase = db.transaction((id: string, owner: string) => {
      if (remove.run(id, owner).changes === 0) return false;
      removeItems.run(id);
      this.runs.forget(id);
      return true;
    });
  }

  /** Opens (creating if needed) the store in `dataDir`; throws `StoreOpenError` when it cannot. */
  static open(dataDir: string, options: SqliteStoreOptions = {}): SqliteResponseStore {
    try {
      mkdirSync(dataDir, { recursive: true, mode: 0o700 });
    } catch (error) {
      throw new StoreOpenError(
        `Cannot create the data directory ${dataDir}: ${messageOf(error)}. ` +
          `Choose another --data-dir (or set SPARK_DATA_DIR) that this user can write.`,
        dataDir,
        { cause: error },
      );
    }
    const path = join(dataDir, DATABASE_FILE);
    let db: Database.Database | undefined;
    try {
      // A new database file is created private (an empty file is an empty database) rather than
      // chmod'ed after SQLite created it world-readable; SQLite gives the -wal and -shm files the
      // mode of the database file. An existing file keeps the mode its owner gave it.
      try {
        closeSync(openSync(path, "wx", 0o600));
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
      }
      db = new Database(path, { timeout: BUSY_TIMEOUT_MS });
      // Only takes effect on a new, empty database (before its first table): a deleted response's
      // pages can then be given back to the file system (see `#reclaim`).
      db.pragma("auto_vacuum = INCREMENTAL");
      // WAL + NORMAL: a commit is in the WAL file when it returns (survives the process dying), and
      // is fsync'ed at checkpoints only (a power loss may lose the last transactions).
      db.pragma("journal_mode = WAL");
      db.pragma("synchronous = NORMAL");
      db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
      db.pragma("foreign_keys = ON");
      db.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT}`);
      migrate(db, path);
      const store = new SqliteResponseStore(db, path, options);
      // A WAL left large by an earlier run is applied and truncated (when there is room to).
      store.#reclaim();
      return store;
    } catch (error) {
      if (db?.open) db.close();
      if (error instanceof StoreOpenError) throw error;
      throw openError(path, error);
    }
  }

  /** The estimated size of the parsed records held in the cache. */
  get cachedBytes(): number {
    return this.#cachedBytes;
  }

  get(id: string, owner: string): StoredResponse | undefined {
    const cached = this.#cache.get(id);
    if (cached !== undefined) {
      // Ids are unique across owners, so a cached record of another owner means "not found".
      if (cached.record.owner !== owner) return undefined;
      this.#cache.delete(id);
      this.#cache.set(id, cached);
      return cached.record;
    }
    const row = this.#select.get(id, owner);
    if (row === undefined) return undefined;
    const record: StoredResponse = {
      owner: row.owner,
      response: JSON.parse(row.response) as ResponseObject,
      inputItems: JSON.parse(row.input_items) as InputItemRecord[],
      items: JSON.parse(row.items) as ConversationItem[],
      standalone: row.standalone !== 0,
    };
    this.#remember(
      id,
      record,
      row.owner.length + row.response.length + row.input_items.length + row.items.length,
    );
    return record;
  }

  has(id: string, owner: string): boolean {
    return this.#cache.get(id)?.record.owner === owner || this.#exists.get(id, owner) !== undefined;
  }

  chain(id: string, owner: string): ChainConversation {
    return chainConversation(this, id, owner);
  }

  item(itemId: string, owner: string): StoredItem | undefined {
    const row = this.#selectItem.get(owner, itemId);
    const record = row === undefined ? undefined : this.get(row.response_id, owner);
    return record === undefined ? undefined : itemOf(record, itemId);
  }

  put(stored: StoredResponse): void {
    // The events are written, never cached.
    const { events: chunk, ...record } = stored;
    const { response } = record;
    const id = response.id;
    const columns = [
      JSON.stringify(response),
      JSON.stringify(record.inputItems),
      JSON.stringify(record.items),
    ] as const;
    const length = columns[0].length + columns[1].length + columns[2].length;
    // UTF-8 takes up to 3 bytes per UTF-16 unit: counted exactly only where it may matter.
    const eventBytes = chunk?.data.byteLength ?? 0;
    const bytes =
      eventBytes +
      (length * 3 < LARGE_WRITE_BYTES
        ? length
        : columns.reduce((sum, column) => sum + Buffer.byteLength(column), 0));
    if (bytes >= LARGE_WRITE_BYTES) this.#checkRoom(bytes);
    try {
      this.#write(stored, columns);
    } catch (error) {
      // The frames the failed transaction wrote stay in the WAL file until it is truncated.
      this.#checkpoint();
      throw writeError(error);
    }
    if (bytes >= LARGE_WRITE_BYTES) this.#checkpoint();
    this.#remember(
      id,
      record,
      record.owner.length + columns[0].length + columns[1].length + columns[2].length,
    );
  }

  delete(id: string, owner: string): boolean {
    let deleted: boolean;
    try {
      deleted = this.#erase(id, owner);
    } catch (error) {
      // A full disk: the reserve gives the delete the room its few pages need in the WAL.
      if (!isFull(error) || !this.#releaseReserve()) throw writeError(error);
      try {
        deleted = this.#erase(id, owner);
      } catch (again) {
        throw writeError(again);
      }
    }
    if (deleted) {
      this.#forget(id);
      // A few pages freed are left for the next write to reuse (a checkpoint costs an fsync).
      const freed = (this.#db.pragma("freelist_count", { simple: true }) as number) * this.#pageSize;
      if (freed >= LARGE_WRITE_BYTES || !existsSync(this.#reserve)) this.#reclaim();
    }
    return deleted;
  }

  close(): void {
    this.#cache.clear();
    this.#cachedBytes = 0;
    if (this.#db.open) this.#db.close();
  }

  /**
   * Refuses a write of `bytes` of text that the file system has no room for: its pages go to the
   * WAL, then (at the checkpoint) into the database file, less the free pages the database reuses.
   */
  #checkRoom(bytes: number): void {
    const free = this.#freeBytes();
    if (free === Infinity) return;
    const freePages = (this.#db.pragma("freelist_count", { simple: true }) as number) * this.#pageSize;
    // Pages hold a little less than their size of text; a 1/16 margin covers that and the indexes.
    const needed = Math.ceil(bytes * 1.0625) + 64 * 1024;
    if (free >= needed + Math.max(0, needed - freePages)) return;
    throw new StoreWriteError(
      `SQLITE_FULL: not enough free space in the data directory for this response ` +
        `(${Math.ceil(bytes / 1024)} KiB of text; ${Math.floor(free / 1024)} KiB free)`,
      true,
    );
  }

  /** Applies the WAL to the database and truncates it to zero; on a full disk, leaves it as it is. */
  #checkpoint(): boolean {
    try {
      const [result] = this.#db.pragma("wal_checkpoint(TRUNCATE)") as { busy: number }[];
      return result?.busy === 0;
    } catch {
      return false;
    }
  }

  /**
   * Gives the space of deleted rows back to the file system: checkpoints, then (with auto-vacuum)
   * moves pages off the end of the file a few at a time, each step checkpointed so the WAL never
   * needs more room than the reserve freed; then recreates the reserve if there is room for it.
   */
  #reclaim(): void {
    if (this.#checkpoint() && this.#db.pragma("auto_vacuum", { simple: true }) === 2) {
      try {
        const pageSize = this.#pageSize;
        let pages = this.#db.pragma("freelist_count", { simple: true }) as number;
        // Moving n pages writes about n pages to the WAL: in one go where there is room for that
        // (one checkpoint), else in steps the reserve's room holds.
        const step = this.#freeBytes() > 2 * pages * pageSize + RESERVE_BYTES ? pages : VACUUM_STEP_PAGES;
        while (pages > 0) {
          this.#db.pragma(`incremental_vacuum(${step})`);
          if (!this.#checkpoint()) break;
          const left = this.#db.pragma("freelist_count", { simple: true }) as number;
          if (left >= pages) break;
          pages = left;
        }
      } catch {
        // Out of room mid-way: what was moved is committed; the rest waits for the next delete.
      }
    }
    this.#makeReserve();
  }

  /** Bytes free on the data directory's file system (Infinity where that cannot be told). */
  #freeBytes(): number {
    try {
      const stats = statfsSync(dirname(this.path));
      return stats.bavail * stats.bsize;
    } catch {
      return Infinity;
    }
  }

  /** Creates the reserve file unless it exists; where there is no room for it, leaves none. */
  #makeReserve(): void {
    if (existsSync(this.#reserve)) return;
    try {
      writeFileSync(this.#reserve, Buffer.alloc(RESERVE_BYTES), { mode: 0o600 });
    } catch {
      rmSync(this.#reserve, { force: true });
    }
  }

  /** Removes the reserve file; false when there was none. */
  #releaseReserve(): boolean {
    if (!existsSync(this.#reserve)) return false;
    rmSync(this.#reserve, { force: true });
    return true;
  }

  /** Caches a record whose JSON text is `textLength` long, unless it is too large to. */
  #remember(id: string, record: StoredResponse, textLength: number): void {
    this.#forget(id);
    const bytes = textLength + RECORD_OVERHEAD_BYTES;
    if (bytes > this.#cacheBytes / 4) return;
    this.#cache.set(id, { record, bytes });
    this.#cachedBytes += bytes;
    while (this.#cachedBytes > this.#cacheBytes) {
      const oldest = this.#cache.keys().next().value;
      if (oldest === undefined) break;
      this.#forget(oldest);
    }
  }

  #forget(id: string): void {
    const entry = this.#cache.get(id);
    if (entry === undefined) return;
    this.#cache.delete(id);
    this.#cachedBytes -= entry.bytes;
  }
}

/** A failed write as `StoreWriteError`, with SQLite's code and message (never a path). */
function writeError(error: unknown): StoreWriteError {
  const code = (error as { code?: unknown } | null)?.code;
  const message = messageOf(error);
  if (typeof code === "string" && code.startsWith("SQLITE_")) {
    return new StoreWriteError(`${code}: ${message}`, code === "SQLITE_FULL", { cause: error });
  }
  return new StoreWriteError(message, false, { cause: error });
}

function isFull(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === "SQLITE_FULL";
}

/** Brings the schema from `PRAGMA user_version` up to `SCHEMA_VERSION`, one transaction per step. */
function migrate(db: Database.Database, path: string): void {
  const version = db.pragma("user_version", { simple: true }) as number;
  if (version > SCHEMA_VERSION) {
    throw new StoreOpenError(
      `The response store ${path} has schema version ${version}, newer than this Spark supports ` +
        `(${SCHEMA_VERSION}). Upgrade Spark, or choose another --data-dir.`,
      path,
    );
  }
  if (version === 0 && db.prepare("SELECT 1 FROM sqlite_master LIMIT 1").get() !== undefined) {
    throw new StoreOpenError(
      `The response store ${path} is an SQLite database but not one of Spark's (it has tables and no ` +
        `schema version). Move the file aside, or choose another --data-dir.`,
      path,
    );
  }
  for (let from = version; from < SCHEMA_VERSION; from++) {
    const step = MIGRATIONS[from];
    if (step === undefined) throw new Error(`No migration from schema version ${from}`);
    db.transaction(() => {
      db.exec(step);
      // PRAGMA takes no bound parameters; `from + 1` is an integer we computed.
      db.pragma(`user_version = ${from + 1}`);
    })();
  }
}

function openError(path: string, error: unknown): StoreOpenError {
  const code = (error as { code?: unknown } | null)?.code;
  if (code === "SQLITE_NOTADB" || code === "SQLITE_CORRUPT") {
    return new StoreOpenError(
      `The response store ${path} is not a database or is corrupt (${messageOf(error)}). ` +
        `Move the file aside to start an empty store, or choose another --data-dir.`,
      path,
      { cause: error },
    );
  }
  return new StoreOpenError(
    `Cannot open the response store ${path}: ${messageOf(error)}. ` +
      `Check that this user can read and write it and its directory, or choose another --data-dir.`,
    path,
    { cause: error },
  );
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
