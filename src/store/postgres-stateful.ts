/**
 * The Postgres store's background runs, event chunks and conversations (`ResponseStore.runs` and
 * `.conversations`), in the database the responses live in (schema version 2), so every instance
 * sharing it sees the same runs (their owner instance and lease, a cancel asked anywhere) and the
 * same conversations. Same guarantees as the responses: every statement filters on the owner, each
 * write is one statement (so one transaction), reads that cannot reach the database are
 * `StoreUnavailableError` and writes `StoreWriteError`, through the queries the store gives
 * (`PostgresQueries`: its pool, retries and error mapping).
 *
 * Items of a conversation take positions from a counter on the conversation's row, advanced by the
 * same statement that inserts them: concurrent appends to one conversation (two instances) queue on
 * that row and never take the same positions.
 */
import type pg from "pg";
import type {
  ConversationRecord,
  ConversationStore,
  ItemPage,
  ItemPageResult,
} from "../core/conversation-store.js";
import type { EventChunk } from "../core/event-log.js";
import type { InputItemRecord } from "../core/response-store.js";
import type { BackgroundRun, RunStore } from "../core/run-store.js";
import type { ResponseObject } from "../protocol/responses.js";

/** Schema version 2: background runs, event chunks, conversations and their items. */
export const POSTGRES_STATEFUL_MIGRATION = `
  CREATE TABLE spark_runs (
    id text PRIMARY KEY,
    owner text NOT NULL,
    instance text NOT NULL,
    lease_until bigint NOT NULL,
    cancel_requested boolean NOT NULL DEFAULT false,
    response text NOT NULL,
    input_items text NOT NULL
  );
  CREATE INDEX spark_runs_instance ON spark_runs (instance);
  CREATE TABLE spark_response_events (
    response_id text NOT NULL,
    owner text NOT NULL,
    first_seq integer NOT NULL,
    last_seq integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (response_id, first_seq)
  );
  CREATE TABLE spark_conversations (
    id text PRIMARY KEY,
    owner text NOT NULL,
    created_at bigint NOT NULL,
    metadata text NOT NULL,
    next_position bigint NOT NULL
  );
  CREATE TABLE spark_conversation_items (
    conversation_id text NOT NULL REFERENCES spark_conversations (id) ON DELETE CASCADE,
    position bigint NOT NULL,
    id text NOT NULL,
    item text NOT NULL,
    PRIMARY KEY (conversation_id, position),
    UNIQUE (conversation_id, id)
  );`;

/** The store's way to run statements: its pool, retries and error mapping. */
export interface PostgresQueries {
  /** A read (retried on a dropped connection); `StoreUnavailableError` when the database cannot answer. */
  read<R extends pg.QueryResultRow>(query: pg.QueryConfig): Promise<pg.QueryResult<R>>;
  /** A write; `StoreWriteError` when it fails. `retry`: safe to run twice (idempotent). */
  write<R extends pg.QueryResultRow>(query: pg.QueryConfig, retry: boolean): Promise<pg.QueryResult<R>>;
}

interface RunRow {
  id: string;
  owner: string;
  instance: string;
  lease_until: string;
  cancel_requested: boolean;
  response: string;
  input_items: string;
}

function runOf(row: RunRow): BackgroundRun {
  return {
    id: row.id,
    owner: row.owner,
    instance: row.instance,
    leaseUntil: Number(row.lease_until),
    cancelRequested: row.cancel_requested,
    response: JSON.parse(row.response) as ResponseObject,
    inputItems: JSON.parse(row.input_items) as InputItemRecord[],
  };
}

export class PostgresRunStore implements RunStore {
  constructor(private readonly db: PostgresQueries) {}

  async start(run: BackgroundRun): Promise<void> {
    await this.db.write(
      {
        name: "spark_run_start",
        text: `INSERT INTO spark_runs (id, owner, instance, lease_until, cancel_requested, response, input_items)
               VALUES ($1, $2, $3, $4, false, $5, $6)
               ON CONFLICT (id) DO UPDATE SET owner = EXCLUDED.owner, instance = EXCLUDED.instance,
                 lease_until = EXCLUDED.lease_until, response = EXCLUDED.response, input_items = EXCLUDED.input_items`,
        values: [
          run.id,
          run.owner,
          run.instance,
          run.leaseUntil,
          JSON.stringify(run.response),
          JSON.stringify(run.inputItems),
        ],
      },
      true,
    );
  }

  async progress(id: string, owner: string, response: ResponseObject, events?: EventChunk): Promise<void> {
    await this.db.write(
      {
        name: "spark_run_progress",
        text: `WITH updated AS (
                 UPDATE spark_runs SET response = $3 WHERE id = $1 AND owner = $2 RETURNING id
               )
               INSERT INTO spark_response_events (response_id, owner, first_seq, last_seq, data)
               SELECT id, $2, $4, $5, $6 FROM updated WHERE $6::bytea IS NOT NULL
               ON CONFLICT (response_id, first_seq) DO UPDATE SET last_seq = EXCLUDED.last_seq, data = EXCLUDED.data`,
        values: [
          id,
          owner,
          JSON.stringify(response),
          events?.first ?? null,
          events?.last ?? null,
          events === undefined ? null : Buffer.from(events.data),
        ],
      },
      true,
    );
  }

  async run(id: string, owner: string): Promise<BackgroundRun | undefined> {
    const { rows } = await this.db.read<RunRow>({
      name: "spark_run_get",
      text: "SELECT * FROM spark_runs WHERE id = $1 AND owner = $2",
      values: [id, owner],
    });
    return rows[0] === undefined ? undefined : runOf(rows[0]);
  }

  async requestCancel(id: string, owner: string): Promise<boolean> {
    const result = await this.db.write(
      {
        name: "spark_run_cancel",
        text: "UPDATE spark_runs SET cancel_requested = true WHERE id = $1 AND owner = $2",
        values: [id, owner],
      },
      true,
    );
    return (result.rowCount ?? 0) > 0;
  }

  async renew(instance: string, ids: readonly string[], leaseUntil: number): Promise<string[]> {
    const { rows } = await this.db.write<{ id: string; cancel_requested: boolean }>(
      {
        name: "spark_run_renew",
        text: `UPDATE spark_runs SET lease_until = $3 WHERE instance = $1 AND id = ANY ($2::text[])
               RETURNING id, cancel_requested`,
        values: [instance, ids, leaseUntil],
      },
      true,
    );
    return rows.filter((row) => row.cancel_requested).map((row) => row.id);
  }

  async orphans(instance: string, now: number): Promise<BackgroundRun[]> {
    const { rows } = await this.db.read<RunRow>({
      name: "spark_run_orphans",
      text: "SELECT * FROM spark_runs WHERE instance = $1 OR lease_until < $2",
      values: [instance, now],
    });
    return rows.map(runOf);
  }

  async events(id: string, owner: string, after: number): Promise<EventChunk[]> {
    const { rows } = await this.db.read<{ first_seq: number; last_seq: number; data: Buffer }>({
      name: "spark_events",
      text: `SELECT first_seq, last_seq, data FROM spark_response_events
             WHERE response_id = $1 AND owner = $2 AND last_seq > $3 ORDER BY first_seq`,
      values: [id, owner, after],
    });
    return rows.map((row) => ({ first: row.first_seq, last: row.last_seq, data: row.data }));
  }
}

interface ConversationRow {
  id: string;
  owner: string;
  created_at: string;
  metadata: string;
}

function conversationOf(row: ConversationRow): ConversationRecord {
  return {
    id: row.id,
    owner: row.owner,
    createdAt: Number(row.created_at),
    metadata: JSON.parse(row.metadata) as Record<string, string>,
  };
}

export class PostgresConversationStore implements ConversationStore {
  constructor(private readonly db: PostgresQueries) {}

  async create(conversation: ConversationRecord, items: readonly InputItemRecord[]): Promise<void> {
    await this.db.write(
      {
        name: "spark_conversation_create",
        text: `WITH conversation AS (
                 INSERT INTO spark_conversations (id, owner, created_at, metadata, next_position)
                 VALUES ($1, $2, $3, $4, cardinality($5::text[])) RETURNING id
               )
               INSERT INTO spark_conversation_items (conversation_id, position, id, item)
               SELECT conversation.id, item.ord - 1, item.id, item.item
               FROM conversation, unnest($5::text[], $6::text[]) WITH ORDINALITY AS item (id, item, ord)`,
        values: [
          conversation.id,
          conversation.owner,
          conversation.createdAt,
          JSON.stringify(conversation.metadata),
          items.map((item) => item.id),
          items.map((item) => JSON.stringify(item)),
        ],
      },
      false,
    );
  }

  async get(id: string, owner: string): Promise<ConversationRecord | undefined> {
    const { rows } = await this.db.read<ConversationRow>({
      name: "spark_conversation_get",
      text: "SELECT id, owner, created_at, metadata FROM spark_conversations WHERE id = $1 AND owner = $2",
      values: [id, owner],
    });
    return rows[0] === undefined ? undefined : conversationOf(rows[0]);
  }

  async update(
    id: string,
    owner: string,
    metadata: Record<string, string>,
  ): Promise<ConversationRecord | undefined> {
    const { rows } = await this.db.write<ConversationRow>(
      {
        name: "spark_conversation_update",
        text: `UPDATE spark_conversations SET metadata = $3 WHERE id = $1 AND owner = $2
               RETURNING id, owner, created_at, metadata`,
        values: [id, owner, JSON.stringify(metadata)],
      },
      true,
    );
    return rows[0] === undefined ? undefined : conversationOf(rows[0]);
  }

  async delete(id: string, owner: string): Promise<boolean> {
    const result = await this.db.write(
      {
        name: "spark_conversation_delete",
        text: "DELETE FROM spark_conversations WHERE id = $1 AND owner = $2",
        values: [id, owner],
      },
      false,
    );
    return (result.rowCount ?? 0) > 0;
  }

  async append(id: string, owner: string, items: readonly InputItemRecord[]): Promise<boolean> {
    if (items.length === 0) return (await this.get(id, owner)) !== undefined;
    const result = await this.db.write(
      {
        name: "spark_conversation_append",
        text: `WITH conversation AS (
                 UPDATE spark_conversations SET next_position = next_position + cardinality($3::text[])
                 WHERE id = $1 AND owner = $2
                 RETURNING id, next_position - cardinality($3::text[]) AS start
               )
               INSERT INTO spark_conversation_items (conversation_id, position, id, item)
               SELECT conversation.id, conversation.start + item.ord - 1, item.id, item.item
               FROM conversation, unnest($3::text[], $4::text[]) WITH ORDINALITY AS item (id, item, ord)`,
        values: [id, owner, items.map((item) => item.id), items.map((item) => JSON.stringify(item))],
      },
      false,
    );
    return (result.rowCount ?? 0) > 0;
  }

  async items(id: string, owner: string): Promise<InputItemRecord[] | undefined> {
    const { rows } = await this.db.read<{ item: string | null }>({
      name: "spark_conversation_items",
      text: `SELECT i.item FROM spark_conversations AS c
             LEFT JOIN spark_conversation_items AS i ON i.conversation_id = c.id
             WHERE c.id = $1 AND c.owner = $2 ORDER BY i.position`,
      values: [id, owner],
    });
    if (rows.length === 0) return undefined;
    return rows.flatMap((row) => (row.item === null ? [] : [JSON.parse(row.item) as InputItemRecord]));
  }

  /** One page in one indexed range query, one row more to tell `hasMore`. */
  async list(id: string, owner: string, page: ItemPage): Promise<ItemPageResult> {
    const { rows } = await this.db.read<{ found_after: boolean | null; item: string | null }>({
      name: `spark_conversation_page_${page.order}`,
      text: `WITH conversation AS (SELECT id FROM spark_conversations WHERE id = $1 AND owner = $2),
             start AS (
               SELECT (SELECT position FROM spark_conversation_items
                       WHERE conversation_id = $1 AND id = $3) AS position
             )
             SELECT ($3::text IS NULL OR start.position IS NOT NULL) AS found_after, page.item
             FROM conversation CROSS JOIN start
             LEFT JOIN LATERAL (
               SELECT i.item, i.position FROM spark_conversation_items AS i
               WHERE i.conversation_id = conversation.id
                 AND ($3::text IS NULL OR i.position ${page.order === "asc" ? ">" : "<"} start.position)
               ORDER BY i.position ${page.order === "asc" ? "ASC" : "DESC"}
               LIMIT $4
             ) AS page ON true
             ORDER BY page.position ${page.order === "asc" ? "ASC" : "DESC"}`,
      values: [id, owner, page.after ?? null, page.limit + 1],
    });
    if (rows.length === 0) return { found: false, missing: "conversation" };
    if (rows[0]!.found_after === false) return { found: false, missing: "after" };
    const items = rows.flatMap((row) => (row.item === null ? [] : [JSON.parse(row.item) as InputItemRecord]));
    return { found: true, data: items.slice(0, page.limit), hasMore: items.length > page.limit };
  }

  async item(id: string, owner: string, itemId: string): Promise<InputItemRecord | undefined> {
    const { rows } = await this.db.read<{ item: string }>({
      name: "spark_conversation_item",
      text: `SELECT i.item FROM spark_conversation_items AS i
             JOIN spark_conversations AS c ON c.id = i.conversation_id
             WHERE c.id = $1 AND c.owner = $2 AND i.id = $3`,
      values: [id, owner, itemId],
    });
    return rows[0] === undefined ? undefined : (JSON.parse(rows[0].item) as InputItemRecord);
  }

  async deleteItem(id: string, owner: string, itemId: string): Promise<boolean> {
    const result = await this.db.write(
      {
        name: "spark_conversation_item_delete",
        text: `DELETE FROM spark_conversation_items AS i USING spark_conversations AS c
               WHERE c.id = i.conversation_id AND c.id = $1 AND c.owner = $2 AND i.id = $3`,
        values: [id, owner, itemId],
      },
      false,
    );
    return (result.rowCount ?? 0) > 0;
  }
}
