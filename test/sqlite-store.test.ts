/**
 * The durable response store against real files in a fresh temporary directory, including a real
 * child process killed with SIGKILL right after its puts returned.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import Database from "better-sqlite3";
import {
  DATABASE_FILE,
  defaultDataDir,
  SCHEMA_VERSION,
  SqliteResponseStore,
  StoreOpenError,
} from "../src/store/sqlite-store.js";
import { chainConversation, type StoredResponse } from "../src/core/response-store.js";
import { sampleRecord } from "./fixtures/store/records.js";
import { version1Chain, writeVersion1Database } from "./fixtures/store/version1.js";

const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));
const FIXTURE = fileURLToPath(new URL("./fixtures/store/put-forever.ts", import.meta.url));
/** Only to avoid hanging forever on a broken fixture; no assertion depends on it. */
const SAFETY_TIMEOUT_MS = 60_000;

const root = mkdtempSync(join(tmpdir(), "spark-store-test-"));
after(() => rmSync(root, { recursive: true, force: true }));

let dirCount = 0;
/** A data directory path that does not exist yet. */
function freshDataDir(): string {
  return join(root, `data-${++dirCount}`);
}

test("put then get returns the same record, from the cache and from the database", () => {
  const dataDir = freshDataDir();
  const store = SqliteResponseStore.open(dataDir);
  const record = sampleRecord("resp_round_trip");
  store.put(record);
  assert.deepEqual(store.get("resp_round_trip", "key_alice"), sampleRecord("resp_round_trip"));
  store.close();

  const reopened = SqliteResponseStore.open(dataDir);
  const fromDisk = reopened.get("resp_round_trip", "key_alice");
  assert.notEqual(fromDisk, record);
  assert.deepEqual(fromDisk, sampleRecord("resp_round_trip"));
  assert.equal(reopened.get("resp_missing", "key_alice"), undefined);
  reopened.close();
});

test("another owner can neither see nor delete a record", () => {
  const dataDir = freshDataDir();
  const store = SqliteResponseStore.open(dataDir);
  store.put(sampleRecord("resp_owned", "key_alice"));

  // While the record is in the cache.
  assert.equal(store.get("resp_owned", "key_bob"), undefined);
  assert.equal(store.delete("resp_owned", "key_bob"), false);
  assert.deepEqual(store.get("resp_owned", "key_alice"), sampleRecord("resp_owned", "key_alice"));
  store.close();

  // And when it has to come from the database.
  const reopened = SqliteResponseStore.open(dataDir);
  assert.equal(reopened.get("resp_owned", "key_bob"), undefined);
  assert.equal(reopened.delete("resp_owned", "key_bob"), false);
  assert.deepEqual(reopened.get("resp_owned", "key_alice"), sampleRecord("resp_owned", "key_alice"));

  assert.equal(reopened.delete("resp_owned", "key_alice"), true);
  assert.equal(reopened.get("resp_owned", "key_alice"), undefined);
  assert.equal(reopened.delete("resp_owned", "key_alice"), false);
  reopened.close();

  const again = SqliteResponseStore.open(dataDir);
  assert.equal(again.get("resp_owned", "key_alice"), undefined);
  again.close();
});

test("records survive close and reopen; put replaces; close is idempotent", () => {
  const dataDir = freshDataDir();
  const store = SqliteResponseStore.open(dataDir);
  let previous: string | null = null;
  for (let index = 0; index < 5; index++) {
    store.put(sampleRecord(`resp_chain_${index}`, "key_alice", previous));
    previous = `resp_chain_${index}`;
  }
  const replacement = sampleRecord("resp_chain_2");
  replacement.response.status = "incomplete";
  replacement.response.incomplete_details = { reason: "steered" };
  store.put(replacement);
  assert.equal(store.get("resp_chain_2", "key_alice")?.response.status, "incomplete");
  store.close();
  store.close();

  const reopened = SqliteResponseStore.open(dataDir);
  for (let index = 0; index < 5; index++) {
    const got = reopened.get(`resp_chain_${index}`, "key_alice");
    if (index === 2) assert.deepEqual(got, replacement);
    else
      assert.deepEqual(
        got,
        sampleRecord(`resp_chain_${index}`, "key_alice", index === 0 ? null : `resp_chain_${index - 1}`),
      );
  }
  reopened.close();
});

test("the cache stays coherent with deletes and with records evicted from it", () => {
  const store = SqliteResponseStore.open(freshDataDir());
  store.put(sampleRecord("resp_cached"));
  assert.ok(store.get("resp_cached", "key_alice"));
  assert.equal(store.delete("resp_cached", "key_alice"), true);
  assert.equal(store.get("resp_cached", "key_alice"), undefined);

  // More records than the cache holds: the first ones must come back from the database.
  for (let index = 0; index < 600; index++) store.put(sampleRecord(`resp_many_${index}`));
  for (const index of [0, 1, 299, 599])
    assert.deepEqual(store.get(`resp_many_${index}`, "key_alice"), sampleRecord(`resp_many_${index}`));
  assert.equal(store.get("resp_many_0", "key_bob"), undefined);
  store.close();
});

test("the cache of parsed records is bounded in bytes; a record over a quarter of it is not cached", () => {
  const MiB = 1024 * 1024;
  const large = (id: string, size: number) => {
    const record = sampleRecord(id);
    const text = id.padEnd(size, "x");
    record.inputItems = [{ id: `in_${id}`, type: "message", content: [{ type: "input_text", text }] }];
    record.items = [{ type: "message", role: "user", text }];
    return record;
  };
  const dataDir = freshDataDir();
  const store = SqliteResponseStore.open(dataDir, { cacheBytes: 2 * MiB });
  for (let index = 0; index < 40; index++) {
    store.put(large(`resp_large_${index}`, 100_000));
    assert.ok(store.cachedBytes <= 2 * MiB, `${store.cachedBytes} bytes cached after ${index + 1} puts`);
  }
  assert.ok(store.cachedBytes > MiB, `the cache is used: ${store.cachedBytes}`);
  // Reads fill the cache too, within the same bound; every record still reads back whole.
  for (let index = 0; index < 40; index++) {
    assert.deepEqual(store.get(`resp_large_${index}`, "key_alice"), large(`resp_large_${index}`, 100_000));
    assert.ok(store.cachedBytes <= 2 * MiB, `${store.cachedBytes} bytes cached after reading ${index}`);
  }
  const hot = store.get("resp_large_39", "key_alice");
  assert.equal(store.get("resp_large_39", "key_alice"), hot, "a recent record comes from the cache");

  // Over a quarter of the bound (512 KiB): stored and read back, never cached.
  const before = store.cachedBytes;
  const huge = large("resp_huge", 300_000);
  store.put(huge);
  assert.equal(store.cachedBytes, before);
  const first = store.get("resp_huge", "key_alice");
  assert.deepEqual(first, huge);
  assert.notEqual(first, huge);
  assert.notEqual(store.get("resp_huge", "key_alice"), first, "parsed again on each read");
  assert.equal(store.cachedBytes, before);

  // Deletes give their bytes back; close empties the cache.
  assert.equal(store.delete("resp_large_39", "key_alice"), true);
  assert.ok(store.cachedBytes < before);
  store.close();
  assert.equal(store.cachedBytes, 0);

  // The default bound: 64 MiB, so an 8 MiB input (16 MiB of JSON: input items and conversation) is not cached.
  const defaults = SqliteResponseStore.open(dataDir);
  defaults.put(large("resp_8mib", 8 * MiB));
  assert.equal(defaults.cachedBytes, 0);
  defaults.put(large("resp_small", 1000));
  assert.ok(defaults.cachedBytes > 0);
  defaults.close();
});

test("every put that returned survives kill -9 of the process", async () => {
  const dataDir = freshDataDir();
  const count = 50;
  const lastId = `resp_kill_${count - 1}`;
  const child = spawn(process.execPath, ["--import", "tsx", FIXTURE, dataDir, String(count)], {
    cwd: REPO_ROOT,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stderr = "";
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const safety = setTimeout(() => child.kill("SIGKILL"), SAFETY_TIMEOUT_MS);
  const exited = once(child, "exit");

  const printed: string[] = [];
  try {
    for await (const line of createInterface({ input: child.stdout })) {
      const match = /^stored (\S+)$/.exec(line);
      assert.ok(match?.[1], `unexpected line from the fixture: ${line}`);
      printed.push(match[1]);
      if (match[1] === lastId) {
        child.kill("SIGKILL");
        break;
      }
    }
  } finally {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
    await exited;
    clearTimeout(safety);
  }
  assert.equal(child.signalCode, "SIGKILL", `fixture ended otherwise; stderr:\n${stderr}`);
  assert.equal(printed.length, count);
  // The commits were never checkpointed into the main file: they live in the WAL.
  assert.ok(statSync(join(dataDir, `${DATABASE_FILE}-wal`)).size > 0);

  const store = SqliteResponseStore.open(dataDir);
  let previous: string | null = null;
  for (const id of printed) {
    assert.deepEqual(store.get(id, "key_alice"), sampleRecord(id, "key_alice", previous), id);
    previous = id;
  }
  store.close();
});

test("creates a private data directory and database file", () => {
  const dataDir = join(freshDataDir(), "nested", "spark");
  const store = SqliteResponseStore.open(dataDir);
  store.close();
  assert.equal(statSync(dataDir).mode & 0o777, 0o700);
  assert.equal(statSync(join(dataDir, DATABASE_FILE)).mode & 0o777, 0o600);
  // SQLite gives the WAL the database file's mode.
  const reopened = SqliteResponseStore.open(dataDir);
  reopened.put(sampleRecord("resp_private"));
  assert.equal(statSync(join(dataDir, `${DATABASE_FILE}-wal`)).mode & 0o777, 0o600);
  reopened.close();
});

test("a data directory that cannot be created gives an error naming it", () => {
  const blocker = join(root, "a-regular-file");
  writeFileSync(blocker, "not a directory");
  const dataDir = join(blocker, "spark");
  assert.throws(
    () => SqliteResponseStore.open(dataDir),
    (error: unknown) => {
      assert.ok(error instanceof StoreOpenError);
      assert.equal(error.path, dataDir);
      assert.match(error.message, /^Cannot create the data directory /);
      assert.ok(error.message.includes(dataDir), error.message);
      assert.match(error.message, /choose another --data-dir/i);
      return true;
    },
  );
});

test("a data directory this user cannot write gives an error naming the database", (t) => {
  if (process.getuid?.() === 0) {
    t.skip("running as root: permissions do not stop root from writing");
    return;
  }
  const dataDir = freshDataDir();
  mkdirSync(dataDir, { mode: 0o500 });
  assert.throws(
    () => SqliteResponseStore.open(dataDir),
    (error: unknown) => {
      assert.ok(error instanceof StoreOpenError);
      assert.ok(error.message.includes(join(dataDir, DATABASE_FILE)), error.message);
      assert.match(error.message, /choose another --data-dir/i);
      return true;
    },
  );
});

test("a database path that cannot be opened gives an error naming it", () => {
  const dataDir = freshDataDir();
  const path = join(dataDir, DATABASE_FILE);
  mkdirSync(path, { recursive: true });
  assert.throws(
    () => SqliteResponseStore.open(dataDir),
    (error: unknown) => {
      assert.ok(error instanceof StoreOpenError);
      assert.equal(error.path, path);
      assert.match(error.message, /^Cannot open the response store /);
      assert.ok(error.message.includes(path), error.message);
      assert.match(error.message, /choose another --data-dir/i);
      return true;
    },
  );
});

test("a garbage file in place of the database is reported as not a database and left alone", () => {
  const dataDir = freshDataDir();
  mkdirSync(dataDir);
  const path = join(dataDir, DATABASE_FILE);
  const garbage = Buffer.from("this is not an SQLite file\n".repeat(200));
  writeFileSync(path, garbage, { mode: 0o644 });
  assert.throws(
    () => SqliteResponseStore.open(dataDir),
    (error: unknown) => {
      assert.ok(error instanceof StoreOpenError);
      assert.equal(error.path, path);
      assert.match(error.message, /is not a database/);
      assert.ok(error.message.includes(path), error.message);
      return true;
    },
  );
  assert.deepEqual(readFileSync(path), garbage);
  assert.equal(statSync(path).mode & 0o777, 0o644);
  assert.equal(existsSync(`${path}-wal`), false);
});

test("the schema is versioned in user_version with its tables and their indexes", () => {
  const dataDir = freshDataDir();
  SqliteResponseStore.open(dataDir).close();
  const db = new Database(join(dataDir, DATABASE_FILE), { readonly: true });
  try {
    assert.equal(SCHEMA_VERSION, 3);
    assert.equal(db.pragma("user_version", { simple: true }), 3);
    assert.equal(db.pragma("journal_mode", { simple: true }), "wal");
    const columns = db.prepare<[], { name: string; type: string; notnull: number; pk: number }>(
      "SELECT name, type, \"notnull\", pk FROM pragma_table_info('responses')",
    );
    assert.deepEqual(
      columns.all().map((column) => ({ ...column })),
      [
        { name: "id", type: "TEXT", notnull: 0, pk: 1 },
        { name: "owner", type: "TEXT", notnull: 1, pk: 0 },
        { name: "created_at", type: "INTEGER", notnull: 1, pk: 0 },
        { name: "response", type: "TEXT", notnull: 1, pk: 0 },
        { name: "input_items", type: "TEXT", notnull: 1, pk: 0 },
        { name: "items", type: "TEXT", notnull: 1, pk: 0 },
        { name: "standalone", type: "INTEGER", notnull: 1, pk: 0 },
      ],
    );
    assert.deepEqual(
      db
        .prepare<[], { name: string; type: string; notnull: number; pk: number }>(
          "SELECT name, type, \"notnull\", pk FROM pragma_table_info('item_ids')",
        )
        .all()
        .map((column) => ({ ...column })),
      [
        { name: "owner", type: "TEXT", notnull: 1, pk: 1 },
        { name: "id", type: "TEXT", notnull: 1, pk: 2 },
        { name: "response_id", type: "TEXT", notnull: 1, pk: 0 },
      ],
    );
    const indexed = (table: string) =>
      db
        .prepare<[], { name: string }>(`SELECT name FROM pragma_index_list('${table}') WHERE origin = 'c'`)
        .all()
        .map((index) =>
          db.prepare<[], { name: string }>(`SELECT name FROM pragma_index_info('${index.name}')`).all(),
        );
    assert.deepEqual(indexed("responses"), [[{ name: "owner" }]]);
    assert.deepEqual(indexed("item_ids"), [[{ name: "response_id" }]]);
    // Version 3: background runs, stream events, conversations and their items.
    const tables = db
      .prepare<[], { name: string }>("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
      .all()
      .map((table) => table.name);
    assert.deepEqual(tables, [
      "conversation_items",
      "conversations",
      "item_ids",
      "response_events",
      "responses",
      "runs",
    ]);
  } finally {
    db.close();
  }
  // Opening an up-to-date store again runs no migration and keeps the version.
  SqliteResponseStore.open(dataDir).close();
});

test("a version 1 database migrates to the current version: its rows read as whole conversations, their items resolve, chains go on", () => {
  const dataDir = freshDataDir();
  const alice = version1Chain("old", 3);
  const bob = version1Chain("bob", 1, "key_bob");
  writeVersion1Database(dataDir, [...alice, ...bob]);

  const store = SqliteResponseStore.open(dataDir);
  const db = new Database(join(dataDir, DATABASE_FILE), { readonly: true });
  assert.equal(db.pragma("user_version", { simple: true }), SCHEMA_VERSION);
  db.close();
  // A version 1 row keeps its full conversation and needs no predecessor.
  const tip = store.get("resp_old_2", "key_alice");
  assert.equal(tip?.standalone, true);
  assert.deepEqual(tip.items, alice[2]!.conversation);
  assert.deepEqual(tip.response, alice[2]!.response);
  const withoutInstructions = alice[2]!.conversation.slice(1);
  assert.deepEqual(chainConversation(store, "resp_old_2", "key_alice"), {
    found: true,
    conversation: withoutInstructions,
  });
  // Output and input item ids of version 1 rows are indexed, per owner.
  assert.deepEqual(store.item("msg_old_0", "key_alice"), alice[0]!.response.output[0]);
  assert.deepEqual(store.item("in_old_1", "key_alice"), alice[1]!.inputItems[0]);
  assert.equal(store.item("msg_bob_0", "key_alice"), undefined);
  assert.deepEqual(store.item("msg_bob_0", "key_bob"), bob[0]!.response.output[0]);

  // A new response continues the old chain storing only its own turn.
  const next: StoredResponse = {
    ...sampleRecord("resp_new_3", "key_alice", "resp_old_2"),
    items: [
      { type: "message", role: "user", text: "question 3" },
      { type: "message", role: "assistant", text: "answer 3" },
    ],
  };
  store.put(next);
  store.close();
  const reopened = SqliteResponseStore.open(dataDir, { cacheBytes: 0 });
  assert.deepEqual(chainConversation(reopened, "resp_new_3", "key_alice"), {
    found: true,
    conversation: [...withoutInstructions, ...next.items],
  });
  assert.equal(chainConversation(reopened, "resp_new_3", "key_bob").found, false);
  reopened.close();
});

test("items resolve by id per owner, the first stored wins, and a delete forgets its items", () => {
  const dataDir = freshDataDir();
  const store = SqliteResponseStore.open(dataDir);
  const first = sampleRecord("resp_items_a");
  store.put(first);
  // A later response that resent the first one's message (same id) as input does not take it over.
  const resent = sampleRecord("resp_items_b", "key_alice", "resp_items_a");
  resent.inputItems = [
    structuredClone(first.response.output[1] as unknown as StoredResponse["inputItems"][0]),
  ];
  (resent.inputItems[0]!.content as { text: string }[])[0]!.text = "altered copy";
  store.put(resent);
  store.put(sampleRecord("resp_items_bob", "key_bob"));
  store.close();

  const reopened = SqliteResponseStore.open(dataDir, { cacheBytes: 0 });
  assert.deepEqual(reopened.item("msg_resp_items_a", "key_alice"), first.response.output[1]);
  assert.deepEqual(reopened.item("fc_resp_items_a", "key_alice"), first.response.output[0]);
  assert.deepEqual(reopened.item("in_resp_items_a", "key_alice"), first.inputItems[0]);
  assert.equal(reopened.item("msg_resp_items_a", "key_bob"), undefined);
  assert.equal(reopened.item("msg_resp_items_bob", "key_alice"), undefined);
  assert.equal(reopened.item("msg_nope", "key_alice"), undefined);
  assert.equal(reopened.delete("resp_items_a", "key_alice"), true);
  assert.equal(reopened.item("fc_resp_items_a", "key_alice"), undefined);
  assert.equal(reopened.item("in_resp_items_a", "key_alice"), undefined);
  assert.deepEqual(reopened.item("msg_resp_items_b", "key_alice"), resent.response.output[1]);
  // Replacing a record replaces its items.
  const replaced = sampleRecord("resp_items_b", "key_alice", "resp_items_a");
  replaced.response.output = [];
  reopened.put(replaced);
  assert.equal(reopened.item("msg_resp_items_b", "key_alice"), undefined);
  reopened.close();
});

test("a database from a newer schema or another program is refused with a clear error", () => {
  const newer = freshDataDir();
  SqliteResponseStore.open(newer).close();
  const db = new Database(join(newer, DATABASE_FILE));
  db.pragma("user_version = 7");
  db.close();
  assert.throws(
    () => SqliteResponseStore.open(newer),
    /schema version 7, newer than this Spark supports \(3\)/,
  );

  const foreign = freshDataDir();
  mkdirSync(foreign);
  const other = new Database(join(foreign, DATABASE_FILE));
  other.exec("CREATE TABLE notes (body TEXT)");
  other.close();
  assert.throws(() => SqliteResponseStore.open(foreign), /is an SQLite database but not one of Spark's/);
});

test("defaultDataDir: SPARK_DATA_DIR, else SPARK_HOME/data, else an earlier version's data dir while it is the only one", () => {
  assert.equal(
    defaultDataDir({ SPARK_DATA_DIR: "/srv/spark", XDG_DATA_HOME: "/xdg", HOME: "/home/u" }),
    "/srv/spark",
  );
  // One home: the config's and the data's.
  assert.equal(defaultDataDir({ HOME: "/nonexistent-home-u" }), "/nonexistent-home-u/.spark/data");
  assert.equal(defaultDataDir({ SPARK_HOME: "/nonexistent/sh", HOME: "/h" }), "/nonexistent/sh/data");
  // Data an earlier version left is used until SPARK_HOME/data exists.
  const home = mkdtempSync(join(tmpdir(), "spark-home-"));
  try {
    mkdirSync(join(home, ".local", "share", "spark"), { recursive: true });
    assert.equal(defaultDataDir({ HOME: home }), join(home, ".local", "share", "spark"));
    mkdirSync(join(home, ".spark", "data"), { recursive: true });
    assert.equal(defaultDataDir({ HOME: home }), join(home, ".spark", "data"));
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});
