/**
 * Draining for a rolling restart (`SparkServer.drain`, what SIGTERM does), in process with the
 * script engine and real sockets: new connections are refused at once, a request that arrives on
 * a kept-alive connection gets 503 `server_shutting_down` (nothing done: a proxy may retry it
 * elsewhere), `/healthz` says `draining` (503) so load balancers stop sending work; responses in
 * flight finish (HTTP, SSE and WebSocket); a WebSocket connection refuses new turns and steers and
 * is closed with 1012 once its own responses have ended (an idle one at once); the drain timeout,
 * or `close()` meanwhile (a second signal), ends what is left with `server_shutdown`.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { connect } from "node:net";
import { test } from "node:test";
import { readSse } from "./helpers/cli.js";
import { until } from "./helpers/fleet.js";
import { startScriptServer } from "./helpers/servers.js";
import { terminalOf, textOf, WsClient } from "./helpers/ws-client.js";

const LONG = { output: [{ type: "message", text: "word ".repeat(60) }] };
// 60 pieces at 30 per second: two seconds, long enough to act while it runs.
const RATE = 30;

function post(url: string, body: object): Promise<Response> {
  return fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "spark", input: "go", ...body }),
  });
}

/**
 * A connection that has sent the first part of a request: `finish()` sends the rest and resolves
 * with everything read until the connection closes.
 */
async function halfSent(url: string, head: string): Promise<{ finish(rest: string): Promise<string> }> {
  const { hostname, port } = new URL(url);
  const socket = connect(Number(port), hostname);
  await once(socket, "connect");
  socket.setEncoding("utf8");
  let text = "";
  socket.on("data", (chunk: string) => (text += chunk));
  const closed = new Promise<string>((resolve) => socket.once("close", () => resolve(text)));
  socket.write(head);
  return {
    finish(rest: string) {
      socket.write(rest);
      return closed;
    },
  };
}

test("HTTP: in-flight responses finish, new connections are refused, a request that arrives meanwhile gets 503", async () => {
  const server = await startScriptServer([LONG], RATE);
  const url = server.url;
  const streaming = await post(url, { stream: true });
  const reading = readSse(streaming);
  const plain = post(url, {});
  // Requests whose first bytes came before the drain and the rest after (the server reads them then).
  const health = await halfSent(url, "GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n");
  const models = await halfSent(url, "GET /v1/models HTTP/1.1\r\nhost: 127.0.0.1\r\n");
  await until(
    async () => (await server.metrics.inFlight.get()).values[0]?.value === 2,
    "both responses to start",
  );

  const drained = server.drain(60_000);
  assert.equal(server.draining, true);
  await assert.rejects(post(url, {}), "the listening socket is closed");
  const healthText = await health.finish("\r\n");
  assert.match(healthText, /^HTTP\/1\.1 503/);
  assert.match(healthText, /"status":"draining"/);
  const modelsText = await models.finish("\r\n");
  assert.match(modelsText, /^HTTP\/1\.1 503/);
  assert.match(modelsText, /"code":"server_shutting_down"/);
  assert.match(modelsText, /retry-after: 1/i);

  const { events } = await reading;
  assert.equal(events.at(-1)!.type, "response.completed", "the stream ran to its end");
  const answer = await plain;
  assert.equal(answer.status, 200);
  assert.equal(answer.headers.get("connection"), "close", "no more requests on that connection");
  assert.equal(((await answer.json()) as { status: string }).status, "completed");
  await drained;
});

test("WebSocket: an idle connection is closed with 1012 at once; a busy one refuses new turns and steers, finishes, then 1012", async () => {
  const server = await startScriptServer([LONG], RATE);
  const busy = await WsClient.connect(server.url);
  const idle = await WsClient.connect(server.url);
  busy.send({ type: "response.create", model: "spark", input: "long" });
  const created = await busy.waitForType("response.created");
  const id = (created.response as { id: string }).id;
  await busy.waitForType("response.output_text.delta");

  const drained = server.drain(60_000);
  assert.deepEqual(await idle.closed, { code: 1012, reason: "service restart" });
  const from = busy.events.length;
  busy.send({ type: "response.create", model: "spark", input: "another" });
  const refused = await busy.waitForType("error", from);
  assert.equal(refused.status, 503);
  assert.equal((refused.error as { code: string }).code, "server_shutting_down");
  busy.send({ type: "response.steer", previous_response_id: id, input: "faster" });
  const steer = await busy.waitForType("response.steer.failed", from);
  assert.equal((steer.error as { code: string }).code, "server_shutting_down");

  const closed = await busy.closed;
  assert.deepEqual(closed, { code: 1012, reason: "service restart" });
  const events = busy.responseEvents(id);
  assert.equal(terminalOf(events).type, "response.completed");
  assert.equal(textOf(events).split("word").length - 1, 60, "the whole answer");
  assert.equal(
    busy.events.filter((event) => event.type === "response.created").length,
    1,
    "the refused turn never started",
  );
  await drained;
});

test("the drain timeout, or close() during a drain, ends what is left with server_shutdown", async () => {
  for (const end of ["timeout", "close"] as const) {
    // 60 pieces at 5 per second: twelve seconds, far longer than either ending takes.
    const server = await startScriptServer([LONG], 5);
    const socket = await WsClient.connect(server.url);
    socket.send({ type: "response.create", model: "spark", input: "long" });
    await socket.waitForType("response.output_text.delta");
    const streaming = await post(server.url, { stream: true });
    const reading = readSse(streaming);
    const drained = server.drain(end === "timeout" ? 300 : 60_000);
    if (end === "close") void server.close();
    await drained;
    const terminal = await socket.waitFor((event) => event.type === "response.incomplete");
    assert.equal(
      (terminal.response as { incomplete_details: { reason: string } }).incomplete_details.reason,
      "server_shutdown",
    );
    assert.equal((await socket.closed).code, 1012, "told to reconnect elsewhere");
    const { events } = await reading;
    const last = events.at(-1)!;
    assert.equal(last.type, "response.incomplete", end);
    assert.equal(
      (last.data.response as { incomplete_details: { reason: string } }).incomplete_details.reason,
      "server_shutdown",
    );
  }
});

test("work that outlives its request (background responses) takes part: the drain waits for it, a timeout hands it back", async () => {
  const server = await startScriptServer([LONG], RATE);
  // A stand-in for a background response: it ends when told to, or when the drain runs out.
  let finish: () => void = () => {};
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const closedWith: string[] = [];
  server.addShutdownParticipant({
    drain: () => finished,
    close: async (reason) => void closedWith.push(reason),
  });
  let drained = false;
  const draining = server.drain(60_000).then(() => (drained = true));
  await until(() => server.draining, "the drain to start");
  assert.equal(drained, false, "the drain waits for it");
  finish();
  await draining;
  assert.deepEqual(closedWith, ["server_shutdown"], "then it is closed like everything else (nothing left)");

  const stuck = await startScriptServer([LONG], RATE);
  const reasons: string[] = [];
  stuck.addShutdownParticipant({
    drain: () => new Promise(() => {}),
    close: async (reason) => void reasons.push(reason),
  });
  await stuck.drain(200);
  assert.deepEqual(reasons, ["server_shutdown"]);
});
