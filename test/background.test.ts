/**
 * Background responses and resumable streams through the real `openai` SDK against a real server
 * on port 0 (script engine behind; `HeldEngine` holds a generation mid-answer so a test acts on it
 * while it certainly runs): `background: true` answers at once, GET follows it, cancel is idempotent
 * and ends it `cancelled`, `GET …?stream=true&starting_after=N` resumes background and stored
 * streaming responses exactly, limits and the queue apply, a shutdown stores it `incomplete` and a
 * server killed with SIGKILL ends it `failed` when it starts again (SQLite, `spark serve`).
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import Database from "better-sqlite3";
import OpenAI from "openai";
import type { Response, ResponseStreamEvent } from "openai/resources/responses/responses";
import { generateKey, KeyRing } from "../src/core/keys.js";
import { MemoryResponseStore, type ResponseStore } from "../src/core/response-store.js";
import { SparkServer } from "../src/server/http-server.js";
import { DATABASE_FILE, SqliteResponseStore } from "../src/store/sqlite-store.js";
import { freshDir, spawnCli, waitForStdout } from "./helpers/cli.js";
import { HeldEngine } from "./helpers/held-engine.js";
import { collectEvents, outputText, pollUntil } from "./helpers/openai-api.js";

// Words of at most four characters: the script engine streams each as one piece.
const WORDS = Array.from({ length: 40 }, (_, i) => `w${i}`);
const TEXT = WORDS.join(" ");
const servers: SparkServer[] = [];

after(async () => {
  await Promise.all(servers.map((server) => server.close()));
});

async function start(
  engine: HeldEngine,
  options: { store?: ResponseStore; capacity?: number; keys?: KeyRing } = {},
): Promise<{ server: SparkServer; openai: OpenAI }> {
  const server = new SparkServer({
    engine,
    port: 0,
    ...(options.capacity !== undefined ? { capacity: options.capacity } : {}),
    ...(options.store ? { store: options.store } : {}),
    ...(options.keys ? { keys: options.keys } : {}),
  });
  servers.push(server);
  await server.listen();
  return { server, openai: sdk(server.url) };
}

function sdk(url: string, apiKey = "unused"): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0 });
}

function deltas(events: readonly ResponseStreamEvent[]): string {
  return events.map((event) => (event.type === "response.output_text.delta" ? event.delta : "")).join("");
}

const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);

describe("background responses", () => {
  test("background: true answers at once; GET shows the output so far; the response completes on its own", async () => {
    const engine = new HeldEngine(TEXT, 5);
    const { openai } = await start(engine);
    const held = engine.holding();
    const created = await openai.responses.create({ model: "spark", input: "Count.", background: true });
    assert.equal(created.status, "in_progress");
    assert.equal(created.background, true);
    assert.deepEqual(created.output, []);
    await held;
    const progress = await pollUntil(
      () => openai.responses.retrieve(created.id),
      (response) => outputText(response).split(" ").length >= 5,
      "the first five words",
    );
    assert.equal(progress.status, "in_progress");
    assert.equal(outputText(progress), WORDS.slice(0, 5).join(" "));
    engine.release();
    const done = await pollUntil(
      () => openai.responses.retrieve(created.id),
      (response) => response.status !== "in_progress",
      "the end",
    );
    assert.equal(done.status, "completed");
    assert.equal(done.output_text, TEXT);
    assert.equal(done.background, true);
    assert.ok(typeof done.completed_at === "number" && done.completed_at >= created.created_at);
    const items = await openai.responses.inputItems.list(created.id);
    assert.equal(items.data.length, 1);
  });

  test("cancel ends it cancelled with the output so far, is idempotent, and only for background responses", async () => {
    const engine = new HeldEngine(TEXT, 3);
    const { openai } = await start(engine);
    const held = engine.holding();
    const created = await openai.responses.create({ model: "spark", input: "Count.", background: true });
    await held;
    const cancelled = await openai.responses.cancel(created.id);
    assert.equal(cancelled.status, "cancelled");
    assert.equal(cancelled.incomplete_details, null);
    assert.equal(outputText(cancelled), WORDS.slice(0, 3).join(" "));
    const again = await openai.responses.cancel(created.id);
    assert.deepEqual(again, cancelled);
    assert.equal((await openai.responses.retrieve(created.id)).status, "cancelled");
    // Its stream ends with the terminal event that says so.
    const events = await collectEvents(await openai.responses.retrieve(created.id, { stream: true }));
    const last = events.at(-1)!;
    assert.equal(last.type, "response.incomplete");
    assert.equal(last.type === "response.incomplete" && last.response.status, "cancelled");
    assert.equal(engine.started, 1, "nothing ran again");

    engine.release();
    const plain = await openai.responses.create({ model: "spark", input: "Plain." });
    await assert.rejects(openai.responses.cancel(plain.id), (error: InstanceType<typeof OpenAI.APIError>) => {
      assert.equal(error.status, 400);
      assert.match(error.message, /only background responses can be cancelled/);
      return true;
    });
    await assert.rejects(
      openai.responses.cancel("resp_missing"),
      (error: InstanceType<typeof OpenAI.APIError>) => error.status === 404,
    );
  });

  test("a background stream survives its client; starting_after resumes it exactly, live and after the end", async () => {
    const engine = new HeldEngine(TEXT, 10);
    const { openai } = await start(engine);
    const held = engine.holding();
    const stream = await openai.responses.create({
      model: "spark",
      input: "Count.",
      background: true,
      stream: true,
    });
    const seen: ResponseStreamEvent[] = [];
    for await (const event of stream) {
      seen.push(event);
      if (event.type === "response.output_text.delta" && deltas(seen).split(" ").length >= 4) break;
    }
    await held;
    const id = seen[0]!.type === "response.created" ? seen[0]!.response.id : "";
    assert.equal((await openai.responses.retrieve(id)).status, "in_progress", "leaving did not stop it");
    const lastSeen = seen.at(-1)!.sequence_number;
    const resumed = collectEvents(
      await openai.responses.retrieve(id, { stream: true, starting_after: lastSeen }),
    );
    engine.release();
    const rest = await resumed;
    assert.equal(rest[0]!.sequence_number, lastSeen + 1);
    const all = [...seen, ...rest];
    assert.deepEqual(
      all.map((event) => event.sequence_number),
      all.map((_, index) => index),
    );
    assert.equal(deltas(all), TEXT);
    assert.equal(rest.filter((event) => TERMINAL.has(event.type)).length, 1);
    assert.equal(rest.at(-1)!.type, "response.completed");

    // After the end: the same events again, from the store.
    const replay = await collectEvents(
      await openai.responses.retrieve(id, { stream: true, starting_after: 2 }),
    );
    assert.deepEqual(replay, all.slice(3));
  });

  test("a stored streaming response can be streamed again from any sequence number; others cannot", async () => {
    const engine = new HeldEngine(TEXT, 1000);
    const { openai } = await start(engine);
    const original = await collectEvents(
      await openai.responses.create({ model: "spark", input: "Count.", stream: true }),
    );
    const id = original[0]!.type === "response.created" ? original[0]!.response.id : "";
    assert.deepEqual(await collectEvents(await openai.responses.retrieve(id, { stream: true })), original);
    assert.deepEqual(
      await collectEvents(await openai.responses.retrieve(id, { stream: true, starting_after: 7 })),
      original.slice(8),
    );

    const plain = await openai.responses.create({ model: "spark", input: "Plain." });
    await assert.rejects(
      async () => collectEvents(await openai.responses.retrieve(plain.id, { stream: true })),
      (error: InstanceType<typeof OpenAI.APIError>) =>
        error.status === 400 && (error.error as { param?: string }).param === "stream",
    );
    const unstored = await collectEvents(
      await openai.responses.create({ model: "spark", input: "Gone.", stream: true, store: false }),
    );
    const unstoredId = unstored[0]!.type === "response.created" ? unstored[0]!.response.id : "";
    await assert.rejects(
      openai.responses.retrieve(unstoredId),
      (error: InstanceType<typeof OpenAI.APIError>) => error.status === 404,
    );
    for (const bad of ["-1", "x", "1.5"]) {
      const response = await fetch(`${openai.baseURL}/responses/${id}?stream=true&starting_after=${bad}`);
      assert.equal(response.status, 400);
      assert.equal(((await response.json()) as { error: { param: string } }).error.param, "starting_after");
    }
  });

  test("background needs store; it queues behind the engine's capacity and the key's limits apply", async () => {
    const alice = generateKey();
    const engine = new HeldEngine(TEXT, 2);
    const { openai: anonymous, server } = await start(engine, {
      capacity: 1,
      keys: new KeyRing([{ id: "alice", hash: alice.hash }], { spark: { concurrent: 2 } }),
    });
    void anonymous;
    const openai = sdk(server.url, alice.key);
    await assert.rejects(
      openai.responses.create({ model: "spark", input: "x", background: true, store: false }),
      (error: InstanceType<typeof OpenAI.APIError>) =>
        error.status === 400 && (error.error as { param?: string }).param === "store",
    );
    const held = engine.holding();
    const first = await openai.responses.create({ model: "spark", input: "first", background: true });
    await held;
    const second = await openai.responses.create({ model: "spark", input: "second", background: true });
    assert.equal(second.status, "queued");
    assert.equal((await openai.responses.retrieve(second.id)).status, "queued");
    await assert.rejects(
      openai.responses.create({ model: "spark", input: "third", background: true }),
      (error: InstanceType<typeof OpenAI.APIError>) => error.status === 429,
    );
    engine.release();
    for (const id of [first.id, second.id]) {
      const done = await pollUntil(
        () => openai.responses.retrieve(id),
        (r) => r.status === "completed",
        id,
      );
      assert.equal(done.output_text, TEXT);
    }
  });

  test("another key's background response is not found for GET, cancel, stream, input items or delete", async () => {
    const alice = generateKey();
    const bob = generateKey();
    const engine = new HeldEngine(TEXT, 2);
    const { server } = await start(engine, {
      keys: new KeyRing([
        { id: "alice", hash: alice.hash },
        { id: "bob", hash: bob.hash },
      ]),
    });
    const held = engine.holding();
    const created = await sdk(server.url, alice.key).responses.create({
      model: "spark",
      input: "x",
      background: true,
    });
    await held;
    const other = sdk(server.url, bob.key);
    const notFound = (error: InstanceType<typeof OpenAI.APIError>): boolean => error.status === 404;
    await assert.rejects(other.responses.retrieve(created.id), notFound);
    await assert.rejects(other.responses.cancel(created.id), notFound);
    await assert.rejects(other.responses.retrieve(created.id, { stream: true }), notFound);
    await assert.rejects(other.responses.inputItems.list(created.id), notFound);
    await assert.rejects(other.responses.delete(created.id), notFound);
    // Deleting a running one cancels it first.
    await sdk(server.url, alice.key).responses.delete(created.id);
    await assert.rejects(sdk(server.url, alice.key).responses.retrieve(created.id), notFound);
  });

  test("a shutdown stores a running background response incomplete (server_shutdown); it reads back after a restart", async () => {
    const dataDir = freshDir("bg-data-");
    const engine = new HeldEngine(TEXT, 4);
    const { server, openai } = await start(engine, { store: SqliteResponseStore.open(dataDir) });
    const held = engine.holding();
    const created = await openai.responses.create({ model: "spark", input: "x", background: true });
    await held;
    await server.close();
    servers.splice(servers.indexOf(server), 1);
    const again = await start(new HeldEngine(TEXT, 1000), { store: SqliteResponseStore.open(dataDir) });
    const stored = await again.openai.responses.retrieve(created.id);
    assert.equal(stored.status, "incomplete");
    assert.equal(stored.incomplete_details?.reason as string, "server_shutdown");
    assert.equal(outputText(stored), WORDS.slice(0, 4).join(" "));
  });

  test("a drain lets a running background response finish; one still running when it ends is handed back incomplete", async () => {
    const dataDir = freshDir("bg-drain-");
    const finishing = new HeldEngine(TEXT, 3);
    const first = await start(finishing, { store: SqliteResponseStore.open(dataDir) });
    let held = finishing.holding();
    const done = await first.openai.responses.create({ model: "spark", input: "x", background: true });
    await held;
    const draining = first.server.drain(120_000);
    finishing.release();
    await draining;
    servers.splice(servers.indexOf(first.server), 1);

    const stuck = new HeldEngine(TEXT, 3);
    const second = await start(stuck, { store: SqliteResponseStore.open(dataDir) });
    held = stuck.holding();
    const cut = await second.openai.responses.create({ model: "spark", input: "x", background: true });
    await held;
    await second.server.drain(100);
    servers.splice(servers.indexOf(second.server), 1);

    const store = SqliteResponseStore.open(dataDir);
    try {
      assert.equal(store.get(done.id, "anonymous")?.response.status, "completed");
      const handedBack = store.get(cut.id, "anonymous")?.response;
      assert.equal(handedBack?.status, "incomplete");
      assert.equal(handedBack?.incomplete_details?.reason, "server_shutdown");
    } finally {
      store.close();
    }
  });

  test("an instance's own handBackBackground() stops its runs and answers how many (for a drain's end)", async () => {
    const engine = new HeldEngine(TEXT, 2);
    const { server, openai } = await start(engine, { store: new MemoryResponseStore() });
    const held = engine.holding();
    const created = await openai.responses.create({ model: "spark", input: "x", background: true });
    await held;
    assert.equal(await server.handBackBackground(), 1);
    const stored = await openai.responses.retrieve(created.id);
    assert.equal(stored.status, "incomplete");
    assert.equal(await server.handBackBackground(), 0);
  });
});

test("spark serve killed with SIGKILL: started again, it ends its unfinished background response failed", async () => {
  const dataDir = freshDir("bg-kill-");
  const script = join(freshDir("bg-script-"), "script.jsonl");
  writeFileSync(
    script,
    JSON.stringify({ output: [{ type: "message", text: `${TEXT} ${TEXT} ${TEXT}` }] }) + "\n",
  );
  const args = ["serve", "--engine", "script", "--script", script, "--rate", "20", "--port", "0"];
  const env = { SPARK_DATA_DIR: dataDir };
  const first = spawnCli(args, env);
  await waitForStdout(first, /listening on/);
  const url = /listening on (\S+)/.exec(first.stdout())![1]!;
  const openai = sdk(url);
  const created = await openai.responses.create({ model: "spark", input: "x", background: true });
  // Some output reached the store (progress is written as it goes): read the database itself.
  const db = new Database(join(dataDir, DATABASE_FILE), { readonly: true });
  const stored = await pollUntil(
    async () =>
      db.prepare<[string], { response: string }>("SELECT response FROM runs WHERE id = ?").get(created.id),
    (row) => row !== undefined && outputText(JSON.parse(row.response) as Response).split(" ").length >= 3,
    "output in the store before the kill",
  );
  db.close();
  const before = outputText(JSON.parse(stored!.response) as Response);
  first.child.kill("SIGKILL");
  await first.exited;

  const second = spawnCli(args, env);
  await waitForStdout(second, /listening on/);
  const url2 = /listening on (\S+)/.exec(second.stdout())![1]!;
  const failed = await sdk(url2).responses.retrieve(created.id);
  assert.equal(failed.status, "failed");
  assert.equal(failed.error?.code as string, "server_restarted");
  assert.ok(outputText(failed).startsWith(before), `${outputText(failed)} starts with ${before}`);
  const events = await collectEvents(await sdk(url2).responses.retrieve(created.id, { stream: true }));
  assert.equal(events.at(-1)!.type, "response.failed");
  assert.deepEqual(
    events.map((event) => event.sequence_number),
    events.map((_, index) => index),
  );
  second.child.kill("SIGTERM");
  await second.exited;
});
