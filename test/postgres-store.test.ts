/**
 * The Postgres response store against a real PostgreSQL server (Debian's `postgresql`, a private
 * cluster started in a temporary directory; see `helpers/postgres.ts`): the store contract the
 * SQLite store keeps, checked against `MemoryResponseStore` as the reference; migrations and their
 * lock; a database that goes away and comes back.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import {
  MemoryResponseStore,
  StoreUnavailableError,
  StoreWriteError,
  type StoredResponse,
} from "../src/core/response-store.js";
import { StoreOpenError } from "../src/store/open-error.js";
import {
  MIGRATION_LOCK,
  POSTGRES_SCHEMA_VERSION,
  PostgresResponseStore,
  redactUrl,
} from "../src/store/postgres-store.js";
import { sampleRecord } from "./fixtures/store/records.js";
import { closedPort } from "./helpers/ports.js";
import { POSTGRES_MISSING, TestPostgres } from "./helpers/postgres.js";

const skip = POSTGRES_MISSING ?? false;
let server: TestPostgres;
let databases = 0;
const stores: PostgresResponseStore[] = [];

before(async () => {
  if (!skip) server = await TestPostgres.start();
});
after(async () => {
  await Promise.allSettled(stores.map((store) => store.close()));
  server?.destroy();
});

/** A store on a new, empty database. */
async function freshStore(): Promise<{ store: PostgresResponseStore; url: string; name: string }> {
  const name = `store_${++databases}`;
  const url = await server.createDatabase(name);
  const store = await PostgresResponseStore.open(url);
  stores.push(store);
  return { store, url, name };
}

/** A turn of a chain: its own items, linked to `previous` unless it is the first. */
function turn(id: string, previous: string | null, owner = "key_alice"): StoredResponse {
  const record = sampleRecord(id, owner, previous);
  return {
    ...record,
    items: [
      { type: "message", role: "system", text: "not inherited" },
      { type: "message", role: "user", text: `question ${id}` },
      { type: "message", role: "assistant", text: `answer ${id}` },
    ],
    standalone: previous === null,
  };
}

test("records round-trip exactly, and one owner never sees, has or deletes another's", { skip }, async () => {
  const { store } = await freshStore();
  const record = sampleRecord("resp_round_trip");
  // Text Postgres cannot hold raw (NUL), a lone surrogate, and non-BMP characters survive as JSON.
  (record.inputItems[0]!.content as { text: string }[])[0]!.text = "nul \u0000, lone \ud800, emoji 🚀";
  await store.put(record);
  assert.deepEqual(await store.get("resp_round_trip", "key_alice"), record);
  assert.equal(await store.has("resp_round_trip", "key_alice"), true);
  assert.equal(await store.get("resp_round_trip", "key_bob"), undefined);
  assert.equal(await store.has("resp_round_trip", "key_bob"), false);
  assert.equal(await store.delete("resp_round_trip", "key_bob"), false);
  assert.equal((await store.chain("resp_round_trip", "key_bob")).found, false);
  assert.deepEqual(await store.get("resp_round_trip", "key_alice"), record);
  assert.equal(await store.delete("resp_round_trip", "key_alice"), true);
  assert.equal(await store.get("resp_round_trip", "key_alice"), undefined);
  assert.equal(await store.delete("resp_round_trip", "key_alice"), false);
  assert.equal(await store.get("resp_missing", "key_alice"), undefined);
});

test(
  "chains: the same conversations as the memory store; a deleted turn breaks the chain",
  { skip },
  async () => {
    const { store } = await freshStore();
    const reference = new MemoryResponseStore();
    const records = [
      turn("resp_c0", null),
      turn("resp_c1", "resp_c0"),
      turn("resp_c2", "resp_c1"),
      { ...turn("resp_c3", "resp_c2"), standalone: true },
      turn("resp_c4", "resp_c3"),
      turn("resp_other", "resp_c4", "key_bob"),
      turn("resp_orphan", "resp_never_stored"),
    ];
    for (const record of records) {
      await store.put(record);
      reference.put(record);
    }
    for (const { response, owner } of records) {
      for (const who of [owner, "key_bob", "key_alice"]) {
        assert.deepEqual(
          await store.chain(response.id, who),
          reference.chain(response.id, who),
          `${response.id} as ${who}`,
        );
      }
    }
    const c2 = await store.chain("resp_c2", "key_alice");
    assert.ok(c2.found);
    assert.deepEqual(
      c2.conversation.map((item) => (item.type === "message" ? item.text : item.type)),
      [
        "question resp_c0",
        "answer resp_c0",
        "question resp_c1",
        "answer resp_c1",
        "question resp_c2",
        "answer resp_c2",
      ],
    );
    // Bob's turn continues Alice's response, which Bob cannot see.
    assert.deepEqual(await store.chain("resp_other", "key_bob"), { found: false, missing: "resp_c4" });

    assert.equal(await store.delete("resp_c1", "key_alice"), true);
    reference.delete("resp_c1", "key_alice");
    assert.deepEqual(await store.chain("resp_c2", "key_alice"), { found: false, missing: "resp_c1" });
    assert.deepEqual(await store.chain("resp_c2", "key_alice"), reference.chain("resp_c2", "key_alice"));
    // A standalone turn does not need what came before it.
    assert.deepEqual(await store.chain("resp_c4", "key_alice"), reference.chain("resp_c4", "key_alice"));
    assert.equal((await store.chain("resp_c4", "key_alice")).found, true);

    // A cycle (only possible by replacing records) ends the walk instead of looping.
    await store.put(turn("resp_loop_a", "resp_loop_b"));
    await store.put(turn("resp_loop_b", "resp_loop_a"));
    const loop = await store.chain("resp_loop_a", "key_alice");
    assert.ok(loop.found);
    assert.equal(loop.conversation.length, 4);
  },
);

test(
  "items resolve by id per owner, the first stored wins, a delete forgets its items, a replacement replaces them",
  { skip },
  async () => {
    const { store } = await freshStore();
    const first = sampleRecord("resp_items_a");
    await store.put(first);
    const resent = sampleRecord("resp_items_b", "key_alice", "resp_items_a");
    resent.inputItems = [
      structuredClone(first.response.output[1] as unknown as StoredResponse["inputItems"][0]),
    ];
    (resent.inputItems[0]!.content as { text: string }[])[0]!.text = "altered copy";
    await store.put(resent);
    await store.put(sampleRecord("resp_items_bob", "key_bob"));

    assert.deepEqual(await store.item("msg_resp_items_a", "key_alice"), first.response.output[1]);
    assert.deepEqual(await store.item("fc_resp_items_a", "key_alice"), first.response.output[0]);
    assert.deepEqual(await store.item("in_resp_items_a", "key_alice"), first.inputItems[0]);
    assert.equal(await store.item("msg_resp_items_a", "key_bob"), undefined);
    assert.equal(await store.item("msg_resp_items_bob", "key_alice"), undefined);
    assert.deepEqual(
      await store.item("msg_resp_items_bob", "key_bob"),
      sampleRecord("resp_items_bob", "key_bob").response.output[1],
    );
    assert.equal(await store.item("msg_nope", "key_alice"), undefined);
    assert.equal(await store.delete("resp_items_a", "key_alice"), true);
    assert.equal(await store.item("fc_resp_items_a", "key_alice"), undefined);
    assert.equal(await store.item("in_resp_items_a", "key_alice"), undefined);
    assert.deepEqual(await store.item("msg_resp_items_b", "key_alice"), resent.response.output[1]);
    const replaced = sampleRecord("resp_items_b", "key_alice", "resp_items_a");
    replaced.response.output = [];
    await store.put(replaced);
    assert.equal(await store.item("msg_resp_items_b", "key_alice"), undefined);
    assert.equal((await store.get("resp_items_b", "key_alice"))?.response.output.length, 0);
  },
);

test(
  "migrations: an empty database gets the schema, a second open changes nothing, a newer schema is refused",
  { skip },
  async () => {
    const { store, url, name } = await freshStore();
    await store.put(sampleRecord("resp_kept"));
    const versions = async (): Promise<number[]> =>
      (
        await server.sql<{ version: number }>(
          "SELECT version FROM spark_schema_version ORDER BY version",
          [],
          name,
        )
      ).map((row) => row.version);
    const all = Array.from({ length: POSTGRES_SCHEMA_VERSION }, (_, index) => index + 1);
    assert.deepEqual(await versions(), all);
    const again = await PostgresResponseStore.open(url);
    stores.push(again);
    assert.deepEqual(await versions(), all);
    assert.deepEqual(await again.get("resp_kept", "key_alice"), sampleRecord("resp_kept"));

    await server.sql("INSERT INTO spark_schema_version (version) VALUES (99)", [], name);
    await assert.rejects(PostgresResponseStore.open(url), (error: unknown) => {
      assert.ok(error instanceof StoreOpenError);
      assert.match(error.message, /schema version 99, newer than this Spark supports \(2\)/);
      return true;
    });
  },
);

test(
  "migrations take an advisory lock: an instance starting while another migrates waits for it, and concurrent starts all succeed",
  { skip },
  async () => {
    const name = `store_${++databases}`;
    const url = await server.createDatabase(name);
    // Another instance is in the middle of its migration: it holds the lock in an open transaction.
    const holder = new pg.Client({ connectionString: url });
    await holder.connect();
    await holder.query("BEGIN");
    await holder.query("SELECT pg_advisory_xact_lock($1::bigint)", [MIGRATION_LOCK]);
    let opened = false;
    const opening = PostgresResponseStore.open(url).then((store) => {
      opened = true;
      stores.push(store);
      return store;
    });
    // Wait until the new instance is blocked on that lock (seen by the server, not by a timer).
    for (;;) {
      const waiting = await server.sql<{ count: string }>(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted",
        [],
        name,
      );
      if (waiting[0]!.count !== "0") break;
      assert.equal(opened, false, "the store opened while another instance held the migration lock");
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    assert.equal(opened, false);
    await holder.query("COMMIT");
    await holder.end();
    const store = await opening;
    await store.put(sampleRecord("resp_after_lock"));
    assert.ok(await store.has("resp_after_lock", "key_alice"));

    // Several instances starting together on an empty database.
    const together = await server.createDatabase(`store_${++databases}`);
    const opens = await Promise.all(Array.from({ length: 4 }, () => PostgresResponseStore.open(together)));
    stores.push(...opens);
    await opens[0]!.put(sampleRecord("resp_shared"));
    for (const each of opens) assert.ok(await each.has("resp_shared", "key_alice"));
  },
);

test(
  "a database that goes away: clear errors while it is down, and the pool reconnects when it is back",
  { skip },
  async () => {
    const { store } = await freshStore();
    await store.put(sampleRecord("resp_before"));

    server.restart();
    // Every pooled connection died with the restart; the next calls work on new ones.
    assert.deepEqual(await store.get("resp_before", "key_alice"), sampleRecord("resp_before"));
    await store.put(sampleRecord("resp_after_restart"));

    server.stop("immediate");
    try {
      await assert.rejects(store.get("resp_before", "key_alice"), StoreUnavailableError);
      await assert.rejects(store.chain("resp_before", "key_alice"), StoreUnavailableError);
      await assert.rejects(store.item("msg_resp_before", "key_alice"), StoreUnavailableError);
      await assert.rejects(store.put(sampleRecord("resp_while_down")), (error: unknown) => {
        assert.ok(error instanceof StoreWriteError);
        assert.equal(error.unavailable, true);
        assert.equal(error.full, false);
        assert.match(error.message, /unreachable \(ECONNREFUSED\)/);
        assert.doesNotMatch(error.message, /127\.0\.0\.1/);
        return true;
      });
      await assert.rejects(store.delete("resp_before", "key_alice"), StoreWriteError);
    } finally {
      server.restart();
    }
    assert.deepEqual(await store.get("resp_before", "key_alice"), sampleRecord("resp_before"));
    assert.ok(await store.has("resp_after_restart", "key_alice"));
    assert.equal(await store.has("resp_while_down", "key_alice"), false);
    await store.put(sampleRecord("resp_while_down"));
    assert.ok(await store.has("resp_while_down", "key_alice"));
  },
);

test(
  "a database that cannot be reached at start is a StoreOpenError without the password",
  { skip },
  async () => {
    const url = `postgres://spark:s3cret@127.0.0.1:${await closedPort()}/spark`;
    assert.equal(redactUrl(url), url.replace("s3cret", "***"));
    await assert.rejects(PostgresResponseStore.open(url, { connectionTimeoutMs: 2000 }), (error: unknown) => {
      assert.ok(error instanceof StoreOpenError);
      assert.match(error.message, /Cannot use the response database postgres:\/\/spark:\*\*\*@127\.0\.0\.1/);
      assert.match(error.message, /ECONNREFUSED/);
      assert.doesNotMatch(error.message, /s3cret/);
      return true;
    });
  },
);

test(
  "a table locked by another client: every method fails with the store's unavailable errors instead of waiting, health() says degraded, and all is well once the lock goes",
  // The bound only keeps a hang (statements that wait for ever) from holding the suite.
  { skip, timeout: 60_000 },
  async () => {
    const name = `store_${++databases}`;
    const url = await server.createDatabase(name);
    const store = await PostgresResponseStore.open(url, { timeoutMs: 500, poolSize: 2 });
    stores.push(store);
    await store.put(sampleRecord("resp_before_lock"));
    assert.deepEqual(await store.health(), { ok: true, detail: "PostgreSQL answers" });
    const locker = new pg.Client({ connectionString: url });
    await locker.connect();
    try {
      await locker.query("BEGIN");
      await locker.query("LOCK TABLE spark_responses IN ACCESS EXCLUSIVE MODE");
      const unavailable = (error: unknown): boolean => {
        assert.ok(error instanceof StoreUnavailableError, String(error));
        assert.match(error.message, /did not answer in time/);
        return true;
      };
      const unwritable = (error: unknown): boolean => {
        assert.ok(error instanceof StoreWriteError, String(error));
        assert.equal(error.unavailable, true);
        assert.equal(error.full, false);
        return true;
      };
      // More calls at once than the pool has connections.
      await Promise.all([
        assert.rejects(Promise.resolve(store.get("resp_before_lock", "key_alice")), unavailable),
        assert.rejects(Promise.resolve(store.has("resp_before_lock", "key_alice")), unavailable),
        assert.rejects(Promise.resolve(store.chain("resp_before_lock", "key_alice")), unavailable),
        assert.rejects(Promise.resolve(store.item("msg_resp_before_lock", "key_alice")), unavailable),
        assert.rejects(Promise.resolve(store.put(sampleRecord("resp_locked"))), unwritable),
        assert.rejects(Promise.resolve(store.delete("resp_before_lock", "key_alice")), unwritable),
      ]);
      const health = await store.health();
      assert.equal(health.ok, false);
    } finally {
      await locker.query("ROLLBACK");
      await locker.end();
    }
    assert.deepEqual(await store.get("resp_before_lock", "key_alice"), sampleRecord("resp_before_lock"));
    await store.put(sampleRecord("resp_after_lock"));
    assert.equal(await store.has("resp_locked", "key_alice"), false);
    assert.equal(await store.delete("resp_after_lock", "key_alice"), true);
  },
);
