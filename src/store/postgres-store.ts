/**
 * The shared `ResponseStore`: PostgreSQL through `pg` (a connection pool), so that several Spark
 * instances serve the same responses: a chain started on one continues on any other, and
 * `GET /v1/responses/{id}` answers on all of them.
 *
 * Contract (see `src/core/response-store.ts`; the same semantics as the SQLite store):
 * - Durability: `put` resolves once its single statement has committed (with Postgres's default
 *   `synchronous_commit = on`, flushed to the WAL on disk), so a response whose terminal event a
 *   client has seen survives a crash of Spark and of the database.
 * - Ownership isolation: every query filters on `owner` as well as `id`; another owner's id is
 *   indistinguishable from a missing one.
 * - Records are JSON text columns (not `jsonb`, which would reorder keys and refuses `\u0000`); only
 *   what the store filters on has a column of its own. Each row holds its own turn and links to its
 *   predecessor (`previous_response_id`); `chain` walks the links in one recursive query, so a
 *   continued turn costs one round trip whatever the chain's length.
 * - `spark_item_ids` maps each output and input item id to the row that first stored it, per owner,
 *   for `item_reference`; it is written in the same statement as the row and goes with it
 *   (`ON DELETE CASCADE`).
 * - Nothing is cached in the process: another instance may delete a response at any time, and a
 *   deleted response must be gone everywhere at once.
 * - Migrations run at `open`, in one transaction under an advisory lock, so instances started
 *   together never race: one migrates, the others wait and find the schema current. The version is
 *   kept in `spark_schema_version`. A database from a newer Spark is refused.
 * - A connection that drops (the database restarted, a network failure) is discarded by the pool and
 *   replaced on the next query; a statement that failed for that reason is tried again on another
 *   connection, three times at most (reads and `put`, which is idempotent). What still fails is
 *   thrown as `StoreUnavailableError` (reads) or `StoreWriteError` with `unavailable` (writes),
 *   which clients see as 503s; a full disk is `StoreWriteError` with `full`. Messages carry no
 *   address or password.
 * - Nothing waits for ever (`timeoutMs`, 10 s by default): every connection of the pool runs with
 *   `statement_timeout` and `lock_timeout`, so a statement behind a lock (a table another client
 *   locked) or a slow one is cancelled by the server; the client gives up too (`query_timeout`, a
 *   little later, for a database that stopped answering at all: that connection is discarded), and
 *   so does a wait for a free connection of a full pool. A timeout is unavailability like a lost
 *   connection (503, retry shortly), and frees its connection, so the pool never fills for good.
 *   Migrations at `open` wait longer (`MIGRATION_TIMEOUT_MS`): instances started together queue on
 *   their lock.
 * - `health()` answers within `HEALTH_TIMEOUT_MS` whether the responses table can be read now
 *   (for `/healthz`): a table locked by another client, or a database that does not answer, is
 *   degraded.
 */
import pg from "pg";
import {
  itemIdsOf,
  itemOf,
  StoreUnavailableError,
  StoreWriteError,
  type ChainConversation,
  type InputItemRecord,
  type ResponseStore,
  type StoredItem,
  type StoredResponse,
  type StoreHealth,
} from "../core/response-store.js";
import type { ConversationItem } from "../engine/types.js";
import type { ResponseObject } from "../protocol/responses.js";
import { StoreOpenError } from "./open-error.js";
import {
  PostgresConversationStore,
  PostgresRunStore,
  POSTGRES_STATEFUL_MIGRATION,
  type PostgresQueries,
} from "./postgres-stateful.js";

/** The schema version this code writes, the highest `version` in `spark_schema_version`. */
export const POSTGRES_SCHEMA_VERSION = 2;
/** The advisory lock migrations hold (an arbitrary constant: "SPARK" in ASCII). */
export const MIGRATION_LOCK = "357895606859";
/** Tries of a statement whose connection turned out to be dropped. */
const MAX_ATTEMPTS = 3;
/** Connections the pool opens at most, by default. */
export const DEFAULT_POOL_SIZE = 10;
/** Time one statement (its locks included) may take, by default. */
export const DEFAULT_TIMEOUT_MS = 10_000;
/** What the client waits beyond the server's `statement_timeout` before it gives up on its own. */
const CLIENT_GRACE_MS = 1000;
/** Time the migrations at `open` may take, waiting for another instance's included. */
const MIGRATION_TIMEOUT_MS = 60_000;
/** Longest `health()` takes to answer. */
export const HEALTH_TIMEOUT_MS = 1000;

export interface PostgresStoreOptions {
  /** Connections at most (default 10). */
  poolSize?: number;
  /** Time one statement (waiting for locks included) may take, in ms (default 10000). */
  timeoutMs?: number;
  /** Time to connect (or to wait for a free connection) before a query fails, in ms (default `timeoutMs`). */
  connectionTimeoutMs?: number;
}

/** True for `postgres://…` and `postgresql://…`: what `--store` accepts besides `sqlite` and `memory`. */
export function isPostgresUrl(value: string): boolean {
  return /^postgres(ql)?:\/\//i.test(value);
}

/** The URL with its password replaced by `***`, for logs and error messages. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password === "") return url;
    parsed.password = "***";
    return parsed.toString();
  } catch {
    return "postgres://…";
  }
}

/** Each entry takes the schema from version `index` to `index + 1`. */
const MIGRATIONS: readonly string[] = [
  `CREATE TABLE spark_responses (
     id text PRIMARY KEY,
     owner text NOT NULL,
     created_at bigint NOT NULL,
     previous_response_id text,
     standalone boolean NOT NULL,
     response text NOT NULL,
     input_items text NOT NULL,
     items text NOT NULL
   );
   CREATE INDEX spark_responses_owner ON spark_responses (owner);
   CREATE TABLE spark_item_ids (
     owner text NOT NULL,
     id text NOT NULL,
     response_id text NOT NULL REFERENCES spark_responses (id) ON DELETE CASCADE,
     PRIMARY KEY (owner, id)
   );
   CREATE INDEX spark_item_ids_response ON spark_item_ids (response_id);`,
  // Version 2: background runs, the events of resumable streams, conversations (postgres-stateful.ts).
  POSTGRES_STATEFUL_MIGRATION,
];

const GET: Omit<pg.QueryConfig, "values"> = {
  name: "spark_get",
  text: `SELECT owner, response, input_items, items, standalone
         FROM spark_responses WHERE id = $1 AND owner = $2`,
};
const HAS: Omit<pg.QueryConfig, "values"> = {
  name: "spark_has",
  text: "SELECT 1 FROM spark_responses WHERE id = $1 AND owner = $2",
};
const ITEM: Omit<pg.QueryConfig, "values"> = {
  name: "spark_item",
  text: `SELECT r.response, r.input_items FROM spark_item_ids AS i
         JOIN spark_responses AS r ON r.id = i.response_id AND r.owner = i.owner
         WHERE i.owner = $1 AND i.id = $2`,
};
/**
 * The chain of `$1` (owner `$2`), newest first: each row's predecessor until a standalone row, a
 * row without one, a missing one or a cycle.
 */
const CHAIN: Omit<pg.QueryConfig, "values"> = {
  name: "spark_chain",
  text: `WITH RECURSIVE chain (id, previous, standalone, items, path) AS (
           SELECT id, previous_response_id, standalone, items, ARRAY[id]
           FROM spark_responses WHERE id = $1 AND owner = $2
           UNION ALL
           SELECT r.id, r.previous_response_id, r.standalone, r.items, c.path || r.id
           FROM chain AS c JOIN spark_responses AS r ON r.id = c.previous AND r.owner = $2
           WHERE NOT c.standalone AND NOT (c.previous = ANY (c.path))
         )
         SELECT id, previous, standalone, items FROM chain ORDER BY cardinality(path)`,
};
/**
 * Writes a row and its item ids in one statement (so in one transaction), with its events chunk
 * (if any) and, for a background response, the end of its run row. A replaced row keeps the item
 * ids it still holds and loses the others; an item id another row stored first stays theirs.
 */
const PUT: Omit<pg.QueryConfig, "values"> = {
  name: "spark_put",
  text: `WITH written AS (
           INSERT INTO spark_responses
             (id, owner, created_at, previous_response_id, standalone, response, input_items, items)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
           ON CONFLICT (id) DO UPDATE SET
             owner = EXCLUDED.owner, created_at = EXCLUDED.created_at,
             previous_response_id = EXCLUDED.previous_response_id, standalone = EXCLUDED.standalone,
             response = EXCLUDED.response, input_items = EXCLUDED.input_items, items = EXCLUDED.items
           RETURNING id
         ), stale AS (
           DELETE FROM spark_item_ids
           WHERE response_id = $1 AND (owner <> $2 OR NOT (id = ANY ($9::text[])))
         ), events AS (
           INSERT INTO spark_response_events (response_id, owner, first_seq, last_seq, data)
           SELECT $1, $2, $10, $11, $12 WHERE $12::bytea IS NOT NULL
           ON CONFLICT (response_id, first_seq) DO UPDATE SET last_seq = EXCLUDED.last_seq, data = EXCLUDED.data
         ), finished AS (
           DELETE FROM spark_runs WHERE id = $1 AND $13::boolean
         )
         INSERT INTO spark_item_ids (owner, id, response_id)
         SELECT $2, item, written.id FROM written, unnest($9::text[]) AS item
         ON CONFLICT (owner, id) DO NOTHING`,
};
/** Takes the lock a read of the responses table takes (a table locked by another client blocks it). */
const PROBE = "SELECT 1 FROM spark_responses LIMIT 0";
/** Deletes a row with its events and run row (its item ids go by cascade). */
const DELETE: Omit<pg.QueryConfig, "values"> = {
  name: "spark_delete",
  text: `WITH gone AS (
           DELETE FROM spark_responses WHERE id = $1 AND owner = $2 RETURNING id
         ), events AS (
           DELETE FROM spark_response_events WHERE response_id IN (SELECT id FROM gone)
         ), runs AS (
           DELETE FROM spark_runs WHERE id IN (SELECT id FROM gone)
         )
         SELECT id FROM gone`,
};

interface RecordRow {
  owner: string;
  response: string;
  input_items: string;
  items: string;
  standalone: boolean;
}

export class PostgresResponseStore implements ResponseStore {
  readonly #pool: pg.Pool;
  #closed = false;
  /** The health probe in flight, shared by the `health()` calls that come meanwhile. */
  #probe: Promise<StoreHealth> | undefined;
  readonly runs: PostgresRunStore;
  readonly conversations: PostgresConversationStore;

  private constructor(
    pool: pg.Pool,
    /** The database URL without its password. */
    readonly url: string,
  ) {
    this.#pool = pool;
    const queries: PostgresQueries = {
      read: (query) => this.#read(query),
      write: async (query, retry) => {
        try {
          return retry ? await this.#retrying(query) : await this.#pool.query(query);
        } catch (error) {
          throw writeError(error);
        }
      },
    };
    this.runs = new PostgresRunStore(queries);
    this.conversations = new PostgresConversationStore(queries);
  }

  /**
   * Connects to the database at `url` and brings its schema up to date. Throws `StoreOpenError`
   * (naming the URL without its password) when the database cannot be reached or used.
   */
  static async open(url: string, options: PostgresStoreOptions = {}): Promise<PostgresResponseStore> {
    const shown = redactUrl(url);
    const timeoutMs = Math.max(1, Math.round(options.timeoutMs ?? DEFAULT_TIMEOUT_MS));
    const pool = new pg.Pool({
      connectionString: url,
      max: options.poolSize ?? DEFAULT_POOL_SIZE,
      connectionTimeoutMillis: options.connectionTimeoutMs ?? timeoutMs,
      // Sent at connection start-up: set for every statement of every connection of the pool.
      statement_timeout: timeoutMs,
      lock_timeout: timeoutMs,
      query_timeout: timeoutMs + CLIENT_GRACE_MS,
      idleTimeoutMillis: 30_000,
      keepAlive: true,
      application_name: "spark",
    });
    // An idle connection the server closed (a restart) is an error event on the pool: the pool has
    // already discarded it, and the next query opens a new one. Without a listener it would crash
    // the process.
    pool.on("error", () => {});
    try {
      await migrate(pool, shown);
    } catch (error) {
      await pool.end().catch(() => {});
      if (error instanceof StoreOpenError) throw error;
      throw new StoreOpenError(
        `Cannot use the response database ${shown}: ${reasonOf(error)}. Check that it is running and ` +
          `reachable, and that its user may create tables, or choose another --store.`,
        shown,
        { cause: error },
      );
    }
    return new PostgresResponseStore(pool, shown);
  }

  async get(id: string, owner: string): Promise<StoredResponse | undefined> {
    const { rows } = await this.#read<RecordRow>({ ...GET, values: [id, owner] });
    const row = rows[0];
    if (row === undefined) return undefined;
    return {
      owner: row.owner,
      response: JSON.parse(row.response) as ResponseObject,
      inputItems: JSON.parse(row.input_items) as InputItemRecord[],
      items: JSON.parse(row.items) as ConversationItem[],
      standalone: row.standalone,
    };
  }

  async has(id: string, owner: string): Promise<boolean> {
    return (await this.#read({ ...HAS, values: [id, owner] })).rows.length > 0;
  }

  async chain(id: string, owner: string): Promise<ChainConversation> {
    const { rows } = await this.#read<{
      id: string;
      previous: string | null;
      standalone: boolean;
      items: string;
    }>({ ...CHAIN, values: [id, owner] });
    const oldest = rows.at(-1);
    if (oldest === undefined) return { found: false };
    const { previous } = oldest;
    if (!oldest.standalone && previous !== null && !rows.some((row) => row.id === previous)) {
      return { found: false, missing: previous };
    }
    const conversation: ConversationItem[] = [];
    for (let index = rows.length - 1; index >= 0; index--) {
      for (const item of JSON.parse(rows[index]!.items) as ConversationItem[]) {
        if (item.type === "message" && item.role === "system") continue;
        conversation.push(item);
      }
    }
    return { found: true, conversation };
  }

  async item(itemId: string, owner: string): Promise<StoredItem | undefined> {
    const { rows } = await this.#read<{ response: string; input_items: string }>({
      ...ITEM,
      values: [owner, itemId],
    });
    const row = rows[0];
    if (row === undefined) return undefined;
    return itemOf(
      {
        owner,
        response: JSON.parse(row.response) as ResponseObject,
        inputItems: JSON.parse(row.input_items) as InputItemRecord[],
        items: [],
        standalone: true,
      },
      itemId,
    );
  }

  async put(record: StoredResponse): Promise<void> {
    const { response, owner } = record;
    const values = [
      response.id,
      owner,
      response.created_at,
      response.previous_response_id,
      record.standalone,
      JSON.stringify(response),
      JSON.stringify(record.inputItems),
      JSON.stringify(record.items),
      itemIdsOf(record),
      record.events?.first ?? null,
      record.events?.last ?? null,
      record.events === undefined ? null : Buffer.from(record.events.data),
      response.background === true,
    ];
    try {
      // Retried once on a new connection when the first one was lost: the statement is an upsert,
      // so running it twice (the first did commit, its answer was lost) writes the same row.
      await this.#retrying({ ...PUT, values });
    } catch (error) {
      throw writeError(error);
    }
  }

  async delete(id: string, owner: string): Promise<boolean> {
    try {
      // Not retried: a delete that committed but whose answer was lost would then report "not found".
      return (await this.#pool.query({ ...DELETE, values: [id, owner] })).rows.length > 0;
    } catch (error) {
      throw writeError(error);
    }
  }

  /**
   * Whether the responses table can be read now, answered within `HEALTH_TIMEOUT_MS`: a probe that
   * takes the lock every read takes, so a table another client locked is degraded, as is a database
   * that cannot be reached or does not answer.
   */
  async health(): Promise<StoreHealth> {
    this.#probe ??= this.#pool
      .query(PROBE)
      .then(
        (): StoreHealth => ({ ok: true, detail: "PostgreSQL answers" }),
        (error: unknown): StoreHealth => ({ ok: false, detail: reasonOf(error) }),
      )
      .finally(() => {
        this.#probe = undefined;
      });
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<StoreHealth>((resolve) => {
      timer = setTimeout(
        () => resolve({ ok: false, detail: `the database did not answer within ${HEALTH_TIMEOUT_MS} ms` }),
        HEALTH_TIMEOUT_MS,
      );
    });
    try {
      return await Promise.race([this.#probe, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#pool.end();
  }

  /** A read; a database that cannot be reached is `StoreUnavailableError`. */
  async #read<R extends pg.QueryResultRow>(query: pg.QueryConfig): Promise<pg.QueryResult<R>> {
    try {
      return await this.#retrying<R>(query);
    } catch (error) {
      if (isConnectionError(error) || isTimeout(error)) {
        throw new StoreUnavailableError(reasonOf(error), { cause: error });
      }
      throw error;
    }
  }

  /**
   * Runs `query`, again on another connection when the one it got had been dropped (after a restart
   * of the database every idle connection of the pool is dead, and the pool may not have noticed).
   */
  async #retrying<R extends pg.QueryResultRow>(query: pg.QueryConfig): Promise<pg.QueryResult<R>> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.#pool.query<R>(query);
      } catch (error) {
        if (this.#closed || attempt >= MAX_ATTEMPTS || !droppedConnection(error)) throw error;
      }
    }
  }
}

/**
 * Brings the schema up to `POSTGRES_SCHEMA_VERSION` in one transaction, holding an advisory lock so
 * that instances started together take turns: the first migrates, the others then find nothing to do.
 */
async function migrate(pool: pg.Pool, shown: string): Promise<void> {
  const client = await pool.connect();
  // The pool's timeouts are for requests; instances started together wait here for each other.
  // (`query_timeout` per query is read by pg's client, though its types do not declare it.)
  const query = <R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>> =>
    client.query<R>({
      text,
      ...(values ? { values } : {}),
      query_timeout: MIGRATION_TIMEOUT_MS + CLIENT_GRACE_MS,
    } as pg.QueryConfig);
  let failed = false;
  try {
    await query("BEGIN");
    await query(`SET LOCAL statement_timeout = ${MIGRATION_TIMEOUT_MS}`);
    await query(`SET LOCAL lock_timeout = ${MIGRATION_TIMEOUT_MS}`);
    await query("SELECT pg_advisory_xact_lock($1::bigint)", [MIGRATION_LOCK]);
    await query(
      `CREATE TABLE IF NOT EXISTS spark_schema_version (
         version integer PRIMARY KEY,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
    const { rows } = await query<{ version: number }>(
      "SELECT coalesce(max(version), 0) AS version FROM spark_schema_version",
    );
    const version = rows[0]?.version ?? 0;
    if (version > POSTGRES_SCHEMA_VERSION) {
      throw new StoreOpenError(
        `The response database ${shown} has schema version ${version}, newer than this Spark supports ` +
          `(${POSTGRES_SCHEMA_VERSION}). Upgrade Spark, or choose another database.`,
        shown,
      );
    }
    for (let from = version; from < POSTGRES_SCHEMA_VERSION; from++) {
      const step = MIGRATIONS[from];
      if (step === undefined) throw new Error(`No migration from schema version ${from}`);
      await query(step);
      await query("INSERT INTO spark_schema_version (version) VALUES ($1)", [from + 1]);
    }
    await query("COMMIT");
  } catch (error) {
    failed = true;
    await query("ROLLBACK").catch(() => {});
    throw error;
  } finally {
    // A connection whose transaction failed is not handed out again.
    client.release(failed);
  }
}

/** Node's error codes for a database that cannot be reached. */
const NETWORK_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EAI_AGAIN",
  "ENOENT",
]);

/** Whether `error` means the database cannot be reached (rather than refusing the statement). */
function isConnectionError(error: unknown): boolean {
  const code = codeOf(error);
  if (code !== undefined) {
    // SQLSTATE class 08: connection exceptions; 57P01-57P03: shutting down, crashed, starting up;
    // 53300: too many connections.
    return NETWORK_CODES.has(code) || code.startsWith("08") || /^57P0[1-3]$/.test(code) || code === "53300";
  }
  return droppedConnection(error) || /timeout exceeded when trying to connect/i.test(messageOf(error));
}

/**
 * Whether `error` is a timeout: the server cancelled the statement (57014, `statement_timeout`) or
 * gave up waiting for a lock (55P03, `lock_timeout`), or the client gave up waiting for an answer or
 * for a free connection of the pool.
 */
function isTimeout(error: unknown): boolean {
  const code = codeOf(error);
  if (code === "57014" || code === "55P03") return true;
  return /Query read timeout|timeout exceeded when trying to connect/i.test(messageOf(error));
}

/** Whether `error` ended a connection that had been open (so a new one may well succeed). */
function droppedConnection(error: unknown): boolean {
  const code = codeOf(error);
  if (code === "ECONNRESET" || code === "EPIPE" || code === "57P01" || code === "57P02") return true;
  return /Connection terminated|not queryable/i.test(messageOf(error));
}

/** A short reason, without addresses: `ECONNREFUSED`, `57P01: terminating connection …`. */
function reasonOf(error: unknown): string {
  const code = codeOf(error);
  if (code !== undefined && NETWORK_CODES.has(code)) return `the database is unreachable (${code})`;
  if (isTimeout(error)) {
    return `the database did not answer in time (${code !== undefined ? `${code}: ` : ""}${messageOf(error)})`;
  }
  if (code !== undefined) return `${code}: ${messageOf(error)}`;
  return messageOf(error);
}

function writeError(error: unknown): StoreWriteError {
  const code = codeOf(error);
  return new StoreWriteError(reasonOf(error), code === "53100", {
    cause: error,
    unavailable: isConnectionError(error) || isTimeout(error),
  });
}

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

function messageOf(error: unknown): string {
  if (error instanceof AggregateError && error.errors.length > 0) return messageOf(error.errors[0]);
  return error instanceof Error ? error.message : String(error);
}
