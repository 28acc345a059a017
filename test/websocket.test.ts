/**
 * WebSocket mode on /v1/responses against a real server on port 0 (script engine behind): frames,
 * continuation from the connection's cache, stream_id lanes, limits, bad frames, cancellation on
 * close, keepalive and backpressure.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import WebSocket from "ws";
import type { SparkServer } from "../src/server/http-server.js";
import { startScriptServer } from "./helpers/servers.js";
import { terminalOf, textOf, WsClient, type ServerEvent } from "./helpers/ws-client.js";

const FIRST = "First answer, streamed in pieces.";
const SECOND = "Second answer.";
const THIRD = "Third answer.";
const LINES = [
  { output: [{ type: "message", text: FIRST }] },
  { output: [{ type: "message", text: SECOND }] },
  { output: [{ type: "message", text: THIRD }] },
];

describe("WebSocket mode", () => {
  let server: SparkServer;
  before(async () => {
    server = await startScriptServer(LINES);
  });
  after(() => server.close());

  test("response.create streams the same numbered events as SSE, ending with one terminal event", async () => {
    const client = await WsClient.connect(server.url);
    const events = await client.turn({ model: "spark", input: "hi" });
    assert.equal(events[0]?.type, "response.created");
    assert.equal(events[1]?.type, "response.in_progress");
    assert.deepEqual(
      events.map((e) => e.sequence_number),
      events.map((_, i) => i),
    );
    assert.equal(events.filter(terminalTypes).length, 1);
    assert.equal(terminalOf(events).type, "response.completed");
    assert.equal(textOf(events), FIRST);
    assert.ok(
      events.every((e) => e.stream_id === undefined),
      "the default lane adds no stream_id",
    );
    await client.close();
  });

  test("generate:false answers created and completed with no output and a chainable id", async () => {
    const client = await WsClient.connect(server.url);
    const prewarm = await client.turn({
      model: "spark",
      input: "",
      instructions: "Be brief.",
      generate: false,
      store: false,
    });
    assert.deepEqual(
      prewarm.map((e) => e.type),
      ["response.created", "response.completed"],
    );
    const warmed = terminalOf(prewarm).response;
    assert.deepEqual(warmed.output, []);
    const next = await client.turn({
      model: "spark",
      previous_response_id: warmed.id,
      input: "hi",
      store: false,
    });
    assert.equal(textOf(next), FIRST, "the prewarm is not a model turn");
    assert.equal(terminalOf(next).response.previous_response_id, warmed.id);
    await client.close();
  });

  test("store:false turns continue from the connection's cache with only the new input", async () => {
    const client = await WsClient.connect(server.url);
    const first = await client.turn({ model: "spark", input: "one", store: false });
    const sentBefore = client.bytesSent;
    const second = await client.turn({
      model: "spark",
      previous_response_id: terminalOf(first).response.id,
      input: [{ role: "user", content: "two" }],
      store: false,
    });
    assert.equal(textOf(second), SECOND, "the cached history holds the first turn's output");
    const third = await client.turn({
      model: "spark",
      previous_response_id: terminalOf(second).response.id,
      input: "three",
      store: false,
    });
    assert.equal(textOf(third), THIRD);
    assert.ok(client.bytesSent - sentBefore < 400, "continuations send only the new items");

    // Another connection has no such cache, and store:false left nothing in the store.
    const other = await WsClient.connect(server.url);
    other.send({ type: "response.create", previous_response_id: terminalOf(second).response.id, input: "x" });
    const error = await other.waitForType("error");
    assert.equal(error.status, 400);
    assert.deepEqual(error.error, {
      type: "invalid_request_error",
      code: "previous_response_not_found",
      message: `Previous response with id '${terminalOf(second).response.id}' not found.`,
      param: "previous_response_id",
    });
    const after = await other.turn({ input: "still usable" });
    assert.equal(terminalOf(after).type, "response.completed");
    await Promise.all([client.close(), other.close()]);
  });

  test("store:true chains continue on another connection through the store", async () => {
    const first = await WsClient.connect(server.url);
    const events = await first.turn({ input: "one" });
    await first.close();
    const second = await WsClient.connect(server.url);
    const next = await second.turn({ previous_response_id: terminalOf(events).response.id, input: "two" });
    assert.equal(textOf(next), SECOND);
    await second.close();
  });

  test("bad frames get error events with codes and leave the connection usable", async () => {
    const client = await WsClient.connect(server.url);
    // Only errors arrive here, so the nth error is the nth event.
    const nthErrorCode = async (n: number) =>
      ((await client.waitFor(isError, n)).error as { code: string }).code;
    client.socket.send(Buffer.from([1, 2, 3]), { binary: true });
    assert.equal(await nthErrorCode(0), "invalid_frame");
    client.socket.send("{not json");
    assert.equal(await nthErrorCode(1), "invalid_json");
    client.send({ type: "response.unknown" });
    assert.equal(await nthErrorCode(2), "unknown_event_type");
    client.send(["response.create"]);
    assert.equal(await nthErrorCode(3), "invalid_frame");
    client.send({ type: "response.create", input: 42 });
    const invalid = await client.waitFor(isError, 4);
    assert.equal(invalid.status, 400);
    assert.equal((invalid.error as { param: string }).param, "input");
    client.send({ type: "response.create", input: "x", stream_id: "bad id!" });
    assert.equal(await nthErrorCode(5), "invalid_stream_id");
    client.send({ type: "response.create", input: "x", background: true });
    assert.equal(await nthErrorCode(6), "unsupported_parameter");
    client.send({ type: "response.create", input: "x", model: "no-such-model" });
    assert.equal(await nthErrorCode(7), "model_not_found");
    // Codex's acknowledgement frame needs no answer: nothing comes back for it.
    client.send({ type: "response.processed", response_id: "resp_x" });
    const events = await client.turn({ input: "still here" });
    assert.equal(terminalOf(events).type, "response.completed");
    assert.equal(client.events.filter(isError).length, 8, "no error for response.processed");
    await client.close();
  });

  test("an upgrade elsewhere than /v1/responses is a 404", async () => {
    const socket = new WebSocket(`${server.url.replace("http", "ws")}/v1/chat/completions`);
    const status = await new Promise<number>((resolve) =>
      socket.once("unexpected-response", (_request, response) => resolve(response.statusCode ?? 0)),
    );
    assert.equal(status, 404);
  });
});

describe("stream_id lanes", () => {
  let server: SparkServer;
  before(async () => {
    // 400 tokens/s, so responses overlap in time.
    server = await startScriptServer(LINES, 400, { websocket: { limits: { maxInFlight: 2, maxLanes: 3 } } });
  });
  after(() => server.close());

  test("lanes run concurrently, every event echoes its lane, and a lane is FIFO", async () => {
    const client = await WsClient.connect(server.url);
    client.send({ type: "response.create", input: "a1", stream_id: "a" });
    client.send({ type: "response.create", input: "b1", stream_id: "b" });
    client.send({ type: "response.create", input: "a2", stream_id: "a", store: false });
    const done = () => client.events.filter((e) => terminalTypes(e)).length;
    await client.waitFor(() => done() === 3);
    const laneA = client.events.filter((e) => e.stream_id === "a");
    const laneB = client.events.filter((e) => e.stream_id === "b");
    assert.equal(laneA.length + laneB.length, client.events.length, "every event names its lane");
    // Lane b ran while lane a's first response was generating.
    const firstADone = client.events.findIndex((e) => e.stream_id === "a" && terminalTypes(e));
    const firstBDelta = client.events.findIndex(
      (e) => e.stream_id === "b" && e.type === "response.output_text.delta",
    );
    assert.ok(firstBDelta < firstADone, "lanes interleave");
    // FIFO in lane a: its second response starts only after its first ended.
    const created = laneA.filter((e) => e.type === "response.created");
    assert.equal(created.length, 2);
    assert.ok(client.events.indexOf(created[1]!) > firstADone);
    await client.close();
  });

  test("a chain forks onto a new lane from another lane's latest response", async () => {
    const client = await WsClient.connect(server.url);
    const base = await client.turn({ input: "base", stream_id: "main", store: false });
    const id = terminalOf(base).response.id;
    client.send({
      type: "response.create",
      previous_response_id: id,
      input: "left",
      stream_id: "left",
      store: false,
    });
    client.send({
      type: "response.create",
      previous_response_id: id,
      input: "right",
      stream_id: "right",
      store: false,
    });
    await client.waitFor((e) => e.stream_id === "left" && terminalTypes(e));
    await client.waitFor((e) => e.stream_id === "right" && terminalTypes(e));
    for (const lane of ["left", "right"]) {
      const events = client.events.filter((e) => e.stream_id === lane);
      assert.equal(textOf(events), SECOND, `lane ${lane} continued the shared history`);
    }
    await client.close();
  });

  test("the in-flight limit queues extra responses instead of refusing them", async () => {
    const client = await WsClient.connect(server.url);
    for (const lane of ["x", "y", "z"])
      client.send({ type: "response.create", input: lane, stream_id: lane });
    await client.waitFor(() => client.events.filter((e) => terminalTypes(e)).length === 3);
    const firstEnd = client.events.findIndex((e) => terminalTypes(e));
    const zCreated = client.events.findIndex((e) => e.stream_id === "z" && e.type === "response.created");
    assert.ok(zCreated > firstEnd, "the third lane waited for a free slot (limit 2)");
    assert.ok(client.events.every((e) => e.type !== "error"));
    await client.close();
  });

  test("more named lanes than allowed get websocket_stream_limit_reached", async () => {
    const client = await WsClient.connect(server.url);
    for (const lane of ["l1", "l2", "l3", "l4"])
      client.send({ type: "response.create", input: "x", stream_id: lane });
    const error = await client.waitFor(isError);
    assert.equal((error.error as { code: string }).code, "websocket_stream_limit_reached");
    assert.equal(error.stream_id, "l4");
    await client.waitFor(() => client.events.filter((e) => terminalTypes(e)).length === 3);
    await client.close();
  });
});

describe("connection limits", () => {
  test("a frame over the size limit gets an error and a close", async () => {
    const server = await startScriptServer(LINES, undefined, { maxBodyBytes: 1024 });
    try {
      const client = await WsClient.connect(server.url);
      client.send({ type: "response.create", input: "x".repeat(1500) });
      const error = await client.waitFor(isError);
      assert.equal((error.error as { code: string }).code, "frame_too_large");
      assert.equal((await client.closed).code, 1009);
    } finally {
      await server.close();
    }
  });

  test("a connection past its lifetime ends its responses, gets websocket_connection_limit_reached and is closed", async () => {
    const server = await startScriptServer(
      [{ output: [{ type: "message", text: "word ".repeat(2000) }] }],
      200,
      {
        websocket: { maxConnectionMs: 300 },
      },
    );
    try {
      const client = await WsClient.connect(server.url);
      client.send({ type: "response.create", input: "long" });
      const error = await client.waitFor(isError);
      assert.equal((error.error as { code: string }).code, "websocket_connection_limit_reached");
      const terminal = client.events.find((e) => terminalTypes(e));
      assert.equal(terminal?.type, "response.incomplete", "the response in flight ended before the error");
      assert.ok(client.events.indexOf(terminal!) < client.events.indexOf(error));
      assert.equal((await client.closed).code, 1000);
    } finally {
      await server.close();
    }
  });

  test("closing the socket stops every generation it started", async () => {
    const server = await startScriptServer(
      [{ output: [{ type: "message", text: "word ".repeat(5000) }] }],
      500,
    );
    try {
      const client = await WsClient.connect(server.url);
      for (const lane of ["a", "b", "c"])
        client.send({ type: "response.create", input: "go", stream_id: lane });
      await client.waitFor(
        () => client.events.filter((e) => e.type === "response.output_text.delta").length > 30,
      );
      assert.equal(await inFlight(server), 3);
      await client.close();
      await waitUntil(async () => (await inFlight(server)) === 0);
      assert.match(await server.metrics.text(), /spark_cancellations_total 3/);
    } finally {
      await server.close();
    }
  });

  test("the server pings, and drops a client that stops answering", async () => {
    const server = await startScriptServer(LINES, undefined, { websocket: { pingIntervalMs: 50 } });
    try {
      const polite = await WsClient.connect(server.url);
      let pings = 0;
      polite.socket.on("ping", () => pings++);
      const silent = await WsClient.connect(server.url, { autoPong: false });
      const { code } = await silent.closed;
      assert.equal(code, 1006, "terminated without a close frame");
      assert.ok(pings >= 2);
      assert.equal(polite.socket.readyState, WebSocket.OPEN);
      await polite.close();
    } finally {
      await server.close();
    }
  });

  test("a slow reader pauses generation instead of growing server memory", async () => {
    const text = "abcd ".repeat(80_000);
    const server = await startScriptServer([{ output: [{ type: "message", text }] }], undefined, {
      websocket: { highWaterBytes: 64 * 1024 },
    });
    try {
      const client = await WsClient.connect(server.url);
      const raw = (client.socket as unknown as { _socket: import("node:net").Socket })._socket;
      raw.pause();
      client.send({ type: "response.create", input: "lots" });
      await new Promise((resolve) => setTimeout(resolve, 800));
      const stats = server.websocketStats();
      assert.equal(stats.connections, 1);
      assert.ok(stats.unsentBytes <= 64 * 1024 + 1024, `unsent bytes stay bounded (${stats.unsentBytes})`);
      assert.equal(await inFlight(server), 1, "the response is paused, not finished");
      raw.resume();
      const terminal = await client.waitFor((e) => terminalTypes(e));
      assert.equal(terminal.type, "response.completed");
      assert.equal(textOf(client.events), text);
      await client.close();
    } finally {
      await server.close();
    }
  });

  test("with WebSocket mode off, the upgrade gets 426", async () => {
    const server = await startScriptServer(LINES, undefined, { websocket: false });
    try {
      await assert.rejects(WsClient.connect(server.url), /upgrade refused with 426/);
    } finally {
      await server.close();
    }
  });
});

function terminalTypes(event: ServerEvent): boolean {
  return (
    event.type === "response.completed" ||
    event.type === "response.incomplete" ||
    event.type === "response.failed"
  );
}

function isError(event: ServerEvent): boolean {
  return event.type === "error";
}

async function inFlight(server: SparkServer): Promise<number> {
  const match = /^spark_responses_in_flight (\d+)/m.exec(await server.metrics.text());
  return Number(match?.[1] ?? -1);
}

async function waitUntil(condition: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error("condition not reached");
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}
