/**
 * What one WebSocket client can make the server hold is bounded, checked on real `spark serve`
 * children with a small V8 heap:
 * - lane history (each lane's latest conversation, kept even with `store: false`) is bounded in
 *   bytes per connection and over all connections: many connections with many large lanes leave
 *   the server up, the latest lanes continue, and the forgotten ones say why;
 * - a client that floods frames without reading replies gets TCP backpressure (the server stops
 *   reading it) instead of an ever-growing reply queue, and /healthz keeps answering meanwhile.
 */
import assert from "node:assert/strict";
import { setImmediate as nextTurn } from "node:timers/promises";
import { test } from "node:test";
import { assertHealthy, file, startScriptServe, stop } from "./helpers/cli.js";
import { TERMINAL_TYPES, WsClient } from "./helpers/ws-client.js";

const SCRIPT = file("ws-memory.jsonl", JSON.stringify({ output: [{ type: "message", text: "ok" }] }) + "\n");
const MiB = 1024 * 1024;

async function metric(url: string, name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name));
  return line ? Number(line.slice(line.lastIndexOf(" ") + 1)) : 0;
}

test("lane history is bounded over many connections and lanes: a 128 MiB heap holds 128 lanes of 1 MiB", async () => {
  const server = await startScriptServe(SCRIPT, ["--store", "memory", "--websocket-history-mib", "32"], {
    NODE_OPTIONS: "--max-old-space-size=128",
  });
  const clients = await Promise.all([1, 2, 3, 4].map(() => WsClient.connect(server.url)));
  const latest: string[][] = [];
  for (const [c, client] of clients.entries()) {
    latest.push([]);
    for (let lane = 0; lane < 32; lane++) {
      const events = await client.turn({
        input: `connection ${c} lane ${lane} `.padEnd(MiB, "z"),
        stream_id: `lane-${lane}`,
        store: false,
        generate: false,
      });
      latest[c]!.push((events.at(-1)!.response as { id: string }).id);
    }
  }
  await assertHealthy(server.url);
  for (const [c, client] of clients.entries()) {
    // The most recent lane continues from memory (store: false, so nothing else could have it)...
    const continued = await client.turn({
      previous_response_id: latest[c]!.at(-1),
      input: "next",
      stream_id: "lane-31",
      store: false,
    });
    assert.equal(continued.at(-1)!.type, "response.completed");
    // ...the first was forgotten to stay within the bound, and the error says so.
    const from = client.events.length;
    client.send({
      type: "response.create",
      previous_response_id: latest[c]![0],
      input: "next",
      stream_id: "lane-0",
      store: false,
    });
    const miss = await client.waitForType("error", from);
    assert.equal((miss.error as { code: string }).code, "previous_response_not_found");
    assert.match((miss.error as { message: string }).message, /no longer holds it in memory/);
  }
  assert.ok((await metric(server.url, 'spark_connection_limits_hit_total{limit="history"}')) > 0);
  await Promise.all(clients.map((client) => client.close()));
  assert.equal(await stop(server), 0, server.stderr().slice(-2000));
});

test("a client that floods frames without reading is paused, not buffered; /healthz answers meanwhile", async () => {
  const server = await startScriptServe(SCRIPT, [], { NODE_OPTIONS: "--max-old-space-size=96" });
  const rssBefore = await metric(server.url, "spark_process_resident_memory_bytes");
  const flooder = await WsClient.connect(server.url);
  flooder.socket.pause(); // never read a reply
  let sent = 0;
  // Each 1-byte frame is invalid JSON and earns a ~200-byte error event: without backpressure the
  // server would queue hundreds of MiB of replies for a client that reads none of them.
  while (sent < 1_500_000 && flooder.socket.bufferedAmount < 4 * MiB) {
    for (let i = 0; i < 5000; i++) flooder.socket.send("x");
    sent += 5000;
    await nextTurn();
  }
  await assertHealthy(server.url);
  assert.ok((await metric(server.url, 'spark_connection_limits_hit_total{limit="reading_paused"}')) >= 1);
  const rssAfter = await metric(server.url, "spark_process_resident_memory_bytes");
  assert.ok(
    rssAfter - rssBefore < 100 * MiB,
    `RSS grew by ${Math.round((rssAfter - rssBefore) / MiB)} MiB after ${sent} unread frames`,
  );
  // Another client on the same server is served normally.
  const other = await WsClient.connect(server.url);
  const events = await other.turn({ input: "hello" });
  assert.ok(TERMINAL_TYPES.has(events.at(-1)!.type));
  await other.close();
  flooder.socket.terminate();
  assert.equal(await stop(server), 0, server.stderr().slice(-2000));
});
