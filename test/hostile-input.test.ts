/**
 * A corpus of hostile input, over HTTP and WebSocket, against a real `spark serve` process: every
 * field of every JSON route and frame type gets every hostile value (deep nesting, huge strings,
 * wrong types, prototype keys, broken escapes), plus malformed paths, methods, headers and frames.
 *
 * The class, not the example: whatever the input, the answer is a 4xx with an OpenAI-shaped error
 * (or a normal response), no error echoes more than a few KiB, every response that starts ends with
 * exactly one terminal event, the connection stays usable, and at the end the same process is
 * alive, answers /healthz and logged no internal error.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { file, firstLine, freshDir, spawnCli, startScriptServe, stop, type Cli } from "./helpers/cli.js";
import { scriptAppArgs } from "./helpers/app.js";
import { TERMINAL_TYPES, WsClient, type ServerEvent } from "./helpers/ws-client.js";
import { HOSTILE, httpCases, wsFrames } from "./fixtures/hostile-corpus.js";

/** Errors are small: a hostile value is never echoed back whole. */
const MAX_ERROR_BYTES = 4096;
/** Only to keep a broken server from hanging the suite; no assertion depends on it. */
const SAFETY_TIMEOUT_MS = 20_000;
const MAX_BODY_BYTES = 256 * 1024;

let server: Cli & { url: string };

before(async () => {
  const script = file(
    "hostile.jsonl",
    JSON.stringify({ output: [{ type: "message", text: "Still here, still answering." }] }),
  );
  server = await startScriptServe(script, ["--max-body-bytes", String(MAX_BODY_BYTES)]);
});

after(async () => {
  if (server.child.exitCode === null) await stop(server);
});

interface ErrorBody {
  error: { type: string; code: string | null; message: string; param: string | null };
}

function assertErrorShape(body: unknown, context: string): asserts body is ErrorBody {
  const error = (body as { error?: Record<string, unknown> } | null)?.error;
  assert.ok(error && typeof error === "object", `${context}: no error object in ${JSON.stringify(body)}`);
  assert.deepEqual(Object.keys(error).sort(), ["code", "message", "param", "type"], context);
  assert.equal(typeof error.message, "string", context);
  assert.ok((error.message as string).length > 0, context);
}

/** Checks one SSE body: a stream that started ends with exactly one terminal (or error) event. */
function assertSseEnds(text: string, context: string): void {
  const events = text
    .split("\n\n")
    .filter((block) => block.trim() !== "")
    .map((block) => /^data: (.*)$/m.exec(block)?.[1] ?? "");
  assert.ok(events.length > 0, `${context}: an empty stream`);
  const last = events.at(-1)!;
  if (last === "[DONE]") return; // Chat Completions
  const parsed = JSON.parse(last) as { type: string };
  const terminals = events.filter((data) =>
    /"type":"(response\.(completed|incomplete|failed)|error)"/.test(data.slice(0, 80)),
  );
  assert.ok(
    TERMINAL_TYPES.has(parsed.type) || parsed.type === "error",
    `${context}: the stream ended with ${parsed.type}`,
  );
  assert.equal(terminals.length, 1, `${context}: ${terminals.length} terminal events`);
}

test("every field of every JSON route, with every hostile value, gets a clean answer", async () => {
  const cases = httpCases(MAX_BODY_BYTES);
  const statuses = new Map<number, number>();
  for (const c of cases) {
    const response = await fetch(server.url + c.path, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: c.body,
      signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
    });
    const text = await response.text();
    statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
    assert.ok(response.status < 500, `${c.name}: ${response.status} ${text.slice(0, 300)}`);
    if (response.status >= 400) {
      assert.ok(Buffer.byteLength(text) <= MAX_ERROR_BYTES, `${c.name}: a ${text.length}-byte error`);
      assertErrorShape(JSON.parse(text), c.name);
    } else if ((response.headers.get("content-type") ?? "").startsWith("text/event-stream")) {
      assertSseEnds(text, c.name);
    } else {
      JSON.parse(text);
    }
  }
  // The corpus exercised both refusals and acceptances (hostile is not always invalid).
  assert.ok((statuses.get(400) ?? 0) > 100, `statuses: ${JSON.stringify([...statuses])}`);
  assert.ok((statuses.get(200) ?? 0) > 10, `statuses: ${JSON.stringify([...statuses])}`);
});

test("deep nesting is refused at the edge with a 400 that names the field", async () => {
  for (const path of ["/v1/responses", "/v1/chat/completions", "/v1/responses/compact"]) {
    for (const stream of [false, true]) {
      const field = path === "/v1/chat/completions" ? "messages" : "input";
      const response = await fetch(server.url + path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: `{"stream":${stream},"${field}":${HOSTILE.deep_array}}`,
      });
      assert.equal(response.status, 400, path);
      const body = (await response.json()) as ErrorBody;
      assert.equal(body.error.code, "nesting_too_deep");
      assert.equal(body.error.param, field);
    }
  }
});

test("malformed paths, methods and content types get OpenAI-shaped errors", async () => {
  const requests: [string, string, number, string][] = [
    ["GET", "/v1/responses/%ZZ", 400, "invalid_path"],
    ["GET", "/v1/responses/%E0%A4%A/input_items", 400, "invalid_path"],
    ["DELETE", "/v1/responses/%", 400, "invalid_path"],
    ["GET", "/v1/models/%FF%FE", 400, "invalid_path"],
    ["GET", "/v1/responses/%00", 404, "response_not_found"],
    ["GET", `/v1/responses/${"a".repeat(8000)}`, 404, "response_not_found"],
    ["PUT", "/v1/responses", 405, "method_not_allowed"],
    ["OPTIONS", "/v1/responses", 405, "method_not_allowed"],
    ["GET", "/%2e%2e/%2e%2e/etc/passwd", 404, "unknown_route"],
  ];
  for (const [method, path, status, code] of requests) {
    const response = await fetch(server.url + path, { method });
    const text = await response.text();
    assert.equal(response.status, status, `${method} ${path.slice(0, 40)}: ${text.slice(0, 200)}`);
    assert.ok(text.length <= MAX_ERROR_BYTES, `${method} ${path.slice(0, 40)}: a ${text.length}-byte error`);
    const body = JSON.parse(text) as ErrorBody;
    assertErrorShape(body, path);
    assert.equal(body.error.code, code);
  }
  for (const type of [
    undefined,
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
  ]) {
    const response = await fetch(`${server.url}/v1/responses`, {
      method: "POST",
      headers: type === undefined ? {} : { "content-type": type },
      body: type === undefined ? new Uint8Array(Buffer.from('{"input":"hi"}')) : '{"input":"hi"}',
    });
    assert.equal(response.status, 415, String(type));
    assert.equal(((await response.json()) as ErrorBody).error.code, "unsupported_media_type");
  }
});

/** One raw HTTP exchange: writes `request`, returns everything read until the server closes. */
function rawExchange(url: string, request: string): Promise<string> {
  const { port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), "127.0.0.1");
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => socket.destroy(), SAFETY_TIMEOUT_MS);
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString("utf8"));
    });
    socket.on("connect", () => socket.end(request));
  });
}

function rawStatus(text: string): { status: number; body: ErrorBody | undefined } {
  const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(text)?.[1] ?? 0);
  const body = text.slice(text.indexOf("\r\n\r\n") + 4);
  return { status, body: body ? (JSON.parse(body) as ErrorBody) : undefined };
}

test("broken HTTP and WebSocket handshakes get OpenAI-shaped errors", async () => {
  const upgrade = (headers: string): string =>
    `GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n${headers}\r\n`;
  const cases: [string, string, number, string][] = [
    ["no Host", "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400, "missing_host"],
    [
      "TRACE",
      "TRACE /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
      405,
      "method_not_allowed",
    ],
    ["CONNECT", "CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n", 405, "method_not_allowed"],
    [
      "huge header",
      `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: ${"a".repeat(20_000)}\r\n\r\n`,
      431,
      "headers_too_large",
    ],
    ["garbage", "\u0000\u0001 / HTTP/9\r\n\r\n", 400, "malformed_request"],
    // Absolute form (RFC 9112 §3.2.2) with a URL that does not parse: the client's 400, not a 500.
    [
      "absolute form, broken URL",
      "GET http://[::1/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
      400,
      "invalid_url",
    ],
    [
      "absolute form, bad port",
      "GET http://127.0.0.1:99999/v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
      400,
      "invalid_url",
    ],
    [
      "Expect other than 100-continue",
      "POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 999-foo\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
      417,
      "expectation_failed",
    ],
    [
      "bad chunk",
      "POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      400,
      "malformed_request",
    ],
    [
      "ws bad key",
      upgrade("Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: short\r\n"),
      400,
      "invalid_websocket_handshake",
    ],
    [
      "ws bad version",
      upgrade("Sec-WebSocket-Version: 12\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"),
      400,
      "invalid_websocket_handshake",
    ],
    [
      "ws bad protocol",
      upgrade(
        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: a,,b\r\n",
      ),
      400,
      "invalid_websocket_handshake",
    ],
    [
      "ws absolute form, broken URL",
      upgrade("Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n").replace(
        "/v1/responses",
        "http://[::1/v1/responses",
      ),
      400,
      "invalid_url",
    ],
    [
      "ws wrong path",
      upgrade("Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n").replace(
        "/v1/responses",
        "/v1/%ZZ",
      ),
      404,
      "unknown_route",
    ],
  ];
  for (const [name, request, status, code] of cases) {
    const reply = rawStatus(await rawExchange(server.url, request));
    assert.equal(reply.status, status, name);
    assert.ok(reply.body, `${name}: no body`);
    assertErrorShape(reply.body, name);
    assert.equal(reply.body.error.code, code, name);
  }
  // A well-formed absolute form is served like its path.
  const absolute = await rawExchange(
    server.url,
    `GET ${server.url}/healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
  );
  assert.match(absolute, /^HTTP\/1\.1 200 /);
  const head = await fetch(`${server.url}/healthz`, { method: "HEAD" });
  assert.equal(head.status, 200);
  assert.equal(await head.text(), "");
});

test("hostile WebSocket frames become error events and the connection stays usable", async () => {
  const client = await WsClient.connect(server.url);
  const frames = wsFrames(MAX_BODY_BYTES);
  for (const frame of frames) client.socket.send(frame, { binary: Buffer.isBuffer(frame) });
  // A last normal response: it completes once everything before it was handled.
  // On the default lane, where every valid create of the corpus went: FIFO, so it ends last.
  client.send({ type: "response.create", input: "still there?", metadata: { probe: "yes" } });
  const probe = await client.waitFor(
    (event) =>
      TERMINAL_TYPES.has(event.type) &&
      (event.response as { metadata?: Record<string, string> }).metadata?.probe === "yes",
  );
  assert.equal(probe.type, "response.completed");

  let errors = 0;
  const open = new Map<string, number>();
  for (const event of client.events) {
    assert.equal(typeof event.type, "string");
    assert.equal(typeof event.sequence_number, "number");
    if (event.type === "error") {
      errors++;
      assertErrorShape(event, JSON.stringify(event).slice(0, 200));
      assert.ok(
        event.status === undefined || (event.status as number) < 500,
        JSON.stringify(event).slice(0, 300),
      );
    }
    if (event.type === "error") {
      const size = JSON.stringify(event).length;
      assert.ok(size <= MAX_ERROR_BYTES, `a ${size}-byte error event`);
    }
    if (event.type === "response.steer.failed") {
      // The error is small; the input is handed back only when it was a valid steer (the client
      // sent it in this very frame), never when it was refused as invalid.
      const size = JSON.stringify(event.error).length;
      assert.ok(size <= MAX_ERROR_BYTES, `a ${size}-byte steer error`);
      const steer = event.steer as { input: unknown; previous_response_id: string };
      if ((event.error as { code: string }).code === "invalid_input") assert.equal(steer.input, null);
      assert.ok(steer.previous_response_id.length <= 400);
    }
    const id = (event.response as { id?: string } | undefined)?.id;
    if (event.type === "response.created" && id) open.set(id, 0);
    if (TERMINAL_TYPES.has(event.type) && id) open.set(id, (open.get(id) ?? 0) + 1);
  }
  assert.ok(errors > frames.length / 2, `${errors} error events for ${frames.length} frames`);
  for (const [id, terminals] of open)
    assert.equal(terminals, 1, `response ${id}: ${terminals} terminal events`);
  client.socket.close();
});

test("a text frame that is not UTF-8 closes that connection (1007), and only that one", async () => {
  const client = await WsClient.connect(server.url);
  const other = await WsClient.connect(server.url);
  // ws's client does not validate what it sends: a text frame that is not UTF-8.
  client.socket.send(Buffer.from([0xff, 0xfe, 0xfd]), { binary: false });
  const closed = await client.closed;
  assert.equal(closed.code, 1007);
  other.send({ type: "response.create", input: "hi" });
  const done = await other.waitFor((event: ServerEvent) => TERMINAL_TYPES.has(event.type));
  assert.equal(done.type, "response.completed");
  other.socket.close();
});

test("spark app: a broken absolute-form URL is a 400, an odd Expect a JSON 417, and the app keeps serving", async () => {
  const script = file("hostile-app.jsonl", JSON.stringify({ output: [{ type: "message", text: "hi" }] }));
  const app = spawnCli(["app", ...scriptAppArgs(freshDir("ws-"), script)], {
    SPARK_DATA_DIR: freshDir("data-"),
  });
  try {
    const url = /(http:\/\/127\.0\.0\.1:\d+)\//.exec(await firstLine(app))?.[1];
    assert.ok(url, app.stderr());
    const cases: [string, string, number, string][] = [
      [
        "broken URL",
        "GET http://[::1/app/session HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        400,
        "invalid_url",
      ],
      [
        "socket, broken URL",
        "GET http://[::1/app/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" +
          "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nOrigin: http://127.0.0.1\r\n\r\n",
        400,
        "invalid_url",
      ],
      [
        "Expect",
        "GET /app/session HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 999-foo\r\nConnection: close\r\n\r\n",
        417,
        "expectation_failed",
      ],
    ];
    for (const [name, request, status, code] of cases) {
      const reply = rawStatus(await rawExchange(url, request));
      assert.equal(reply.status, status, name);
      assert.equal(reply.body?.error.code, code, name);
    }
    const session = await rawExchange(
      url,
      `GET ${url}/app/session HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
    );
    assert.match(session, /^HTTP\/1\.1 200 /);
    assert.equal(app.child.exitCode, null);
  } finally {
    await stop(app);
  }
});

test("after the corpus the same process is alive, healthy, and logged no internal error", async () => {
  assert.equal(server.child.exitCode, null);
  const health = await fetch(`${server.url}/healthz`);
  assert.equal(health.status, 200);
  assert.doesNotMatch(server.stderr(), /internal error/);
});
