/**
 * The store seam's runs (background responses, stream events) and conversations, one contract for
 * the memory, SQLite and Postgres stores (a private PostgreSQL server, see `helpers/postgres.ts`):
 * owner isolation, a run's lease and cancel flag, progress and the final record replacing the run
 * row with every event, conversation items in order with pages, and (Postgres) two instances
 * appending to one conversation at once.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { decodeEvents, encodeEvents } from "../src/core/event-log.js";
import { MemoryResponseStore, type InputItemRecord, type ResponseStore } from "../src/core/response-store.js";
import type { BackgroundRun } from "../src/core/run-store.js";
import type { ResponseEvent } from "../src/protocol/responses.js";
import { PostgresResponseStore } from "../src/store/postgres-store.js";
import { SqliteResponseStore } from "../src/store/sqlite-store.js";
import { sampleRecord } from "./fixtures/store/records.js";
import { freshDir } from "./helpers/cli.js";
import { POSTGRES_MISSING, TestPostgres } from "./helpers/postgres.js";

let postgres: TestPostgres | undefined;
let databases = 0;
const opened: ResponseStore[] = [];

before(async () => {
  if (!POSTGRES_MISSING) postgres = await TestPostgres.start();
});
after(async () => {
  await Promise.allSettled(opened.map((store) => store.close()));
  postgres?.destroy();
});

const KINDS: { name: string; skip: string | false; open: () => Promise<ResponseStore> }[] = [
  { name: "memory", skip: false, open: async () => new MemoryResponseStore() },
  { name: "SQLite", skip: false, open: async () => SqliteResponseStore.open(freshDir("stateful-")) },
  {
    name: "Postgres",
    skip: POSTGRES_MISSING ?? false,
    open: async () => PostgresResponseStore.open(await postgres!.createDatabase(`stateful_${++databases}`)),
  },
];

async function open(kind: (typeof KINDS)[number]): Promise<ResponseStore> {
  const store = await kind.open();
  opened.push(store);
  return store;
}

function events(from: number, to: number): ResponseEvent[] {
  return Array.from({ length: to - from + 1 }, (_, index) => ({
    type: "response.output_text.delta",
    sequence_number: from + index,
    delta: `piece ${from + index} “ü” 🚀`,
  }));
}

function run(
  id: string,
  owner = "key_alice",
  instance = "a",
  leaseUntil = Date.now() + 60_000,
): BackgroundRun {
  const { response, inputItems } = sampleRecord(id, owner);
  return {
    id,
    owner,
    instance,
    leaseUntil,
    cancelRequested: false,
    response: { ...response, status: "in_progress", background: true, output: [] },
    inputItems,
  };
}

function item(id: string, text = id): InputItemRecord {
  return { id, type: "message", role: "user", status: "completed", content: [{ type: "input_text", text }] };
}

for (const kind of KINDS) {
  describe(`${kind.name} store: runs and conversations`, { skip: kind.skip }, () => {
    test("a run: owner isolation, progress with events, cancel and lease, then the final record replaces it", async () => {
      const store = await open(kind);
      const runs = store.runs!;
      await runs.start(run("resp_run"));
      assert.equal(await runs.run("resp_run", "key_bob"), undefined);
      assert.equal((await runs.run("resp_run", "key_alice"))?.response.status, "in_progress");

      const snapshot = { ...run("resp_run").response, output: sampleRecord("resp_run").response.output };
      await runs.progress("resp_run", "key_alice", snapshot, encodeEvents(events(0, 4)));
      await runs.progress(
        "resp_run",
        "key_bob",
        { ...snapshot, status: "failed" },
        encodeEvents(events(5, 9)),
      );
      await runs.progress("resp_run", "key_alice", snapshot, encodeEvents(events(5, 9)));
      assert.deepEqual((await runs.run("resp_run", "key_alice"))?.response, snapshot);
      assert.deepEqual(decodeEvents(await runs.events("resp_run", "key_alice", 3), 3), events(4, 9));
      assert.deepEqual(await runs.events("resp_run", "key_bob", -1), []);

      assert.equal(await runs.requestCancel("resp_run", "key_bob"), false);
      assert.deepEqual(await runs.renew("a", ["resp_run"], Date.now() + 60_000), []);
      assert.equal(await runs.requestCancel("resp_run", "key_alice"), true);
      assert.deepEqual(
        await runs.renew("b", ["resp_run"], Date.now() + 60_000),
        [],
        "another instance's run",
      );
      assert.deepEqual(await runs.renew("a", ["resp_run", "resp_other"], 1), ["resp_run"]);
      assert.equal((await runs.run("resp_run", "key_alice"))?.leaseUntil, 1);

      // The final record: its last events written with it, the run row gone in the same write.
      const final = sampleRecord("resp_run");
      await store.put({
        ...final,
        response: { ...final.response, background: true },
        events: encodeEvents(events(10, 12)),
      });
      assert.equal(await runs.run("resp_run", "key_alice"), undefined);
      assert.deepEqual(decodeEvents(await runs.events("resp_run", "key_alice", -1), -1), events(0, 12));
      assert.deepEqual(await store.get("resp_run", "key_alice"), {
        ...final,
        response: { ...final.response, background: true },
      });
      // A progress write that comes after the final record changes nothing.
      await runs.progress("resp_run", "key_alice", snapshot, encodeEvents(events(10, 11)));
      assert.deepEqual(decodeEvents(await runs.events("resp_run", "key_alice", -1), -1), events(0, 12));
      assert.equal(await store.delete("resp_run", "key_alice"), true);
      assert.deepEqual(await runs.events("resp_run", "key_alice", -1), []);
    });

    test("orphans: a starting instance's own runs and runs whose lease ended", async () => {
      const store = await open(kind);
      const runs = store.runs!;
      await runs.start(run("resp_mine", "key_alice", "a"));
      await runs.start(run("resp_alive", "key_alice", "b"));
      await runs.start(run("resp_expired", "key_bob", "c", Date.now() - 1));
      const orphans = (await runs.orphans("a", Date.now())).map((orphan) => orphan.id).sort();
      if (runs.local) assert.deepEqual(orphans, ["resp_alive", "resp_expired", "resp_mine"]);
      else assert.deepEqual(orphans, ["resp_expired", "resp_mine"]);
    });

    test("conversations: items in order with ids, pages both ways, per owner, deleted with their items", async () => {
      const store = await open(kind);
      const conversations = store.conversations!;
      await conversations.create(
        { id: "conv_a", owner: "key_alice", createdAt: 1_750_000_000, metadata: { topic: "x" } },
        [item("msg_0"), item("msg_1")],
      );
      await conversations.create({ id: "conv_empty", owner: "key_alice", createdAt: 1, metadata: {} }, []);
      assert.equal(await conversations.get("conv_a", "key_bob"), undefined);
      assert.deepEqual(await conversations.get("conv_a", "key_alice"), {
        id: "conv_a",
        owner: "key_alice",
        createdAt: 1_750_000_000,
        metadata: { topic: "x" },
      });
      assert.equal(await conversations.append("conv_a", "key_bob", [item("msg_x")]), false);
      assert.equal(
        await conversations.append("conv_a", "key_alice", [item("msg_2"), item("msg_3", "nul \u0000 ✓")]),
        true,
      );
      assert.deepEqual(
        (await conversations.items("conv_a", "key_alice"))!.map((entry) => entry.id),
        ["msg_0", "msg_1", "msg_2", "msg_3"],
      );
      assert.deepEqual(
        await conversations.item("conv_a", "key_alice", "msg_3"),
        item("msg_3", "nul \u0000 ✓"),
      );
      assert.deepEqual(await conversations.items("conv_empty", "key_alice"), []);
      assert.equal(await conversations.items("conv_a", "key_bob"), undefined);

      const ids = (page: Awaited<ReturnType<typeof conversations.list>>) =>
        page.found ? { ids: page.data.map((entry) => entry.id), more: page.hasMore } : page;
      assert.deepEqual(ids(await conversations.list("conv_a", "key_alice", { limit: 3, order: "asc" })), {
        ids: ["msg_0", "msg_1", "msg_2"],
        more: true,
      });
      assert.deepEqual(
        ids(await conversations.list("conv_a", "key_alice", { limit: 3, order: "asc", after: "msg_2" })),
        { ids: ["msg_3"], more: false },
      );
      assert.deepEqual(ids(await conversations.list("conv_a", "key_alice", { limit: 2, order: "desc" })), {
        ids: ["msg_3", "msg_2"],
        more: true,
      });
      assert.deepEqual(
        ids(await conversations.list("conv_a", "key_alice", { limit: 2, order: "desc", after: "msg_2" })),
        { ids: ["msg_1", "msg_0"], more: false },
      );
      assert.deepEqual(
        await conversations.list("conv_a", "key_alice", { limit: 2, order: "asc", after: "msg_9" }),
        {
          found: false,
          missing: "after",
        },
      );
      assert.deepEqual(await conversations.list("conv_a", "key_bob", { limit: 2, order: "asc" }), {
        found: false,
        missing: "conversation",
      });
      assert.deepEqual(ids(await conversations.list("conv_empty", "key_alice", { limit: 2, order: "asc" })), {
        ids: [],
        more: false,
      });

      assert.equal(await conversations.deleteItem("conv_a", "key_bob", "msg_1"), false);
      assert.equal(await conversations.deleteItem("conv_a", "key_alice", "msg_1"), true);
      assert.equal(await conversations.deleteItem("conv_a", "key_alice", "msg_1"), false);
      await conversations.append("conv_a", "key_alice", [item("msg_4")]);
      assert.deepEqual(
        (await conversations.items("conv_a", "key_alice"))!.map((entry) => entry.id),
        ["msg_0", "msg_2", "msg_3", "msg_4"],
      );
      assert.equal((await conversations.update("conv_a", "key_bob", {}))?.metadata, undefined);
      assert.deepEqual((await conversations.update("conv_a", "key_alice", { topic: "y" }))?.metadata, {
        topic: "y",
      });
      assert.equal(await conversations.delete("conv_a", "key_bob"), false);
      assert.equal(await conversations.delete("conv_a", "key_alice"), true);
      assert.equal(await conversations.items("conv_a", "key_alice"), undefined);
      assert.equal(await conversations.item("conv_a", "key_alice", "msg_0"), undefined);
    });
  });
}

test(
  "Postgres: two instances appending to one conversation at once take distinct positions",
  { skip: POSTGRES_MISSING ?? false },
  async () => {
    const url = await postgres!.createDatabase(`stateful_${++databases}`);
    const [first, second] = await Promise.all([
      PostgresResponseStore.open(url),
      PostgresResponseStore.open(url),
    ]);
    opened.push(first, second);
    await first.conversations.create({ id: "conv_race", owner: "key_alice", createdAt: 1, metadata: {} }, []);
    await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        (index % 2 === 0 ? first : second).conversations.append("conv_race", "key_alice", [
          item(`msg_${index}_a`),
          item(`msg_${index}_b`),
        ]),
      ),
    );
    const ids = (await second.conversations.items("conv_race", "key_alice"))!.map((entry) => entry.id);
    assert.equal(ids.length, 40);
    for (let index = 0; index < 20; index++) {
      // Each append's items stay together, in their order.
      assert.equal(ids.indexOf(`msg_${index}_b`), ids.indexOf(`msg_${index}_a`) + 1);
    }
  },
);
