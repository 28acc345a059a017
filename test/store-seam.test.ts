/**
 * The store seam is asynchronous: a store may answer every call with a promise (Postgres does).
 * These tests run the server on a store that answers on a later turn of the event loop, and on one
 * that cannot be reached, through real HTTP and WebSocket clients.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import {
  MemoryResponseStore,
  StoreUnavailableError,
  StoreWriteError,
  type ChainConversation,
  type ResponseStore,
  type StoredItem,
  type StoredResponse,
} from "../src/core/response-store.js";
import type { SparkServer } from "../src/server/http-server.js";
import { startScriptServer } from "./helpers/servers.js";
import { terminalOf, textOf, WsClient } from "./helpers/ws-client.js";

/** A `MemoryResponseStore` behind promises that settle on a later macrotask; `down` makes every call fail. */
class DeferredStore implements ResponseStore {
  readonly inner = new MemoryResponseStore();
  down = false;
  calls = 0;

  #later<T>(write: boolean, answer: () => T): Promise<T> {
    this.calls++;
    return new Promise((resolve, reject) =>
      setImmediate(() => {
        if (!this.down) resolve(answer());
        else if (write) reject(new StoreWriteError("connection refused", false, { unavailable: true }));
        else reject(new StoreUnavailableError("connection refused"));
      }),
    );
  }

  get(id: string, owner: string): Promise<StoredResponse | undefined> {
    return this.#later(false, () => this.inner.get(id, owner));
  }
  has(id: string, owner: string): Promise<boolean> {
    return this.#later(false, () => this.inner.has(id, owner));
  }
  chain(id: string, owner: string): Promise<ChainConversation> {
    return this.#later(false, () => this.inner.chain(id, owner));
  }
  item(itemId: string, owner: string): Promise<StoredItem | undefined> {
    return this.#later(false, () => this.inner.item(itemId, owner));
  }
  put(record: StoredResponse): Promise<void> {
    return this.#later(true, () => this.inner.put(record));
  }
  delete(id: string, owner: string): Promise<boolean> {
    return this.#later(true, () => this.inner.delete(id, owner));
  }
  close(): Promise<void> {
    return this.#later(true, () => this.inner.close());
  }
}

const LINES = ["One.", "Two.", "Three.", "Four.", "Five."].map((text) => ({
  output: [{ type: "message", text }],
}));

const servers: SparkServer[] = [];
after(async () => {
  await Promise.all(servers.map((server) => server.close()));
});

async function start(store: ResponseStore): Promise<string> {
  const server = await startScriptServer(LINES, undefined, { store });
  servers.push(server);
  return server.url;
}

interface Answer {
  status: number;
  body: {
    id?: string;
    status?: string;
    output?: { id: string; content?: { text: string }[] }[];
    error?: { code: string };
    data?: unknown[];
  };
}

async function call(url: string, method: string, path: string, body?: unknown): Promise<Answer> {
  const response = await fetch(`${url}${path}`, {
    method,
    ...(body !== undefined
      ? { headers: { "content-type": "application/json" }, body: JSON.stringify(body) }
      : {}),
  });
  return { status: response.status, body: (await response.json()) as Answer["body"] };
}

function outputText(answer: Answer): string {
  return (answer.body.output ?? []).map((item) => item.content?.map((part) => part.text).join("")).join("");
}

test("an asynchronous store: chains continue over HTTP and WebSocket, item_reference, GET, input_items and DELETE", async () => {
  const store = new DeferredStore();
  const url = await start(store);

  const first = await call(url, "POST", "/v1/responses", { model: "spark", input: "hello" });
  assert.equal(first.status, 200);
  assert.equal(outputText(first), "One.");
  assert.ok(store.inner.get(first.body.id!, "anonymous"), "written before the answer");
  const second = await call(url, "POST", "/v1/responses", {
    model: "spark",
    input: "again",
    previous_response_id: first.body.id,
  });
  assert.equal(outputText(second), "Two.", "the stored chain was read");
  assert.equal(store.inner.get(second.body.id!, "anonymous")?.standalone, false, "stored as its own turn");

  // A new connection has nothing in memory: the chain comes from the store.
  const client = await WsClient.connect(url);
  const third = await client.turn({ model: "spark", input: "more", previous_response_id: second.body.id });
  assert.equal(textOf(third), "Three.");
  const thirdId = terminalOf(third).response.id;
  client.socket.close();

  const referenced = await call(url, "POST", "/v1/responses", {
    model: "spark",
    input: [{ type: "item_reference", id: first.body.output![0]!.id }],
  });
  assert.equal(referenced.status, 200, JSON.stringify(referenced.body));
  assert.equal(outputText(referenced), "Two.", "the referenced assistant message counts as a turn");

  assert.equal((await call(url, "GET", `/v1/responses/${thirdId}`)).body.status, "completed");
  assert.equal((await call(url, "GET", `/v1/responses/${thirdId}/input_items`)).body.data?.length, 1);
  assert.equal((await call(url, "DELETE", `/v1/responses/${first.body.id}`)).status, 200);
  const gone = await call(url, "POST", "/v1/responses", {
    model: "spark",
    input: "and?",
    previous_response_id: thirdId,
  });
  assert.equal(gone.status, 400);
  assert.equal(gone.body.error?.code, "previous_response_not_found");
  assert.ok(store.calls > 0);
});

test("a store that cannot be reached: 503 store_unavailable before anything is sent, response.failed store_write_failed, then recovery", async () => {
  const store = new DeferredStore();
  const url = await start(store);
  const first = await call(url, "POST", "/v1/responses", { model: "spark", input: "hello" });
  assert.equal(first.status, 200);

  store.down = true;
  const continued = await fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "spark",
      input: "again",
      previous_response_id: first.body.id,
      stream: true,
    }),
  });
  assert.equal(continued.status, 503, "refused before the stream starts");
  assert.equal(continued.headers.get("retry-after"), "1");
  assert.equal(((await continued.json()) as Answer["body"]).error?.code, "store_unavailable");
  assert.equal(
    (await call(url, "GET", `/v1/responses/${first.body.id}`)).body.error?.code,
    "store_unavailable",
  );
  const referenced = await call(url, "POST", "/v1/responses", {
    model: "spark",
    input: [{ type: "item_reference", id: "msg_anything" }],
  });
  assert.equal(referenced.status, 503);

  const unstored = await call(url, "POST", "/v1/responses", { model: "spark", input: "new" });
  assert.equal(unstored.status, 503);
  assert.equal(unstored.body.error?.code, "store_write_failed");
  const client = await WsClient.connect(url);
  const failed = terminalOf(await client.turn({ model: "spark", input: "new over WebSocket" }));
  assert.equal(failed.type, "response.failed");
  assert.deepEqual(
    (failed.response as unknown as { error: { code: string } }).error.code,
    "store_write_failed",
  );
  const notStored = terminalOf(await client.turn({ model: "spark", input: "not stored", store: false }));
  assert.equal(notStored.type, "response.completed", "store: false needs no store");

  store.down = false;
  const recovered = await call(url, "POST", "/v1/responses", {
    model: "spark",
    input: "again",
    previous_response_id: first.body.id,
  });
  assert.equal(recovered.status, 200);
  assert.equal(outputText(recovered), "Two.");
  client.socket.close();
});
