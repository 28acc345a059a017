/**
 * The response store on a full disk: a real 1 MiB tmpfs as the data directory, filled with a real
 * file while a real `spark serve` runs. A response that cannot be stored must end with
 * `response.failed` (HTTP, SSE, WebSocket), the server must stay up, what was stored before must stay
 * intact, and writes must work again once space is freed. Mounting needs root (as in CI); without it
 * these tests skip and say so.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, rmSync, statfsSync, statSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test, type TestContext } from "node:test";
import { StoreWriteError, type StoredResponse } from "../src/core/response-store.js";
import { DATABASE_FILE, JOURNAL_SIZE_LIMIT, SqliteResponseStore } from "../src/store/sqlite-store.js";
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

/** A fresh, empty tmpfs (1 MiB by default); undefined (the test skipped, saying why) where mounting is refused. */
function smallDisk(t: TestContext, size = "1m"): string | undefined {
  const point = mkdtempSync(join(tmpdir(), "spark-small-disk-"));
  try {
    execFileSync("mount", ["-t", "tmpfs", "-o", `size=${size}`, "tmpfs", point], { stdio: "pipe" });
  } catch (error) {
    rmSync(point, { recursive: true, force: true });
    const reason = (error as { stderr?: Buffer }).stderr?.toString().trim() || String(error);
    t.skip(`cannot mount a tmpfs here (needs root): ${reason}`);
    return undefined;
  }
  mounts.push(point);
  return point;
}

/**
 * Fills the file system at `point` with one file until a write fails with ENOSPC; returns the file.
 * Called again, it grows the same file (a failed write gives back the room its WAL frames took).
 */
function fill(point: string): string {
  const path = join(point, "filler");
  const fd = openSync(path, "a");
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
  fill(disk);
  const prewarm = await client.turn({ input: "", generate: false });
  assert.deepEqual(
    prewarm.map((e) => e.type),
    ["response.created", "response.failed"],
  );
  assertStoreFull(terminalOf(prewarm).response as ResponseShape & { error: unknown }, dataDir);

  // SSE: the stream ends with response.failed, on an event boundary.
  fill(disk);
  const sse = await streamed(server.url, { input: "streamed on a full disk" });
  assert.equal(sse.events.at(-1)?.type, "response.failed", sse.events.map((e) => e.type).join(", "));
  assert.equal(sse.trailing, "");
  const sseFailed = sse.events.at(-1)!.data.response as ResponseShape & { error: unknown };
  assertStoreFull(sseFailed, dataDir);

  // HTTP: a 507 with an OpenAI-shaped error body.
  fill(disk);
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
    fill(disk);
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
  // A delete still works on the full disk (the store's reserve gives it room in the WAL).
  assert.equal(store.delete("resp_before_0", "key_alice"), true);
  store.close();

  const reopened = SqliteResponseStore.open(dataDir, { cacheBytes: 0 });
  for (let index = 1; index < 5; index++) {
    const id = `resp_before_${index}`;
    assert.deepEqual(reopened.get(id, "key_alice"), sampleRecord(id), id);
  }
  assert.equal(reopened.get("resp_before_0", "key_alice"), undefined);
  assert.equal(reopened.get("resp_full_0", "key_alice"), undefined);

  rmSync(filler);
  reopened.put(sampleRecord("resp_after"));
  assert.equal(reopened.delete("resp_before_1", "key_alice"), true);
  reopened.close();
  const again = SqliteResponseStore.open(dataDir, { cacheBytes: 0 });
  assert.deepEqual(again.get("resp_after", "key_alice"), sampleRecord("resp_after"));
  assert.equal(again.get("resp_before_0", "key_alice"), undefined);
  assert.equal(again.get("resp_before_1", "key_alice"), undefined);
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

/** A record with about 1.4 MB of text (0.7 MB of input, stored as input item and as its turn). */
function largeRecord(id: string): StoredResponse {
  const record = sampleRecord(id);
  const text = `${id} ${"0.7 MB of input ".repeat(43_750)}`;
  return {
    ...record,
    inputItems: [{ id: `in_${id}`, type: "message", role: "user", content: [{ type: "input_text", text }] }],
    items: [{ type: "message", role: "user", text }],
  };
}

test("an 8 MiB data dir: large responses do not leave the WAL filling the disk; a delete works when it is full and gives the space back", (t) => {
  const disk = smallDisk(t, "8m");
  if (disk === undefined) return;
  const dataDir = join(disk, "data");
  const store = SqliteResponseStore.open(dataDir);
  const stored: string[] = [];
  let refusal: unknown;
  for (let index = 0; index < 8 && refusal === undefined; index++) {
    const id = `resp_large_${index}`;
    try {
      store.put(largeRecord(id));
      stored.push(id);
    } catch (error) {
      refusal = error;
    }
    // Whatever happened, the WAL does not keep the space of a large write.
    assert.ok(statSync(join(dataDir, `${DATABASE_FILE}-wal`)).size <= JOURNAL_SIZE_LIMIT);
  }
  // Before the WAL was checkpointed, the fourth 1.4 MB record no longer fit in 8 MiB.
  assert.ok(stored.length >= 4, `stored ${stored.length}`);
  assert.ok(refusal instanceof StoreWriteError && refusal.full, String(refusal));

  // Full to the last byte: a delete still works, and its space goes back to the file system.
  const filler = fill(disk);
  assert.throws(() => store.put(sampleRecord("resp_small_full")), StoreWriteError);
  assert.equal(store.delete(stored[0]!, "key_alice"), true);
  assert.equal(store.delete(stored[1]!, "key_alice"), true);
  assert.ok(statfsSync(disk).bavail * statfsSync(disk).bsize > 1024 * 1024, "deleted pages freed");
  store.put(sampleRecord("resp_small_after"));
  store.close();

  // A restart on the still crowded disk opens, reads, deletes and writes.
  const reopened = SqliteResponseStore.open(dataDir, { cacheBytes: 0 });
  for (const id of stored.slice(2)) assert.deepEqual(reopened.get(id, "key_alice"), largeRecord(id), id);
  assert.equal(reopened.get(stored[0]!, "key_alice"), undefined);
  assert.deepEqual(reopened.get("resp_small_after", "key_alice"), sampleRecord("resp_small_after"));
  assert.equal(reopened.delete(stored[2]!, "key_alice"), true);
  reopened.put(largeRecord("resp_large_again"));
  rmSync(filler);
  reopened.close();
});

test("spark serve on an 8 MiB data dir: 0.7 MB responses until it is full (507), then DELETE answers 200 and responses are stored again", async (t) => {
  const disk = smallDisk(t, "8m");
  if (disk === undefined) return;
  const dataDir = join(disk, "data");
  const args = ["serve", "--engine", "script", "--script", SCRIPT, "--port", "0", "--data-dir", dataDir];
  const server = await startServer(args);
  const input = "0.7 MB of input ".repeat(43_750);
  const ids: string[] = [];
  let full: { status: number; body: unknown } | undefined;
  for (let index = 0; index < 8 && full === undefined; index++) {
    const answer = await post(server.url, { input: `${index} ${input}` });
    if (answer.status === 200) ids.push((answer.body as ResponseShape).id);
    else full = answer;
  }
  assert.ok(ids.length >= 4, `stored ${ids.length}`);
  assert.equal(full?.status, 507, JSON.stringify(full?.body));
  assert.equal((full?.body as ErrorBody).error.code, "store_write_failed");

  // Completely full: deleting still works, and frees the room a new response needs.
  const filler = fill(disk);
  for (const id of ids.slice(0, 2)) {
    const response = await fetch(`${server.url}/v1/responses/${id}`, {
      method: "DELETE",
      signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
    });
    assert.equal(response.status, 200, await response.text());
  }
  const after = await post(server.url, { input: "after the deletes" });
  assert.equal(after.status, 200, JSON.stringify(after.body));
  assert.equal(await stop(server), 0, server.stderr());

  // A restart on the crowded disk serves what is stored, and deletes.
  const restarted = await startServer(args);
  assert.equal((await get(restarted.url, ids[2]!)).status, 200);
  assert.equal((await get(restarted.url, ids[0]!)).status, 404);
  const deleted = await fetch(`${restarted.url}/v1/responses/${ids[2]}`, { method: "DELETE" });
  assert.equal(deleted.status, 200, await deleted.text());
  assert.equal(await stop(restarted), 0, restarted.stderr());
  rmSync(filler);
});
