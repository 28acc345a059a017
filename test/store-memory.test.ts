/**
 * What the response stores keep in memory is bounded in bytes, not only in count: real `spark serve`
 * children with a small V8 heap (`--max-old-space-size`) receiving many large stored requests must
 * stay up, and the stores' own byte counters must stay under their bounds.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  approximateBytes,
  MEMORY_STORE_MAX_BYTES,
  MemoryResponseStore,
  type StoredResponse,
} from "../src/core/response-store.js";
import { sampleRecord } from "./fixtures/store/records.js";
import { assertHealthy, dir, file, SAFETY_TIMEOUT_MS, startServer, stop } from "./helpers/cli.js";

const SCRIPT = file(
  "store-memory.jsonl",
  JSON.stringify({ output: [{ type: "message", text: "ok" }] }) + "\n",
);
const MiB = 1024 * 1024;

/** `sampleRecord` with an input of `size` characters (in its input items and its turn's items). */
function largeRecord(id: string, size: number): StoredResponse {
  const record = sampleRecord(id);
  const text = id.padEnd(size, "x");
  return {
    ...record,
    inputItems: [{ id: `in_${id}`, type: "message", role: "user", content: [{ type: "input_text", text }] }],
    items: [{ type: "message", role: "user", text }],
  };
}

/**
 * Sends `count` stored `generate: false` requests of `size` characters each to a server whose V8 heap
 * is limited to `heapMiB`, then checks it is alive and still has the first and the last.
 */
async function storeMany(
  extra: readonly string[],
  heapMiB: number,
  count: number,
  size: number,
): Promise<void> {
  const server = await startServer(
    ["serve", "--engine", "script", "--script", SCRIPT, "--port", "0", ...extra],
    { NODE_OPTIONS: `--max-old-space-size=${heapMiB}` },
  );
  const ids: string[] = [];
  for (let index = 0; index < count; index++) {
    const response = await fetch(`${server.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ input: `request ${index} `.padEnd(size, "y"), generate: false }),
      signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
    }).catch((error: unknown) => {
      throw new Error(
        `request ${index} failed (${String(error)}); server stderr:\n${server.stderr().slice(-2000)}`,
      );
    });
    assert.equal(response.status, 200, await response.clone().text());
    ids.push(((await response.json()) as { id: string }).id);
  }
  await assertHealthy(server.url);
  const last = await fetch(`${server.url}/v1/responses/${ids.at(-1)}`);
  assert.equal(last.status, 200);
  assert.equal(await stop(server), 0, server.stderr().slice(-2000));
}

test("spark serve (SQLite store) with a 128 MiB heap stores 24 requests of 8 MiB and stays up", async () => {
  await storeMany(["--data-dir", `${dir}/store-memory-sqlite`], 128, 24, 8 * MiB);
});

test("spark serve --store memory with a 384 MiB heap stores 48 requests of 8 MiB and stays up", async () => {
  await storeMany(["--store", "memory"], 384, 48, 8 * MiB);
});

test("MemoryResponseStore: bounded in bytes, oldest evicted first, the newest always kept", () => {
  assert.equal(MEMORY_STORE_MAX_BYTES, 256 * MiB);
  const store = new MemoryResponseStore(1000, 4 * MiB);
  const size = approximateBytes(largeRecord("resp_big_0", 512 * 1024));
  assert.ok(size > MiB && size < 1.1 * MiB, `a record with 2 × 512 Ki characters is about 1 MiB: ${size}`);
  for (let index = 0; index < 20; index++) {
    store.put(largeRecord(`resp_big_${index}`, 512 * 1024));
    assert.ok(store.storedBytes <= 4 * MiB, `${store.storedBytes} bytes held after ${index + 1} puts`);
  }
  // Three fit; the oldest are gone, the newest are there.
  const kept = [17, 18, 19].map((index) => approximateBytes(largeRecord(`resp_big_${index}`, 512 * 1024)));
  assert.equal(store.storedBytes, kept[0]! + kept[1]! + kept[2]!);
  assert.equal(store.get("resp_big_16", "key_alice"), undefined);
  for (const index of [17, 18, 19]) assert.ok(store.get(`resp_big_${index}`, "key_alice"));

  // A record larger than the whole bound is kept alone, so its chain can continue.
  store.put(largeRecord("resp_huge", 3 * MiB));
  assert.ok(store.get("resp_huge", "key_alice"));
  assert.equal(store.get("resp_big_19", "key_alice"), undefined);
  assert.equal(store.storedBytes, approximateBytes(largeRecord("resp_huge", 3 * MiB)));

  // The next put evicts it; replacing and deleting keep the count exact.
  store.put(largeRecord("resp_small", 10));
  assert.equal(store.get("resp_huge", "key_alice"), undefined);
  store.put(largeRecord("resp_small", 10));
  assert.equal(store.storedBytes, approximateBytes(largeRecord("resp_small", 10)));
  assert.equal(store.delete("resp_small", "key_bob"), false);
  assert.equal(store.delete("resp_small", "key_alice"), true);
  assert.equal(store.storedBytes, 0);

  // The count bound still holds for small records.
  const counted = new MemoryResponseStore(5);
  for (let index = 0; index < 8; index++) counted.put(sampleRecord(`resp_small_${index}`));
  assert.equal(counted.get("resp_small_2", "key_alice"), undefined);
  assert.ok(counted.get("resp_small_3", "key_alice"));
});

test("approximateBytes is close to the length of the record's JSON", () => {
  for (const record of [sampleRecord("resp_sample"), largeRecord("resp_large", 100_000)]) {
    const json =
      JSON.stringify(record.response).length +
      JSON.stringify(record.inputItems).length +
      JSON.stringify(record.items).length;
    const estimate = approximateBytes(record);
    assert.ok(
      estimate >= json && estimate <= json * 1.5 + 2048,
      `${estimate} for ${json} characters of JSON`,
    );
  }
});
