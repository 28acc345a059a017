/**
 * Stored chains and `item_reference`, as real clients use them: the AI SDK (`ai` with
 * `@ai-sdk/openai`) keeping a conversation by resending its history with item references, plain
 * HTTP and WebSocket clients, API keys. A script engine records what the model was given, so each
 * test checks the conversation the model saw, not only the status codes. Stored bytes are measured
 * in the SQLite file itself.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, type ModelMessage } from "ai";
import Database from "better-sqlite3";
import { anonymousPrincipal, generateKey, KeyRing } from "../src/core/keys.js";
import {
  chainConversation,
  MemoryResponseStore,
  type ResponseStore,
  type StoredResponse,
} from "../src/core/response-store.js";
import type { ConversationItem, EnginePart, EngineRequest } from "../src/engine/types.js";
import { parseScript, ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { DATABASE_FILE, SqliteResponseStore } from "../src/store/sqlite-store.js";
import { sampleRecord } from "./fixtures/store/records.js";
import { version1Chain, writeVersion1Database } from "./fixtures/store/version1.js";
import { terminalOf, textOf, WsClient, type ServerEvent } from "./helpers/ws-client.js";

const ALICE = generateKey();
const BOB = generateKey();
const root = mkdtempSync(join(tmpdir(), "spark-chains-test-"));
const servers: SparkServer[] = [];
after(async () => {
  await Promise.all(servers.map((server) => server.close()));
  rmSync(root, { recursive: true, force: true });
});

/** The script engine, keeping the conversation of every generation it starts, in order. */
class RecordingEngine extends ScriptEngine {
  readonly requests: (readonly ConversationItem[])[] = [];

  override stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    this.requests.push(request.items);
    return super.stream(request, signal);
  }

  /** The last conversation the engine was given, one `role: text` line per item. */
  lastSeen(): string[] {
    return transcript(this.requests.at(-1) ?? []);
  }
}

function transcript(items: readonly ConversationItem[]): string[] {
  return items.map((item) =>
    item.type === "message"
      ? `${item.role}: ${item.text}`
      : item.type === "tool_call"
        ? `call ${item.name}: ${item.input}`
        : `result: ${item.output}`,
  );
}

/** Line N of the script answers the model's Nth turn: `Answer N.` (or `texts[N-1]`). */
async function start(
  options: { texts?: readonly string[]; rate?: number; keys?: boolean; store?: ResponseStore } = {},
): Promise<{ url: string; engine: RecordingEngine }> {
  const texts = options.texts ?? ["Answer one.", "Answer two.", "Answer three.", "Answer four."];
  const lines = parseScript(
    texts.map((text) => JSON.stringify({ output: [{ type: "message", text }] })).join("\n"),
    "chains",
  );
  const engine = new RecordingEngine(options.rate === undefined ? { lines } : { lines, rate: options.rate });
  const server = new SparkServer({
    engine,
    port: 0,
    ...(options.store ? { store: options.store } : {}),
    ...(options.keys
      ? {
          keys: new KeyRing([
            { id: "alice", hash: ALICE.hash },
            { id: "bob", hash: BOB.hash },
          ]),
        }
      : {}),
  });
  servers.push(server);
  return { url: await server.listen(), engine };
}

interface Created {
  id: string;
  output: { id: string; type: string; content?: { text: string }[] }[];
}
interface ErrorBody {
  error: { type: string; code: string; message: string; param: string | null };
}

async function api<T>(
  url: string,
  method: string,
  path: string,
  body?: unknown,
  key?: string,
): Promise<{ status: number; body: T }> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: {
      ...(body !== undefined ? { "content-type": "application/json" } : {}),
      ...(key !== undefined ? { authorization: `Bearer ${key}` } : {}),
    },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: response.status, body: (await response.json()) as T };
}

/** POST /v1/responses, asserting 200. */
async function create(url: string, body: object, key?: string): Promise<Created> {
  const result = await api<Created>(url, "POST", "/v1/responses", body, key);
  assert.equal(result.status, 200, JSON.stringify(result.body));
  return result.body;
}

/** POST /v1/responses, asserting it is refused with `status`; returns the error. */
async function refused(url: string, body: object, status: number, key?: string): Promise<ErrorBody["error"]> {
  const result = await api<ErrorBody>(url, "POST", "/v1/responses", body, key);
  assert.equal(result.status, status, JSON.stringify(result.body));
  return result.body.error;
}

function messageId(response: Created): string {
  const message = response.output.find((item) => item.type === "message");
  assert.ok(message, JSON.stringify(response));
  return message.id;
}

test("the AI SDK's next turn (history plus result.response.messages, store on) gives the model its earlier answer", async () => {
  const { url, engine } = await start();
  const bodies: { input: unknown[] }[] = [];
  const openai = createOpenAI({
    baseURL: `${url}/v1`,
    apiKey: "unused",
    fetch: async (input, init) => {
      if (typeof init?.body === "string") bodies.push(JSON.parse(init.body) as { input: unknown[] });
      return fetch(input, init);
    },
  });
  const model = openai.responses("spark");
  const history: ModelMessage[] = [{ role: "user", content: "What is a closure?" }];
  const first = await generateText({ model, messages: history, maxRetries: 0 });
  assert.equal(first.text, "Answer one.");
  history.push(...first.response.messages, { role: "user", content: "Show one in Python." });

  const second = await generateText({ model, messages: history, maxRetries: 0 });
  // The script answers the model's second turn with line 2: the model saw its first answer.
  assert.equal(second.text, "Answer two.");
  assert.deepEqual(engine.lastSeen(), [
    "user: What is a closure?",
    "assistant: Answer one.",
    "user: Show one in Python.",
  ]);
  // On the wire, the earlier answer went back as a reference to the stored output item.
  const stored = await api<Created>(url, "GET", `/v1/responses/${first.response.id}`);
  const reference = { type: "item_reference", id: messageId(stored.body) };
  assert.deepEqual(bodies[1]?.input[1], reference);
  // input_items lists what the model saw: the referenced item itself.
  const listed = await api<{ data: { id: string; type: string; role?: string }[] }>(
    url,
    "GET",
    `/v1/responses/${second.response.id}/input_items?order=asc`,
  );
  assert.deepEqual(
    listed.body.data.map((item) => [item.type, item.role]),
    [
      ["message", "user"],
      ["message", "assistant"],
      ["message", "user"],
    ],
  );
  assert.equal(listed.body.data[1]?.id, reference.id);

  // A third turn references both earlier answers.
  history.push(...second.response.messages, { role: "user", content: "And in Rust?" });
  const third = await generateText({ model, messages: history, maxRetries: 0 });
  assert.equal(third.text, "Answer three.");
  assert.deepEqual(engine.lastSeen(), [
    "user: What is a closure?",
    "assistant: Answer one.",
    "user: Show one in Python.",
    "assistant: Answer two.",
    "user: And in Rust?",
  ]);
});

test("item_reference: output and input items of the key's own stored responses; anything else is a 400 naming the item", async () => {
  const { url, engine } = await start({ keys: true });
  const first = await create(url, { input: "question one" }, ALICE.key);
  const inputs = await api<{ data: { id: string }[] }>(
    url,
    "GET",
    `/v1/responses/${first.id}/input_items`,
    undefined,
    ALICE.key,
  );
  const questionId = inputs.body.data[0]!.id;

  const next = await create(
    url,
    {
      input: [
        { type: "item_reference", id: questionId },
        { id: messageId(first) },
        { role: "user", content: "question two" },
      ],
    },
    ALICE.key,
  );
  assert.deepEqual(engine.lastSeen(), ["user: question one", "assistant: Answer one.", "user: question two"]);
  assert.equal(next.output[0]?.content?.[0]?.text, "Answer two.");

  // An unknown id, and another key's item (indistinguishable from an unknown one).
  const generations = engine.requests.length;
  for (const [key, id] of [
    [ALICE.key, "msg_does_not_exist"],
    [BOB.key, messageId(first)],
    [BOB.key, questionId],
  ] as const) {
    const error = await refused(
      url,
      {
        input: [
          { role: "user", content: "hi" },
          { type: "item_reference", id },
        ],
      },
      400,
      key,
    );
    assert.equal(error.type, "invalid_request_error");
    assert.equal(error.code, "item_not_found");
    assert.equal(error.param, "input[1].id");
    assert.ok(error.message.includes(`'${id}'`), error.message);
  }
  const malformed = await refused(url, { input: [{ type: "item_reference" }] }, 400, ALICE.key);
  assert.equal(malformed.param, "input[0]");
  assert.equal(engine.requests.length, generations, "nothing refused reached the engine");

  // A deleted response's items are gone with it.
  assert.equal((await api(url, "DELETE", `/v1/responses/${first.id}`, undefined, ALICE.key)).status, 200);
  const gone = await refused(url, { input: [{ type: "item_reference", id: questionId }] }, 400, ALICE.key);
  assert.equal(gone.code, "item_not_found");
});

test("item_reference over WebSocket: the connection's latest responses resolve even with store: false", async () => {
  const { url, engine } = await start({ keys: true });
  const auth = { headers: { authorization: `Bearer ${ALICE.key}` } };
  const client = await WsClient.connect(url, auth);
  const first = terminalOf(await client.turn({ input: "unstored question", store: false }));
  const outputId = (first.response.output[0] as unknown as { id: string }).id;
  const second = await client.turn({
    store: false,
    input: [
      { role: "user", content: "unstored question" },
      { type: "item_reference", id: outputId },
      { role: "user", content: "go on" },
    ],
  });
  assert.equal(textOf(second), "Answer two.");
  assert.deepEqual(engine.lastSeen(), ["user: unstored question", "assistant: Answer one.", "user: go on"]);

  // Another connection (or HTTP) does not hold it, and nothing was stored.
  const other = await WsClient.connect(url, auth);
  other.send({ type: "response.create", input: [{ type: "item_reference", id: outputId }] });
  const error = await other.waitForType("error");
  assert.deepEqual(
    { status: error.status, code: (error.error as ErrorBody["error"]).code },
    { status: 400, code: "item_not_found" },
  );
  assert.equal((error.error as ErrorBody["error"]).param, "input[0].id");
  const http = await refused(url, { input: [{ type: "item_reference", id: outputId }] }, 400, ALICE.key);
  assert.equal(http.code, "item_not_found");
  await Promise.all([client.close(), other.close()]);
});

/** Sum of the stored text of `ids`' rows in the SQLite file of `dataDir`. */
function storedBytes(dataDir: string, ids: readonly string[]): number {
  const db = new Database(join(dataDir, DATABASE_FILE), { readonly: true });
  try {
    const row = db.prepare<[string], { bytes: number }>(
      `SELECT sum(length(CAST(response AS BLOB)) + length(CAST(input_items AS BLOB)) + length(CAST(items AS BLOB))) AS bytes
       FROM responses WHERE id IN (SELECT value FROM json_each(?))`,
    );
    return row.get(JSON.stringify(ids))!.bytes;
  } finally {
    db.close();
  }
}

test("a stored chain takes O(n) bytes: 20 turns store about twice what 10 do, not four times", async () => {
  const dataDir = join(root, "linear");
  const store = SqliteResponseStore.open(dataDir);
  const { url, engine } = await start({ texts: ["a".repeat(2000)], store });
  const chain = async (turns: number): Promise<string[]> => {
    const ids: string[] = [];
    for (let turn = 0; turn < turns; turn++) {
      const previous = ids.at(-1);
      const created = await create(url, {
        input: `turn ${turn} `.padEnd(2000, "q"),
        ...(previous ? { previous_response_id: previous } : {}),
      });
      ids.push(created.id);
    }
    return ids;
  };
  const ten = storedBytes(dataDir, await chain(10));
  const twenty = storedBytes(dataDir, await chain(20));
  // The history is walked back on load: the 20th turn saw all 19 earlier exchanges.
  assert.equal(engine.requests.at(-1)?.length, 39);
  // Each turn stores its own 4 KB (input, output, the response object) once. Storing the whole
  // conversation with every response made this ratio about 3.5.
  const ratio = twenty / ten;
  assert.ok(
    ratio > 1.9 && ratio < 2.2,
    `10 turns: ${ten} bytes, 20 turns: ${twenty} bytes (× ${ratio.toFixed(2)})`,
  );
});

test("deleting a response in a chain: its successors stay readable but cannot be continued; a chain restarted from a compaction item needs nothing before it", async () => {
  const { url, engine } = await start();
  const one = await create(url, { input: "one" });
  const two = await create(url, { previous_response_id: one.id, input: "two" });
  const three = await create(url, { previous_response_id: two.id, input: "three" });
  assert.equal((await api(url, "DELETE", `/v1/responses/${two.id}`)).status, 200);
  assert.equal((await api(url, "GET", `/v1/responses/${three.id}`)).status, 200);
  const orphan = await refused(url, { previous_response_id: three.id, input: "four" }, 400);
  assert.equal(orphan.code, "previous_response_not_found");
  assert.equal(orphan.param, "previous_response_id");
  assert.ok(orphan.message.includes(`'${two.id}', which was deleted`), orphan.message);
  await create(url, { previous_response_id: one.id, input: "two again" });
  assert.deepEqual(engine.lastSeen(), ["user: one", "assistant: Answer one.", "user: two again"]);

  // Compact the chain, continue from the compaction item, then delete everything before it.
  const alpha = await create(url, { input: "alpha" });
  const beta = await create(url, { previous_response_id: alpha.id, input: "beta" });
  const compacted = await api<{ output: object[] }>(url, "POST", "/v1/responses/compact", {
    model: "spark",
    previous_response_id: beta.id,
  });
  assert.equal(compacted.status, 200, JSON.stringify(compacted.body));
  const gamma = await create(url, {
    previous_response_id: beta.id,
    input: [...compacted.body.output, { role: "user", content: "gamma" }],
  });
  const restored = engine.lastSeen();
  for (const id of [alpha.id, beta.id])
    assert.equal((await api(url, "DELETE", `/v1/responses/${id}`)).status, 200);
  await create(url, { previous_response_id: gamma.id, input: "delta" });
  const gammaText = gamma.output[0]?.content?.[0]?.text ?? "";
  assert.deepEqual(engine.lastSeen(), [...restored, `assistant: ${gammaText}`, "user: delta"]);

  // Nor does a response that compacted its own context before generating (context_management).
  const long = await create(url, { input: "word ".repeat(400) });
  const compacting = await create(url, {
    previous_response_id: long.id,
    input: "epsilon",
    context_management: [{ type: "compaction", compact_threshold: 100 }],
  });
  assert.deepEqual(
    compacting.output.map((item) => item.type),
    ["compaction", "message"],
  );
  const pruned = engine.lastSeen();
  assert.equal((await api(url, "DELETE", `/v1/responses/${long.id}`)).status, 200);
  await create(url, { previous_response_id: compacting.id, input: "zeta" });
  const compactingText = compacting.output[1]?.content?.[0]?.text ?? "";
  assert.deepEqual(engine.lastSeen(), [...pruned, `assistant: ${compactingText}`, "user: zeta"]);
});

test("a steered successor stores its steer input with its turn: its chain continues from the store over HTTP", async () => {
  const long = "word ".repeat(3000);
  const { url, engine } = await start({ texts: [long, "Steered answer.", "Third answer."], rate: 300 });
  const client = await WsClient.connect(url);
  client.send({ type: "response.create", input: "write a lot" });
  const created = await client.waitForType("response.created");
  const steeredId = (created.response as { id: string }).id;
  await client.waitFor(
    () => client.events.filter((e) => e.type === "response.output_text.delta").length >= 5,
  );
  client.send({ type: "response.steer", previous_response_id: steeredId, input: "Actually, be brief." });
  const isSuccessorEnd = (event: ServerEvent): boolean =>
    event.type === "response.completed" && (event.response as { id: string }).id !== steeredId;
  const successor = (await client.waitFor(isSuccessorEnd)).response as { id: string };
  const partial = terminalOf(client.responseEvents(steeredId)).response.output[0]?.content?.[0]?.text;
  assert.ok(partial && partial.length < long.length);
  await client.close();

  // Another connection: only the store has the chain.
  await create(url, { previous_response_id: successor.id, input: "and now?" });
  assert.deepEqual(engine.lastSeen(), [
    "user: write a lot",
    `assistant: ${partial}`,
    "user: Actually, be brief.",
    "assistant: Steered answer.",
    "user: and now?",
  ]);
});

test("a chain stored by schema version 1 continues from the migrated store, and its items resolve", async () => {
  const dataDir = join(root, "version1");
  writeVersion1Database(dataDir, version1Chain("v1", 2, anonymousPrincipal.id));
  const { url, engine } = await start({ store: SqliteResponseStore.open(dataDir) });
  await create(url, {
    previous_response_id: "resp_v1_1",
    input: [
      { type: "item_reference", id: "in_v1_0" },
      { role: "user", content: "next" },
    ],
  });
  assert.deepEqual(engine.lastSeen(), [
    "user: question 0",
    "assistant: answer 0",
    "user: question 1",
    "assistant: answer 1",
    "user: question 0",
    "user: next",
  ]);
});

test("MemoryResponseStore: evicting a chain's older responses folds them into their successors, which still continue", () => {
  const store = new MemoryResponseStore(3);
  const turn = (index: number): ConversationItem[] => [
    { type: "message", role: "user", text: `q${index}` },
    { type: "message", role: "assistant", text: `a${index}` },
  ];
  const record = (index: number): StoredResponse => ({
    ...sampleRecord(`resp_fold_${index}`, "key_alice", index === 0 ? null : `resp_fold_${index - 1}`),
    items: turn(index),
  });
  for (let index = 0; index < 8; index++) {
    store.put(record(index));
    assert.deepEqual(chainConversation(store, `resp_fold_${index}`, "key_alice"), {
      found: true,
      conversation: Array.from({ length: index + 1 }, (_, i) => turn(i)).flat(),
    });
  }
  assert.equal(store.get("resp_fold_4", "key_alice"), undefined, "the oldest are evicted");
  assert.equal(store.get("resp_fold_5", "key_alice")?.standalone, true);
  assert.equal(chainConversation(store, "resp_fold_7", "key_bob").found, false);
  // A delete, unlike eviction, removes the turn: the chain after it can no longer be rebuilt.
  assert.equal(store.delete("resp_fold_6", "key_alice"), true);
  assert.deepEqual(chainConversation(store, "resp_fold_7", "key_alice"), {
    found: false,
    missing: "resp_fold_6",
  });
});
