/**
 * Many Spark instances on one Postgres, as operators run them: real `spark serve` child processes
 * with `--store postgres://…` and one key file, a real private PostgreSQL server (see
 * `helpers/postgres.ts`), real HTTP, SSE and WebSocket clients. A chain continues on whichever
 * instance a turn lands on, one key never sees another's responses on any instance, instances
 * restart (SIGTERM and SIGKILL) and migrate without racing, and a database restart under running
 * instances gives clean errors and then works again.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { after, before, test } from "node:test";
import pg from "pg";
import {
  dir,
  file,
  readSse,
  runToExit,
  SAFETY_TIMEOUT_MS,
  startScriptServe,
  stop,
  type Cli,
} from "./helpers/cli.js";
import { POSTGRES_SCHEMA_VERSION } from "../src/store/postgres-store.js";
import { POSTGRES_MISSING, TestPostgres } from "./helpers/postgres.js";
import { terminalOf, textOf, WsClient } from "./helpers/ws-client.js";

const skip = POSTGRES_MISSING ?? false;
const ANSWERS = ["One.", "Two.", "Three.", "Four.", "Five.", "Six.", "Seven.", "Eight.", "Nine."];
const SCRIPT = file(
  "instances.jsonl",
  ANSWERS.map((text) => JSON.stringify({ output: [{ type: "message", text }] })).join("\n") + "\n",
);

let postgres: TestPostgres;
const keys: Record<string, string> = {};
let keyFile: string;
let databases = 0;

before(async () => {
  if (skip) return;
  postgres = await TestPostgres.start();
  keyFile = join(dir, `instances-keys-${randomUUID()}.json`);
  for (const name of ["alice", "bob"]) {
    const created = await runToExit(["keys", "create", "--name", name, "--key-file", keyFile]);
    assert.equal(created.code, 0, created.stderr);
    keys[name] = created.stdout.trim();
  }
});
after(() => postgres?.destroy());

type Instance = Cli & { url: string };

/** A Spark instance on `store` with the test's key file. */
function serve(store: string, extra: readonly string[] = []): Promise<Instance> {
  return startScriptServe(SCRIPT, ["--store", store, "--key-file", keyFile, ...extra]);
}

/** A database of the test's own (every test starts on an empty one): its name and URL. */
async function freshDatabase(): Promise<{ database: string; url: string }> {
  const database = `instances_${++databases}`;
  return { database, url: await postgres.createDatabase(database) };
}

interface Body {
  id: string;
  status: string;
  output: { id: string; content?: { text: string }[] }[];
  error?: { code: string; message: string };
}

async function api(
  url: string,
  method: string,
  path: string,
  key: string,
  body?: unknown,
): Promise<{ status: number; headers: Headers; body: Body }> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, headers: response.headers, body: (await response.json()) as Body };
}

function textOfBody(body: Body): string {
  return body.output.map((item) => item.content?.map((part) => part.text).join("") ?? "").join("");
}

/** POST /v1/responses on `url` as `key`, asserting 200; the response. */
async function turn(url: string, key: string, body: object): Promise<Body> {
  const answer = await api(url, "POST", "/v1/responses", key, { model: "spark", ...body });
  assert.equal(answer.status, 200, JSON.stringify(answer.body));
  return answer.body;
}

function connect(url: string, key: string): Promise<WsClient> {
  return WsClient.connect(url, { headers: { authorization: `Bearer ${key}` } });
}

/** Every migration step's version, once each. */
const ALL_VERSIONS = Array.from({ length: POSTGRES_SCHEMA_VERSION }, (_, index) => index + 1);

async function schemaVersions(database: string): Promise<number[]> {
  const rows = await postgres.sql<{ version: number }>(
    "SELECT version FROM spark_schema_version ORDER BY version",
    [],
    database,
  );
  return rows.map((row) => row.version);
}

test(
  "two instances on one Postgres: a chain continues on either, over HTTP and WebSocket, and a key sees only its own",
  { skip },
  async () => {
    const { database, url } = await freshDatabase();
    // Both start together on an empty database: one migrates, the other waits for it.
    const [a, b] = await Promise.all([serve(url), serve(url)]);
    assert.deepEqual(await schemaVersions(database), ALL_VERSIONS);
    const alice = keys.alice!;
    const bob = keys.bob!;
    try {
      const first = await turn(a.url, alice, { input: "start on A" });
      assert.equal(textOfBody(first), "One.");
      const second = await turn(b.url, alice, { input: "continue on B", previous_response_id: first.id });
      assert.equal(textOfBody(second), "Two.", "B read A's turn from the shared store");
      const third = await turn(a.url, alice, { input: "back on A", previous_response_id: second.id });
      assert.equal(textOfBody(third), "Three.");
      assert.equal((await api(b.url, "GET", `/v1/responses/${first.id}`, alice)).body.id, first.id);

      // WebSocket: a new connection on B continues A's HTTP response; A continues B's WebSocket one.
      const onB = await connect(b.url, alice);
      const fourth = await onB.turn({
        model: "spark",
        input: "over WebSocket on B",
        previous_response_id: third.id,
      });
      assert.equal(textOf(fourth), "Four.");
      const fourthId = terminalOf(fourth).response.id;
      const onA = await connect(a.url, alice);
      const fifth = await onA.turn({
        model: "spark",
        input: "over WebSocket on A",
        previous_response_id: fourthId,
      });
      assert.equal(textOf(fifth), "Five.");
      // item_reference across instances: B's output item, referenced on A.
      const referenced = await turn(a.url, alice, {
        input: [
          { type: "item_reference", id: second.output[0]!.id },
          { role: "user", content: "and?" },
        ],
      });
      assert.equal(textOfBody(referenced), "Two.");
      onA.socket.close();
      onB.socket.close();

      // Bob cannot read, continue, reference or delete Alice's responses, on either instance.
      for (const instance of [a, b]) {
        assert.equal((await api(instance.url, "GET", `/v1/responses/${first.id}`, bob)).status, 404);
        assert.equal((await api(instance.url, "DELETE", `/v1/responses/${first.id}`, bob)).status, 404);
        const hijack = await api(instance.url, "POST", "/v1/responses", bob, {
          model: "spark",
          input: "tell me",
          previous_response_id: third.id,
        });
        assert.equal(hijack.status, 400);
        assert.equal(hijack.body.error?.code, "previous_response_not_found");
        const reference = await api(instance.url, "POST", "/v1/responses", bob, {
          model: "spark",
          input: [{ type: "item_reference", id: first.output[0]!.id }],
        });
        assert.equal(reference.body.error?.code, "item_not_found");
        const bobsSocket = await connect(instance.url, bob);
        bobsSocket.send({
          type: "response.create",
          model: "spark",
          input: "x",
          previous_response_id: third.id,
        });
        const refused = await bobsSocket.waitForType("error");
        assert.equal((refused.error as { code: string }).code, "previous_response_not_found");
        bobsSocket.socket.close();
      }
      const bobs = await turn(b.url, bob, { input: "bob's own" });
      assert.equal((await api(a.url, "GET", `/v1/responses/${bobs.id}`, bob)).status, 200);
      assert.equal((await api(a.url, "GET", `/v1/responses/${bobs.id}`, alice)).status, 404);

      // A delete on A is seen at once on B (no instance caches a response).
      assert.equal((await api(a.url, "DELETE", `/v1/responses/${first.id}`, alice)).status, 200);
      assert.equal((await api(b.url, "GET", `/v1/responses/${first.id}`, alice)).status, 404);
      const broken = await api(b.url, "POST", "/v1/responses", alice, {
        model: "spark",
        input: "more",
        previous_response_id: third.id,
      });
      assert.equal(broken.status, 400);
      assert.equal(broken.body.error?.code, "previous_response_not_found");
    } finally {
      await Promise.all([stop(a), stop(b)]);
    }
  },
);

test(
  "either instance restarts (SIGTERM, then SIGKILL) and the chain goes on; a second start migrates nothing",
  { skip },
  async () => {
    const { database, url } = await freshDatabase();
    const alice = keys.alice!;
    let a = await serve(url);
    let b = await serve(url);
    try {
      const first = await turn(a.url, alice, { input: "start" });
      assert.equal(await stop(a), 0, a.stderr());
      a = await serve(url);
      const second = await turn(a.url, alice, { input: "after A restarted", previous_response_id: first.id });
      assert.equal(textOfBody(second), "Two.");
      const third = await turn(b.url, alice, { input: "on B", previous_response_id: second.id });
      assert.equal(textOfBody(third), "Three.");
      // B dies without a chance to clean up; its acknowledged responses are in Postgres.
      await stop(b, "SIGKILL");
      b = await serve(url);
      const fourth = await turn(b.url, alice, {
        input: "after B was killed",
        previous_response_id: third.id,
      });
      assert.equal(textOfBody(fourth), "Four.");
      const fifth = await turn(a.url, alice, { input: "and A again", previous_response_id: fourth.id });
      assert.equal(textOfBody(fifth), "Five.");
      assert.deepEqual(await schemaVersions(database), ALL_VERSIONS, "restarts run no migration twice");
    } finally {
      await Promise.all([stop(a), stop(b)]);
    }
  },
);

test(
  "Postgres restarts under running instances: clean errors while it is down, then the next requests work",
  { skip },
  async () => {
    const { url } = await freshDatabase();
    const alice = keys.alice!;
    const a = await serve(url);
    const b = await serve(url);
    try {
      const first = await turn(a.url, alice, { input: "start" });

      // A restart between two requests is invisible: the pools reconnect.
      postgres.restart();
      const second = await turn(b.url, alice, { input: "after a restart", previous_response_id: first.id });
      assert.equal(textOfBody(second), "Two.");

      postgres.stop("fast");
      try {
        // Continuing needs the store: refused before anything is sent, with a retry hint.
        const continued = await api(a.url, "POST", "/v1/responses", alice, {
          model: "spark",
          input: "while it is down",
          previous_response_id: second.id,
          stream: true,
        });
        assert.equal(continued.status, 503);
        assert.equal(continued.headers.get("retry-after"), "1");
        assert.equal(continued.body.error?.code, "store_unavailable");
        assert.equal(
          (await api(b.url, "GET", `/v1/responses/${first.id}`, alice)).body.error?.code,
          "store_unavailable",
        );
        // A new stored response runs, but cannot be acknowledged: it fails with store_write_failed.
        const unstored = await api(b.url, "POST", "/v1/responses", alice, { model: "spark", input: "new" });
        assert.equal(unstored.status, 503);
        assert.equal(unstored.body.error?.code, "store_write_failed");
        assert.match(unstored.body.error?.message ?? "", /cannot be reached/);
        const streamed = await fetch(`${a.url}/v1/responses`, {
          method: "POST",
          headers: { authorization: `Bearer ${alice}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "spark", input: "streamed", stream: true }),
        });
        const { events } = await readSse(streamed);
        const terminal = events.at(-1)!;
        assert.equal(terminal.type, "response.failed");
        assert.equal((terminal.data.response as Body).error?.code, "store_write_failed");
        const socket = await connect(b.url, alice);
        const failed = terminalOf(await socket.turn({ model: "spark", input: "over WebSocket" }));
        assert.equal(failed.type, "response.failed");
        assert.equal((failed.response as unknown as Body).error?.code, "store_write_failed");
        // What needs no store still works.
        const unsaved = terminalOf(await socket.turn({ model: "spark", input: "unsaved", store: false }));
        assert.equal(unsaved.type, "response.completed");
        socket.socket.close();
        assert.equal((await fetch(`${a.url}/healthz`)).status, 200);
      } finally {
        postgres.restart();
      }
      const third = await turn(a.url, alice, { input: "it is back", previous_response_id: second.id });
      assert.equal(textOfBody(third), "Three.");
      const fourth = await turn(b.url, alice, { input: "on B too", previous_response_id: third.id });
      assert.equal(textOfBody(fourth), "Four.");
      assert.equal(await stop(a), 0, a.stderr());
      assert.equal(await stop(b), 0, b.stderr());
    } finally {
      await Promise.all([stop(a), stop(b)]);
    }
  },
);

test(
  "a table locked by another client: GET, POST, continuations and SSE answer (503, response.failed), the pool does not fill, /healthz says degraded",
  { skip },
  async () => {
    const { url } = await freshDatabase();
    const alice = keys.alice!;
    const instance = await serve(url, ["--store-timeout", "1"]);
    const headers = { authorization: `Bearer ${alice}`, "content-type": "application/json" };
    const send = (method: string, path: string, body?: object) =>
      fetch(`${instance.url}${path}`, {
        method,
        headers,
        ...(body ? { body: JSON.stringify({ model: "spark", ...body }) } : {}),
        signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
      });
    const errorOf = async (response: Response) => {
      const body = (await response.json()) as { error: { type: string; code: string; message: string } };
      return { status: response.status, retry: response.headers.get("retry-after"), ...body.error };
    };
    const health = async () =>
      (await (
        await fetch(`${instance.url}/healthz`, { signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS) })
      ).json()) as {
        status: string;
        store?: { status: string; detail: string };
      };
    const first = await turn(instance.url, alice, { input: "before the lock" });
    assert.equal((await health()).store?.status, "ok");

    const locker = new pg.Client({ connectionString: url });
    await locker.connect();
    try {
      await locker.query("BEGIN");
      await locker.query("LOCK TABLE spark_responses IN ACCESS EXCLUSIVE MODE");

      // More requests at once than the pool has connections: every one answers.
      const gets = await Promise.all(
        Array.from({ length: 15 }, async () => errorOf(await send("GET", `/v1/responses/${first.id}`))),
      );
      for (const error of gets) {
        assert.equal(error.status, 503, JSON.stringify(error));
        assert.equal(error.type, "service_unavailable_error");
        assert.equal(error.code, "store_unavailable");
        assert.equal(error.retry, "1");
        assert.match(error.message, /did not answer in time/);
      }
      const continued = await errorOf(
        await send("POST", "/v1/responses", {
          input: "continue",
          previous_response_id: first.id,
          stream: true,
        }),
      );
      assert.equal(continued.status, 503);
      assert.equal(continued.code, "store_unavailable");
      const posted = await errorOf(await send("POST", "/v1/responses", { input: "new" }));
      assert.equal(posted.status, 503);
      assert.equal(posted.code, "store_write_failed");
      // The stream runs, then ends with its terminal event: the write that could not be made.
      const { events, trailing } = await readSse(
        await send("POST", "/v1/responses", { input: "streamed", stream: true }),
      );
      assert.equal(trailing, "");
      assert.equal(events.at(-1)?.type, "response.failed", events.map((e) => e.type).join(", "));
      assert.equal((events.at(-1)!.data.response as Body).error?.code, "store_write_failed");
      // Unstored responses need no table.
      assert.equal((await turn(instance.url, alice, { input: "unsaved", store: false })).status, "completed");
      const degraded = await health();
      assert.equal(degraded.status, "degraded");
      assert.equal(degraded.store?.status, "degraded");
    } finally {
      await locker.query("ROLLBACK").catch(() => {});
      await locker.end();
    }

    // The lock gone, everything works again (a health probe that began under the lock may still
    // answer "degraded": /healthz is asked until it is ok).
    const deadline = Date.now() + SAFETY_TIMEOUT_MS;
    for (let healthy = await health(); healthy.status !== "ok"; healthy = await health()) {
      assert.ok(Date.now() < deadline, JSON.stringify(healthy));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const read = await send("GET", `/v1/responses/${first.id}`);
    assert.equal(read.status, 200);
    const second = await turn(instance.url, alice, {
      input: "after the lock",
      previous_response_id: first.id,
    });
    assert.equal(second.status, "completed");
    assert.equal(await stop(instance), 0, instance.stderr());
  },
);

test("spark serve names a database it cannot reach, without its password, and exits", { skip }, async () => {
  const url = `postgres://spark:hunter2@127.0.0.1:${postgres.port}/no_such_database`;
  const run = await runToExit([
    "serve",
    "--engine",
    "script",
    "--script",
    SCRIPT,
    "--port",
    "0",
    "--store",
    url,
  ]);
  assert.notEqual(run.code, 0);
  assert.match(
    run.stderr,
    /Cannot use the response database postgres:\/\/spark:\*\*\*@127\.0\.0\.1:\d+\/no_such_database/,
  );
  assert.match(run.stderr, /3D000: database "no_such_database" does not exist/);
  assert.doesNotMatch(run.stderr, /hunter2/);
  const bad = await runToExit([
    "serve",
    "--engine",
    "script",
    "--script",
    SCRIPT,
    "--port",
    "0",
    "--store",
    "mysql://x",
  ]);
  assert.notEqual(bad.code, 0);
  assert.match(bad.stderr, /must be sqlite, memory or a postgres:\/\//);
});
