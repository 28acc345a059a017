/**
 * Coalesced writes (issue 32): when a stream's events go to the socket. The policy's decisions are
 * checked on the coalescer itself with real timers and ticks (no clock is faked); the wire tests
 * check that SSE and WebSocket streams stay exact: every event in order, sequence numbers without
 * gaps, one WebSocket frame per event, the text whole, with a fast engine whose tokens are held.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import WebSocket from "ws";
import { WriteCoalescer } from "../src/server/coalesce.js";
import type { SparkServer } from "../src/server/http-server.js";
import { startScriptServer } from "./helpers/servers.js";

/** Resolves after the nextTick queue queued so far has run (before any timer can fire). */
const afterTick = (): Promise<void> => new Promise((resolve) => process.nextTick(resolve));

function coalescer(windowMs = 1, holdMs = 0.5, maxHeld = 8): { c: WriteCoalescer; writes: () => number } {
  let writes = 0;
  const c = new WriteCoalescer(() => void writes++, { windowMs, holdMs, maxHeld });
  return { c, writes: () => writes };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 1));
}

/** Waits until `ms` have passed since `since` (a condition on the clock, not a fixed sleep). */
async function past(since: number, ms: number): Promise<void> {
  await until(() => performance.now() - since >= ms);
}

test("the first delta of a stream is written at the end of its tick, not held", async () => {
  const { c, writes } = coalescer();
  c.queued(true);
  await afterTick();
  assert.equal(writes(), 1);
  c.stop();
});

test("deltas arriving within the window are held; the backstop writes them together once", async () => {
  // Window and hold far longer than a stall of this (loaded) machine between two calls.
  const { c, writes } = coalescer(1000, 1000);
  c.queued(true);
  await afterTick();
  assert.equal(writes(), 1);
  c.queued(true);
  c.queued(true);
  c.queued(true);
  await afterTick();
  assert.equal(writes(), 1, "held deltas are not written at the end of their tick");
  await until(() => writes() === 2);
  await afterTick();
  assert.equal(writes(), 2, "one write for the three held deltas");
  c.stop();
});

test("held deltas go out with the first delta arriving once the oldest has waited the hold", async () => {
  const { c, writes } = coalescer(10_000, 5);
  c.queued(true);
  await afterTick();
  c.queued(true);
  const heldAt = performance.now();
  await afterTick();
  assert.equal(writes(), 1, "the second delta is held");
  await past(heldAt, 6);
  c.queued(true);
  await afterTick();
  assert.equal(writes(), 2, "the third delta's arrival writes both");
  c.stop();
});

test("any other event flushes the held deltas at the end of its tick", async () => {
  const { c, writes } = coalescer(10_000, 10_000);
  c.queued(true);
  await afterTick();
  c.queued(true);
  c.queued(true);
  await afterTick();
  assert.equal(writes(), 1);
  c.queued(false);
  await afterTick();
  assert.equal(writes(), 2);
  c.stop();
});

test("at most maxHeld deltas are held: the next flush comes at the end of that tick", async () => {
  const { c, writes } = coalescer(10_000, 10_000, 3);
  c.queued(true);
  await afterTick();
  c.queued(true);
  c.queued(true);
  await afterTick();
  assert.equal(writes(), 1);
  c.queued(true);
  await afterTick();
  assert.equal(writes(), 2);
  c.stop();
});

test("a delta after a pause of the window or more is written at once (a paced engine waits for nothing)", async () => {
  const { c, writes } = coalescer(2);
  c.queued(true);
  await afterTick();
  await past(performance.now(), 3);
  c.queued(true);
  await afterTick();
  assert.equal(writes(), 2);
  c.stop();
});

test("a window of 0 writes every event at the end of its tick", async () => {
  const { c, writes } = coalescer(0, 0);
  c.queued(true);
  await afterTick();
  c.queued(true);
  await afterTick();
  assert.equal(writes(), 2);
  c.stop();
});

const servers: SparkServer[] = [];
after(() => Promise.all(servers.map((server) => server.close())));

/** Many short tokens at 5,000 tok/s: faster than the window, so deltas are held and coalesced. */
const WORDS = Array.from({ length: 600 }, (_, i) => `w${i} `).join("");
const FAST = { output: [{ type: "message", text: WORDS }] };

async function fastServer(): Promise<SparkServer> {
  const server = await startScriptServer([FAST], 5000);
  servers.push(server);
  return server;
}

interface Event {
  type: string;
  sequence_number: number;
  delta?: string;
}

function assertExact(events: Event[]): void {
  assert.deepEqual(
    events.map((e) => e.sequence_number),
    events.map((_, i) => i),
    "sequence numbers start at 0 and have no gap",
  );
  const text = events
    .filter((e) => e.type === "response.output_text.delta")
    .map((e) => e.delta)
    .join("");
  assert.equal(text, WORDS);
  assert.equal(events.at(-1)?.type, "response.completed");
  assert.equal(events.filter((e) => e.type === "response.completed").length, 1);
}

test("over SSE a fast stream arrives exact: every event in order, sequence numbers without gaps", async () => {
  const server = await fastServer();
  const response = await fetch(`${server.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ input: "go", stream: true, store: false }),
  });
  const body = await response.text();
  const blocks = body.split("\n\n").filter((block) => block !== "");
  const events = blocks.map((block) => {
    const [eventLine, dataLine] = block.split("\n");
    const event = JSON.parse(dataLine!.slice("data: ".length)) as Event;
    assert.equal(eventLine, `event: ${event.type}`);
    return event;
  });
  assertExact(events);
});

test("over WebSocket a fast stream arrives exact, one frame per event", async () => {
  const server = await fastServer();
  const socket = new WebSocket(`${server.url.replace(/^http/, "ws")}/v1/responses`);
  await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
  const events: Event[] = [];
  const done = new Promise<void>((resolve) =>
    socket.on("message", (data) => {
      // Each frame is exactly one event: a frame holding two would not parse as one JSON value.
      const event = JSON.parse(data.toString()) as Event;
      events.push(event);
      if (event.type === "response.completed") resolve();
    }),
  );
  socket.send(JSON.stringify({ type: "response.create", input: "go", store: false }));
  await done;
  socket.close();
  assertExact(events);
});
