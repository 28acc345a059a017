/**
 * The durable response store as users run it: real `spark serve` child processes on a real data
 * directory (`--data-dir`), real HTTP, SSE, WebSocket and the `openai` SDK, real SIGTERM and SIGKILL.
 * A stored response must come back after a restart (and after `kill -9` once its result was sent),
 * `store: false` must leave no trace on disk, and one key never sees another key's responses.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import OpenAI from "openai";
import {
  dir,
  file,
  readSse,
  runToExit,
  SAFETY_TIMEOUT_MS,
  startServer,
  stop,
  type Cli,
  type SseEvent,
} from "./helpers/cli.js";
import { terminalOf, textOf, WsClient, type ResponseShape } from "./helpers/ws-client.js";

// Line N answers the Nth model turn of a conversation, so a continued chain proves its history came back.
const ANSWERS = ["Answer one.", "Answer two.", "Answer three."];
const SCRIPT = file(
  "durable.jsonl",
  ANSWERS.map((text) => JSON.stringify({ output: [{ type: "message", text }] })).join("\n") + "\n",
);

let dataDirs = 0;
/** A data directory path that does not exist yet (the server creates it); removed with `dir`. */
function freshDataDir(): string {
  return join(dir, `durable-data-${++dataDirs}`);
}

function serve(
  dataDir: string,
  extra: readonly string[] = [],
  env: Record<string, string> = {},
): Promise<Cli & { url: string }> {
  return startServer(
    ["serve", "--engine", "script", "--script", SCRIPT, "--port", "0", "--data-dir", dataDir, ...extra],
    env,
  );
}

interface ApiResult<T = Record<string, unknown>> {
  status: number;
  headers: Headers;
  body: T;
}

interface ErrorBody {
  error: { code: string; type: string; message: string };
}

interface InputItem {
  id: string;
  type: string;
  role?: string;
  content?: { type: string; text: string }[];
}

interface InputItemList {
  object: string;
  data: InputItem[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

async function api<T = Record<string, unknown>>(
  url: string,
  method: string,
  path: string,
  options: { body?: unknown; key?: string } = {},
): Promise<ApiResult<T>> {
  const headers: Record<string, string> = {};
  if (options.body !== undefined) headers["content-type"] = "application/json";
  if (options.key !== undefined) headers.authorization = `Bearer ${options.key}`;
  const response = await fetch(`${url}${path}`, {
    method,
    headers,
    ...(options.body !== undefined ? { body: JSON.stringify(options.body) } : {}),
    signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
  });
  return { status: response.status, headers: response.headers, body: (await response.json()) as T };
}

function create(url: string, body: object, key?: string): Promise<ApiResult<ResponseShape>> {
  return api<ResponseShape>(url, "POST", "/v1/responses", { body, ...(key !== undefined ? { key } : {}) });
}

function outputText(response: Pick<ResponseShape, "output">): string {
  return response.output
    .filter((item) => item.type === "message")
    .flatMap((item) => item.content ?? [])
    .map((part) => part.text)
    .join("");
}

/**
 * POSTs a streaming create and reads its SSE events; `onEvent` may return true to stop reading
 * (the rest of the stream is abandoned).
 */
async function stream(
  url: string,
  body: object,
  onEvent: (event: SseEvent) => boolean | void = () => {},
): Promise<SseEvent[]> {
  const response = await fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ ...body, stream: true }),
    signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
  });
  assert.equal(response.status, 200);
  return (await readSse(response, onEvent)).events;
}

function completedOf(events: readonly SseEvent[]): ResponseShape {
  const completed = events.find((e) => e.type === "response.completed");
  assert.ok(completed, `no response.completed among: ${events.map((e) => e.type).join(", ")}`);
  return completed.data.response as ResponseShape;
}

/** Every byte of every file in the data directory (the database and any -wal / -shm file). */
function dataDirBytes(dataDir: string): { files: string[]; bytes: Buffer } {
  const files = readdirSync(dataDir).sort();
  return { files, bytes: Buffer.concat(files.map((name) => readFileSync(join(dataDir, name)))) };
}

function assertNotFound(result: ApiResult, code = "response_not_found"): void {
  assert.equal(result.status, 404, JSON.stringify(result.body));
  assert.equal((result.body as unknown as ErrorBody).error.code, code);
}

test("stored responses, their input items and chains survive a SIGTERM restart; deletes too", async () => {
  const dataDir = freshDataDir();
  const first = await serve(dataDir);

  const plain = await create(first.url, {
    store: true,
    input: [
      { role: "user", content: "first question" },
      { type: "message", role: "user", content: "second question" },
      { type: "message", role: "user", content: [{ type: "input_text", text: "third question" }] },
    ],
  });
  assert.equal(plain.status, 200, JSON.stringify(plain.body));
  assert.equal(plain.body.status, "completed");
  assert.equal(outputText(plain.body), "Answer one.");
  assert.ok(plain.body.usage && plain.body.usage.output_tokens > 0, "the response reports its usage");

  const streamedEvents = await stream(first.url, { store: true, input: "streamed question" });
  const streamed = completedOf(streamedEvents);
  assert.equal(outputText(streamed), "Answer one.");
  assert.equal(textOf(streamedEvents.map((e) => ({ ...e.data, type: e.type }))), "Answer one.");

  assert.equal(await stop(first), 0, first.stderr());

  const second = await serve(dataDir);
  // The whole response comes back as it was sent: output, usage, status, ids.
  const plainAgain = await api<ResponseShape>(second.url, "GET", `/v1/responses/${plain.body.id}`);
  assert.equal(plainAgain.status, 200, JSON.stringify(plainAgain.body));
  assert.deepEqual(plainAgain.body, plain.body);
  assert.equal(plainAgain.body.status, "completed");
  assert.deepEqual(plainAgain.body.usage, plain.body.usage);
  const streamedAgain = await api<ResponseShape>(second.url, "GET", `/v1/responses/${streamed.id}`);
  assert.equal(streamedAgain.status, 200, JSON.stringify(streamedAgain.body));
  assert.deepEqual(streamedAgain.body, streamed);

  // input_items: newest first by default, every item with an id and its content normalized.
  const items = await api<InputItemList>(second.url, "GET", `/v1/responses/${plain.body.id}/input_items`);
  assert.equal(items.status, 200, JSON.stringify(items.body));
  assert.equal(items.body.object, "list");
  assert.deepEqual(
    items.body.data.map((item) => [item.type, item.role, item.content]),
    ["third question", "second question", "first question"].map((text) => [
      "message",
      "user",
      [{ type: "input_text", text }],
    ]),
  );
  const ids = items.body.data.map((item) => item.id);
  assert.equal(new Set(ids).size, 3, `item ids must be distinct: ${ids.join(", ")}`);
  assert.equal(items.body.first_id, ids[0]);
  assert.equal(items.body.last_id, ids[2]);
  assert.equal(items.body.has_more, false);

  const ascending = await api<InputItemList>(
    second.url,
    "GET",
    `/v1/responses/${plain.body.id}/input_items?order=asc`,
  );
  assert.deepEqual(
    ascending.body.data.map((item) => item.id),
    [...ids].reverse(),
  );

  // Paging one at a time with `after` walks the same items in order and then says there are no more.
  const paged: string[] = [];
  const hasMore: boolean[] = [];
  let after: string | null = null;
  for (let page = 0; page < 3; page++) {
    const query: string = `order=asc&limit=1${after ? `&after=${after}` : ""}`;
    const result: ApiResult<InputItemList> = await api<InputItemList>(
      second.url,
      "GET",
      `/v1/responses/${plain.body.id}/input_items?${query}`,
    );
    assert.equal(result.status, 200, JSON.stringify(result.body));
    assert.equal(result.body.data.length, 1);
    assert.equal(result.body.first_id, result.body.data[0]!.id);
    assert.equal(result.body.last_id, result.body.data[0]!.id);
    paged.push(result.body.data[0]!.id);
    hasMore.push(result.body.has_more);
    after = result.body.last_id;
  }
  assert.deepEqual(paged, [...ids].reverse());
  assert.deepEqual(hasMore, [true, true, false]);

  const streamedItems = await api<InputItemList>(
    second.url,
    "GET",
    `/v1/responses/${streamed.id}/input_items`,
  );
  assert.deepEqual(
    streamedItems.body.data.map((item) => [item.type, item.role, item.content]),
    [["message", "user", [{ type: "input_text", text: "streamed question" }]]],
  );
  assert.equal(streamedItems.body.has_more, false);

  // Chains continue across the restart: the script answers with line 2, so the history came back.
  const continued = await create(second.url, { previous_response_id: plain.body.id, input: "and then?" });
  assert.equal(continued.status, 200, JSON.stringify(continued.body));
  assert.equal(continued.body.previous_response_id, plain.body.id);
  assert.equal(outputText(continued.body), "Answer two.");
  const openai = new OpenAI({ baseURL: `${second.url}/v1`, apiKey: "x", maxRetries: 0 });
  const continuedStreamed = await openai.responses.create({
    model: "spark",
    previous_response_id: streamed.id,
    input: "and then?",
  });
  assert.equal(continuedStreamed.output_text, "Answer two.");
  const retrieved = await openai.responses.retrieve(streamed.id);
  assert.equal(retrieved.output_text, "Answer one.");

  // DELETE: gone at once, input items too, and a second DELETE finds nothing.
  const deleted = await api(second.url, "DELETE", `/v1/responses/${plain.body.id}`);
  assert.equal(deleted.status, 200, JSON.stringify(deleted.body));
  assert.deepEqual(deleted.body, { id: plain.body.id, object: "response", deleted: true });
  assertNotFound(await api(second.url, "GET", `/v1/responses/${plain.body.id}`));
  assertNotFound(await api(second.url, "GET", `/v1/responses/${plain.body.id}/input_items`));
  assertNotFound(await api(second.url, "DELETE", `/v1/responses/${plain.body.id}`));
  assert.equal(await stop(second), 0, second.stderr());

  // After another restart the deleted response stays gone; the others remain. Its turn is gone
  // with it, so its successor can be read but no longer continued; other chains continue.
  const third = await serve(dataDir);
  assertNotFound(await api(third.url, "GET", `/v1/responses/${plain.body.id}`));
  const continuation = await create(third.url, { previous_response_id: plain.body.id, input: "more" });
  assert.equal(continuation.status, 400);
  assert.equal((continuation.body as unknown as ErrorBody).error.code, "previous_response_not_found");
  const kept = await api<ResponseShape>(third.url, "GET", `/v1/responses/${continued.body.id}`);
  assert.equal(kept.status, 200);
  assert.deepEqual(kept.body, continued.body);
  const orphan = await create(third.url, { previous_response_id: continued.body.id, input: "last" });
  assert.equal(orphan.status, 400, JSON.stringify(orphan.body));
  const orphanError = (orphan.body as unknown as ErrorBody).error;
  assert.equal(orphanError.code, "previous_response_not_found");
  assert.ok(orphanError.message.includes(`'${plain.body.id}', which was deleted`), orphanError.message);
  const chained = await create(third.url, { previous_response_id: continuedStreamed.id, input: "last" });
  assert.equal(chained.status, 200, JSON.stringify(chained.body));
  assert.equal(outputText(chained.body), "Answer three.");
  assert.equal((await api(third.url, "GET", `/v1/responses/${streamed.id}`)).status, 200);
  assert.equal(await stop(third), 0, third.stderr());
});

test("a response whose result was received survives kill -9 of the server", async () => {
  const dataDir = freshDataDir();

  // Non-streaming: SIGKILL as soon as the HTTP response has arrived.
  const first = await serve(dataDir);
  const plain = await create(first.url, { input: "killed after the body" });
  assert.equal(plain.status, 200, JSON.stringify(plain.body));
  assert.equal(await stop(first, "SIGKILL"), "SIGKILL");

  // Streaming: SIGKILL on the response.completed event, before the stream is read to its end.
  const second = await serve(dataDir);
  let killed = false;
  const events = await stream(second.url, { input: "killed after the event" }, (event) => {
    if (event.type !== "response.completed") return false;
    second.child.kill("SIGKILL");
    killed = true;
    return true;
  });
  assert.ok(killed, `no response.completed among: ${events.map((e) => e.type).join(", ")}`);
  const streamed = completedOf(events);
  assert.equal(await second.exited, "SIGKILL");

  const third = await serve(dataDir);
  for (const original of [plain.body, streamed]) {
    const again = await api<ResponseShape>(third.url, "GET", `/v1/responses/${original.id}`);
    assert.equal(again.status, 200, JSON.stringify(again.body));
    assert.deepEqual(again.body, original);
    const continued = await create(third.url, { previous_response_id: original.id, input: "go on" });
    assert.equal(continued.status, 200, JSON.stringify(continued.body));
    assert.equal(outputText(continued.body), "Answer two.");
  }
  assert.equal(await stop(third), 0, third.stderr());
});

test("store: false (HTTP, SSE, WebSocket) leaves no trace on disk; store: true does", async () => {
  const dataDir = freshDataDir();
  const server = await serve(dataDir);
  const unstored = { http: randomUUID(), sse: randomUUID(), ws: randomUUID() };
  const stored = randomUUID();

  const plain = await create(server.url, {
    store: false,
    instructions: `instructions ${unstored.http}`,
    input: `remember ${unstored.http}`,
  });
  assert.equal(plain.status, 200, JSON.stringify(plain.body));
  assert.equal((plain.body as unknown as { store: boolean }).store, false);
  assert.equal(outputText(plain.body), "Answer one.");

  const streamed = completedOf(
    await stream(server.url, {
      store: false,
      instructions: `instructions ${unstored.sse}`,
      input: `remember ${unstored.sse}`,
    }),
  );
  assert.equal(outputText(streamed), "Answer one.");

  const client = await WsClient.connect(server.url);
  const wsEvents = await client.turn({
    store: false,
    instructions: `instructions ${unstored.ws}`,
    input: `remember ${unstored.ws}`,
  });
  assert.equal(textOf(wsEvents), "Answer one.");
  const wsResponse = terminalOf(wsEvents).response;
  await client.close();

  for (const id of [plain.body.id, streamed.id, wsResponse.id]) {
    assertNotFound(await api(server.url, "GET", `/v1/responses/${id}`));
    assertNotFound(await api(server.url, "GET", `/v1/responses/${id}/input_items`));
    const continued = await create(server.url, { previous_response_id: id, input: "go on" });
    assert.equal(continued.status, 400, JSON.stringify(continued.body));
    assert.equal((continued.body as unknown as ErrorBody).error.code, "previous_response_not_found");
  }

  // The control: a stored response's input is in the database, so the search below can find a marker.
  const control = await create(server.url, { store: true, input: `remember ${stored}` });
  assert.equal(control.status, 200, JSON.stringify(control.body));
  assert.equal(await stop(server), 0, server.stderr());

  const { files, bytes } = dataDirBytes(dataDir);
  assert.ok(files.includes("responses.sqlite"), `data dir holds: ${files.join(", ")}`);
  assert.ok(bytes.includes(stored), "the store: true marker must be on disk");
  for (const [transport, marker] of Object.entries(unstored)) {
    assert.ok(!bytes.includes(marker), `the store: false marker sent over ${transport} is on disk`);
  }
});

test("with API keys, a stored response survives a restart and only its owner sees it", async () => {
  const keyFile = join(dir, `durable-keys-${randomUUID()}.json`);
  const keys: Record<string, string> = {};
  for (const name of ["alice", "bob"]) {
    const created = await runToExit(["keys", "create", "--name", name, "--key-file", keyFile]);
    assert.equal(created.code, 0, created.stderr);
    const key = created.stdout.trim();
    assert.match(key, /^\S{20,}$/, `one key on stdout, got ${JSON.stringify(created.stdout)}`);
    keys[name] = key;
  }
  const alice = keys.alice!;
  const bob = keys.bob!;
  assert.notEqual(alice, bob);

  const dataDir = freshDataDir();
  const first = await serve(dataDir, ["--key-file", keyFile]);
  const original = await create(first.url, { input: "alice's secret question" }, alice);
  assert.equal(original.status, 200, JSON.stringify(original.body));
  assert.equal(await stop(first), 0, first.stderr());

  const second = await serve(dataDir, ["--key-file", keyFile]);
  const id = original.body.id;
  const path = `/v1/responses/${id}`;
  const asAlice = await api<ResponseShape>(second.url, "GET", path, { key: alice });
  assert.equal(asAlice.status, 200, JSON.stringify(asAlice.body));
  assert.deepEqual(asAlice.body, original.body);

  // Bob cannot tell alice's response from a missing one, on any route.
  assertNotFound(await api(second.url, "GET", path, { key: bob }));
  assertNotFound(await api(second.url, "GET", `${path}/input_items`, { key: bob }));
  assertNotFound(await api(second.url, "DELETE", path, { key: bob }));
  const hijack = await create(second.url, { previous_response_id: id, input: "tell me" }, bob);
  assert.equal(hijack.status, 400, JSON.stringify(hijack.body));
  assert.equal((hijack.body as unknown as ErrorBody).error.code, "previous_response_not_found");
  const bobClient = new OpenAI({ baseURL: `${second.url}/v1`, apiKey: bob, maxRetries: 0 });
  await assert.rejects(
    bobClient.responses.retrieve(id),
    (error: unknown) => error instanceof OpenAI.NotFoundError && error.code === "response_not_found",
  );
  // Without a key at all: 401.
  assert.equal((await api(second.url, "GET", path)).status, 401);

  // Bob's DELETE attempt changed nothing: alice still has her response, its items and its chain.
  const aliceClient = new OpenAI({ baseURL: `${second.url}/v1`, apiKey: alice, maxRetries: 0 });
  const retrieved = await aliceClient.responses.retrieve(id);
  assert.equal(retrieved.output_text, "Answer one.");
  const items = await api<InputItemList>(second.url, "GET", `${path}/input_items`, { key: alice });
  assert.equal(items.status, 200);
  assert.deepEqual(
    items.body.data.map((item) => item.content),
    [[{ type: "input_text", text: "alice's secret question" }]],
  );
  const continued = await aliceClient.responses.create({
    model: "spark",
    previous_response_id: id,
    input: "go on",
  });
  assert.equal(continued.output_text, "Answer two.");
  assert.equal(await stop(second), 0, second.stderr());
});

test("--store memory creates nothing in the data directory", async () => {
  const dataDir = freshDataDir();
  const envDataDir = freshDataDir();
  const server = await serve(dataDir, ["--store", "memory"], { SPARK_DATA_DIR: envDataDir });
  const created = await create(server.url, { store: true, input: "kept in memory" });
  assert.equal(created.status, 200, JSON.stringify(created.body));
  // It is stored (in memory): it can be read back and continued while the server runs.
  const again = await api<ResponseShape>(server.url, "GET", `/v1/responses/${created.body.id}`);
  assert.equal(again.status, 200);
  assert.deepEqual(again.body, created.body);
  const continued = await create(server.url, { previous_response_id: created.body.id, input: "go on" });
  assert.equal(outputText(continued.body), "Answer two.");
  assert.equal(await stop(server), 0, server.stderr());
  assert.match(server.stderr(), /memory only/);
  assert.equal(existsSync(dataDir), false, "--data-dir must not be created with --store memory");
  assert.equal(existsSync(envDataDir), false, "SPARK_DATA_DIR must not be created with --store memory");

  // A restart on the same directory has nothing to find.
  const restarted = await serve(dataDir, ["--store", "memory"]);
  assertNotFound(await api(restarted.url, "GET", `/v1/responses/${created.body.id}`));
  assert.equal(await stop(restarted), 0, restarted.stderr());
  assert.equal(existsSync(dataDir), false);
});
