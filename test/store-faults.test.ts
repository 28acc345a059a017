/**
 * The response store on a full disk: a real 1 MiB tmpfs as the data directory, filled with a real
 * file while a real `spark serve` runs. A response that cannot be stored must end with
 * `response.failed` (HTTP, SSE, WebSocket), the server must stay up, what was stored before must stay
 * intact, and writes must work again once space is freed. Mounting needs root (as in CI); without it
 * these tests skip and say so.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test, type TestContext } from "node:test";
import { StoreWriteError } from "../src/core/response-store.js";
import { SqliteResponseStore } from "../src/store/sqlite-store.js";
import { sampleRecord } from "./fixtures/store/records.js";
import {
  assertHealthy,
  file,
  readSse,
  SAFETY_TIMEOUT_MS,
  startServer,
  stop,
  type SseEvent,
} from "./helpers/cli.js";
import { terminalOf, textOf, WsClient, type ResponseShape } from "./helpers/ws-client.js";

const ANSWERS = ["Answer one.", "Answer two.", "Answer three."];
const SCRIPT = file(
  "store-faults.jsonl",
  ANSWERS.map((text) => JSON.stringify({ output: [{ type: "message", text }] })).join("\n") + "\n",
);

const mounts: string[] = [];
after(() => {
  for (const point of mounts) {
    try {
      execFileSync("umount", [point], { stdio: "pipe" });
    } catch {
      // Still busy (a server killed a moment ago): detach it now, freed when the last file closes.
      execFileSync("umount", ["--lazy", point], { stdio: "pipe" });
    }
    rmSync(point, { recursive: true, force: true });
  }
});

/** A fresh, empty 1 MiB tmpfs; undefined (the test skipped, saying why) where mounting is refused. */
function smallDisk(t: TestContext): string | undefined {
  const point = mkdtempSync(join(tmpdir(), "spark-small-disk-"));
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", point], { stdio: "pipe" });
  } catch (error) {
    rmSync(point, { recursive: true, force: true });
    const reason = (error as { stderr?: Buffer }).stderr?.toString().trim() || String(error);
    t.skip(`cannot mount a tmpfs here (needs root): ${reason}`);
    return undefined;
  }
  mounts.push(point);
  return point;
}

/** Fills the file system at `point` with one file until a write fails with ENOSPC; returns the file. */
function fill(point: string): string {
  const path = join(point, "filler");
  const fd = openSync(path, "w");
  const chunk = Buffer.alloc(4096, 0x2a);
  try {
    for (;;) writeSync(fd, chunk);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOSPC") throw error;
  } finally {
    closeSync(fd);
  }
  return path;
}

interface ErrorBody {
  error: { type: string; code: string; message: string };
}

async function post(url: string, body: object): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
  });
  return { status: response.status, body: await response.json() };
}

async function get(url: string, id: string): Promise<{ status: number; body: unknown }> {
  const response = await fetch(`${url}/v1/responses/${id}`, {
    signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
  });
  return { status: response.status, body: await response.json() };
}

async function streamed(url: string, body: object): Promise<{ events: SseEvent[]; trailing: string }> {
  const response = await fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true }),
    signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
  });
  assert.equal(response.status, 200);
  return readSse(response);
}

/** A `response.failed` for a store write on a full disk, saying so without naming any path. */
function assertStoreFull(response: { status: string; error?: unknown }, dataDir: string): void {
  assert.equal(response.status, "failed");
  const error = response.error as { code: string; message: string };
  assert.equal(error.code, "store_write_failed");
  assert.match(error.message, /data directory is full/);
  assert.match(error.message, /SQLITE_FULL/);
  assert.ok(!error.message.includes(dataDir), error.message);
}

test("a full data directory fails the response (WebSocket, SSE, HTTP), not the server; space freed, it writes again", async (t) => {
  const disk = smallDisk(t);
  if (disk === undefined) return;
  const dataDir = join(disk, "data");
  const server = await startServer([
    "serve",
    ...["--engine", "script", "--script", SCRIPT, "--port", "0", "--data-dir", dataDir],
  ]);

  // Acknowledged before the disk fills: one over HTTP, one over the WebSocket that carries on below.
  const stored = await post(server.url, { input: "stored over HTTP" });
  assert.equal(stored.status, 200, JSON.stringify(stored.body));
  const storedHttp = stored.body as ResponseShape;
  const client = await WsClient.connect(server.url);
  const wsStored = terminalOf(await client.turn({ input: "stored over WebSocket" })).response;
  assert.equal(wsStored.status, "completed");

  const filler = fill(disk);

  // WebSocket: the response streams, then ends with exactly one terminal event, response.failed.
  const failedEvents = await client.turn({ previous_response_id: wsStored.id, input: "on a full disk" });
  assert.equal(textOf(failedEvents), "Answer two.");
  const terminals = failedEvents.filter((e) => /^response\.(completed|incomplete|failed)$/.test(e.type));
  assert.deepEqual(
    terminals.map((e) => e.type),
    ["response.failed"],
  );
  const wsFailed = terminalOf(failedEvents).response as ResponseShape & { error: unknown };
  assertStoreFull(wsFailed, dataDir);
  // generate: false (a prewarm) is stored too, so it fails the same way.
  const prewarm = await client.turn({ input: "", generate: false });
  assert.deepEqual(
    prewarm.map((e) => e.type),
    ["response.created", "response.failed"],
  );
  assertStoreFull(terminalOf(prewarm).response as ResponseShape & { error: unknown }, dataDir);

  // SSE: the stream ends with response.failed, on an event boundary.
  const sse = await streamed(server.url, { input: "streamed on a full disk" });
  assert.equal(sse.events.at(-1)?.type, "response.failed", sse.events.map((e) => e.type).join(", "));
  assert.equal(sse.trailing, "");
  const sseFailed = sse.events.at(-1)!.data.response as ResponseShape & { error: unknown };
  assertStoreFull(sseFailed, dataDir);

  // HTTP: a 507 with an OpenAI-shaped error body.
  const plain = await post(server.url, { input: "plain on a full disk" });
  assert.equal(plain.status, 507, JSON.stringify(plain.body));
  const plainError = (plain.body as ErrorBody).error;
  assert.equal(plainError.type, "server_error");
  assert.equal(plainError.code, "store_write_failed");
  assert.match(plainError.message, /data directory is full/);

  // The server is up, what it acknowledged is readable, and what failed was not stored.
  await assertHealthy(server.url);
  for (const response of [storedHttp, wsStored]) {
    const again = await get(server.url, response.id);
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.deepEqual(again.body, response);
  }
  for (const response of [wsFailed, sseFailed])
    assert.equal((await get(server.url, response.id)).status, 404);

  // Space freed: the same socket goes on, continuing the last response it stored.
  rmSync(filler);
  const recovered = await client.turn({ previous_response_id: wsStored.id, input: "after the cleanup" });
  const recoveredResponse = terminalOf(recovered).response;
  assert.equal(recoveredResponse.status, "completed");
  assert.equal(textOf(recovered), "Answer two.");
  await client.close();
  const plainAgain = await post(server.url, { input: "plain after the cleanup" });
  assert.equal(plainAgain.status, 200, JSON.stringify(plainAgain.body));
  assert.equal(await stop(server), 0, server.stderr());

  // All of it is on disk: a restarted server reads it back.
  const restarted = await startServer([
    "serve",
    ...["--engine", "script", "--script", SCRIPT, "--port", "0", "--data-dir", dataDir],
  ]);
  for (const response of [storedHttp, wsStored, recoveredResponse, plainAgain.body as ResponseShape]) {
    const again = await get(restarted.url, response.id);
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.deepEqual(again.body, response);
  }
  assert.equal(await stop(restarted), 0, restarted.stderr());
});

test("the store on a full disk: StoreWriteError, nothing lost, writes again once space is freed", (t) => {
  const disk = smallDisk(t);
  if (disk === undefined) return;
  const dataDir = join(disk, "data");
  const store = SqliteResponseStore.open(dataDir);
  for (let index = 0; index < 5; index++) store.put(sampleRecord(`resp_before_${index}`));
  const filler = fill(disk);

  for (const id of ["resp_full_0", "resp_full_1"]) {
    assert.throws(
      () => store.put(sampleRecord(id)),
      (error: unknown) => {
        assert.ok(error instanceof StoreWriteError, String(error));
        assert.equal(error.full, true);
        assert.equal(error.message, "SQLITE_FULL: database or disk is full");
        return true;
      },
    );
    assert.equal(store.get(id, "key_alice"), undefined);
  }
  // A delete needs room in the WAL too; it fails the same way and deletes nothing.
  assert.throws(() => store.delete("resp_before_0", "key_alice"), StoreWriteError);
  // Closing on a full disk cannot checkpoint; the WAL keeps the commits for the next open.
  store.close();

  const reopened = SqliteResponseStore.open(dataDir, { cacheBytes: 0 });
  for (let index = 0; index < 5; index++) {
    const id = `resp_before_${index}`;
    assert.deepEqual(reopened.get(id, "key_alice"), sampleRecord(id), id);
  }
  assert.equal(reopened.get("resp_full_0", "key_alice"), undefined);

  rmSync(filler);
  reopened.put(sampleRecord("resp_after"));
  assert.equal(reopened.delete("resp_before_0", "key_alice"), true);
  reopened.close();
  const again = SqliteResponseStore.open(dataDir, { cacheBytes: 0 });
  assert.deepEqual(again.get("resp_after", "key_alice"), sampleRecord("resp_after"));
  assert.equal(again.get("resp_before_0", "key_alice"), undefined);
  assert.deepEqual(again.get("resp_before_4", "key_alice"), sampleRecord("resp_before_4"));
  again.close();
});

test("a steered response whose store write fails hands its steer back (response.steer.failed, response_failed)", async (t) => {
  const disk = smallDisk(t);
  if (!disk) return;
  const script = file(
    "store-faults-steer.jsonl",
    JSON.stringify({ output: [{ type: "message", text: "word ".repeat(3000) }] }) + "\n",
  );
  const server = await startServer([
    "serve",
    "--engine",
    "script",
    "--script",
    script,
    "--rate",
    "300",
    "--port",
    "0",
    "--data-dir",
    disk,
  ]);
  try {
    fill(disk);
    const client = await WsClient.connect(server.url);
    client.send({ type: "response.create", input: "write a lot" });
    const created = await client.waitForType("response.created");
    const id = (created.response as { id: string }).id;
    await client.waitFor(
      () => client.events.filter((e) => e.type === "response.output_text.delta").length >= 5,
    );
    const from = client.events.length;
    client.send({ type: "response.steer", previous_response_id: id, input: "use tabs, not spaces" });
    await client.waitForType("response.steer.accepted", from);
    const failed = await client.waitForType("response.failed", from);
    assertStoreFull(failed.response as ResponseShape & { error: unknown }, disk);
    const handedBack = await client.waitForType("response.steer.failed", from);
    assert.equal((handedBack.error as { code: string }).code, "response_failed");
    assert.deepEqual(handedBack.steer, { previous_response_id: id, input: "use tabs, not spaces" });
    // Nothing to continue from: no successor starts.
    assert.equal(client.events.slice(from).filter((e) => e.type === "response.created").length, 0);
    await client.close();
    await assertHealthy(server.url);
  } finally {
    await stop(server);
  }
});
