/**
 * Hostile and malformed input against a real SparkServer on 127.0.0.1: every refusal has the right
 * status and an OpenAI-shaped error body, broken HTTP never takes the server down, and the server
 * keeps answering normal requests afterwards.
 */
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, test } from "node:test";
import { parseScript, ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer } from "../src/server/http-server.js";

const MAX_BODY_BYTES = 2048;
/** Only to avoid hanging forever on a broken server; no assertion depends on it. */
const SAFETY_TIMEOUT_MS = 10_000;

let server: SparkServer;
let baseUrl: string;
let port: number;

before(async () => {
  server = new SparkServer({
    engine: new ScriptEngine({
      lines: parseScript(JSON.stringify({ output: [{ type: "message", text: "Hello from the script." }] })),
    }),
    port: 0,
    maxBodyBytes: MAX_BODY_BYTES,
    websocket: false,
  });
  baseUrl = await server.listen();
  port = Number(new URL(baseUrl).port);
});

after(async () => {
  await server.close();
});

interface ErrorBody {
  error: { type: string; code: string | null; message: string; param: string | null };
}

function assertErrorShape(body: unknown): asserts body is ErrorBody {
  assert.equal(typeof body, "object");
  assert.ok(body !== null);
  const error = (body as { error?: unknown }).error as Record<string, unknown> | undefined;
  assert.ok(error && typeof error === "object", `expected an "error" object in ${JSON.stringify(body)}`);
  assert.deepEqual(Object.keys(error).sort(), ["code", "message", "param", "type"]);
  assert.equal(typeof error.type, "string");
  assert.equal(typeof error.message, "string");
  assert.ok((error.message as string).length > 0, "error message must not be empty");
  assert.ok(error.code === null || typeof error.code === "string");
  assert.ok(error.param === null || typeof error.param === "string");
}

async function send(
  path: string,
  init: { method?: string; body?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; headers: Headers; text: string }> {
  const response = await fetch(baseUrl + path, {
    method: init.method ?? "POST",
    headers: { "content-type": "application/json", ...init.headers },
    ...(init.body !== undefined ? { body: init.body } : {}),
    signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
  });
  return { status: response.status, headers: response.headers, text: await response.text() };
}

async function expectError(
  path: string,
  body: string,
  expected: { status: number; type?: string; code?: string; param?: string | null },
  method = "POST",
): Promise<ErrorBody> {
  const response = await send(path, method === "GET" ? { method } : { method, body });
  assert.equal(response.status, expected.status, `status for ${body}: ${response.text}`);
  assert.match(response.headers.get("content-type") ?? "", /application\/json/);
  const parsed: unknown = JSON.parse(response.text);
  assertErrorShape(parsed);
  if (expected.type !== undefined) assert.equal(parsed.error.type, expected.type);
  if (expected.code !== undefined) assert.equal(parsed.error.code, expected.code);
  if (expected.param !== undefined) assert.equal(parsed.error.param, expected.param);
  return parsed;
}

interface RawResult {
  /** Everything the server wrote before closing (or before the safety timeout). */
  text: string;
  /** True when the server closed the connection. */
  closed: boolean;
}

/**
 * Writes raw bytes on a fresh TCP connection and collects the reply until the server closes the
 * connection. `halfClose` ends our side after writing.
 */
function raw(chunks: readonly (string | Buffer)[], halfClose: boolean): Promise<RawResult> {
  return new Promise((resolve) => {
    const socket = net.connect(port, "127.0.0.1");
    const received: Buffer[] = [];
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      socket.destroy();
    }, SAFETY_TIMEOUT_MS);
    socket.on("data", (chunk: Buffer) => received.push(chunk));
    // EPIPE/ECONNRESET while we are still writing is fine: the server may close first.
    socket.on("error", () => {});
    socket.on("close", () => {
      clearTimeout(timer);
      resolve({ text: Buffer.concat(received).toString("utf8"), closed: !timedOut });
    });
    socket.on("connect", () => {
      for (const chunk of chunks) socket.write(chunk);
      if (halfClose) socket.end();
    });
  });
}

/** Splits a raw HTTP/1.1 response with a content-length body. */
function parseRawResponse(text: string): { status: number; headers: Record<string, string>; body: string } {
  const split = text.indexOf("\r\n\r\n");
  assert.ok(split > 0, `not an HTTP response: ${JSON.stringify(text)}`);
  const [statusLine, ...headerLines] = text.slice(0, split).split("\r\n");
  const status = /^HTTP\/1\.1 (\d{3}) /.exec(statusLine ?? "");
  assert.ok(status, `bad status line: ${statusLine}`);
  const headers: Record<string, string> = {};
  for (const line of headerLines) {
    const colon = line.indexOf(":");
    headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { status: Number(status[1]), headers, body: text.slice(split + 4) };
}

async function assertStillServing(): Promise<void> {
  const response = await send("/v1/responses", { body: JSON.stringify({ input: "still there?" }) });
  assert.equal(response.status, 200, response.text);
  const body = JSON.parse(response.text) as { status: string; output: { content: { text: string }[] }[] };
  assert.equal(body.status, "completed");
  assert.equal(body.output[0]?.content[0]?.text, "Hello from the script.");
}

test("a well-formed request succeeds (baseline)", async () => {
  await assertStillServing();
});

test("malformed JSON is a 400 invalid_json", async () => {
  const body = await expectError("/v1/responses", '{"input": "hi",', {
    status: 400,
    type: "invalid_request_error",
    code: "invalid_json",
    param: null,
  });
  assert.match(body.error.message, /JSON/);
  await expectError("/v1/chat/completions", "{nope", { status: 400, code: "invalid_json" });
});

test("an empty body is a 400", async () => {
  await expectError("/v1/responses", "", { status: 400, type: "invalid_request_error", param: null });
});

test("a JSON body that is not an object is a 400", async () => {
  for (const body of ["[1, 2, 3]", '"just a string"', "42", "null"]) {
    await expectError("/v1/responses", body, { status: 400, type: "invalid_request_error", param: null });
  }
  await expectError("/v1/chat/completions", "[]", { status: 400, type: "invalid_request_error" });
});

test("wrong field types name the offending param", async () => {
  await expectError("/v1/responses", JSON.stringify({ input: 5 }), {
    status: 400,
    type: "invalid_request_error",
    param: "input",
  });
  await expectError("/v1/responses", JSON.stringify({ input: "hi", temperature: "hot" }), {
    status: 400,
    type: "invalid_request_error",
    param: "temperature",
  });
  await expectError("/v1/responses", JSON.stringify({ input: "hi", max_output_tokens: -1 }), {
    status: 400,
    type: "invalid_request_error",
    param: "max_output_tokens",
  });
  await expectError("/v1/responses", JSON.stringify({ input: "hi", stream: "yes" }), {
    status: 400,
    param: "stream",
  });
});

test("a function_call input item without call_id is a 400 naming the item", async () => {
  const body = await expectError(
    "/v1/responses",
    JSON.stringify({ input: [{ type: "function_call", name: "shell", arguments: "{}" }] }),
    { status: 400, type: "invalid_request_error" },
  );
  assert.ok(body.error.param, "param must be set");
  assert.match(body.error.param, /^input\[0\]/);
  // The second item is the broken one: the index must follow it.
  const second = await expectError(
    "/v1/responses",
    JSON.stringify({
      input: [
        { role: "user", content: "hi" },
        { type: "function_call_output", output: "done" },
      ],
    }),
    { status: 400 },
  );
  assert.match(second.error.param ?? "", /^input\[1\]/);
});

test("an unknown model is a 404 model_not_found on param model", async () => {
  for (const path of ["/v1/responses", "/v1/chat/completions"]) {
    const body = await expectError(
      path,
      JSON.stringify({
        model: "no-such-model",
        input: "hi",
        messages: [{ role: "user", content: "hi" }],
      }),
      { status: 404, code: "model_not_found", param: "model" },
    );
    assert.match(body.error.message, /no-such-model/);
  }
  await expectError("/v1/models/no-such-model", "", { status: 404, code: "model_not_found" }, "GET");
});

test("chat completions with no messages is a 400 on param messages", async () => {
  await expectError("/v1/chat/completions", JSON.stringify({ messages: [] }), {
    status: 400,
    type: "invalid_request_error",
    param: "messages",
  });
  await expectError("/v1/chat/completions", JSON.stringify({}), { status: 400, param: "messages" });
});

test("a body over the limit by content-length is a 413 request_too_large", async () => {
  const padding = "x".repeat(MAX_BODY_BYTES * 2);
  const body = await expectError("/v1/responses", JSON.stringify({ input: padding }), {
    status: 413,
    type: "invalid_request_error",
    code: "request_too_large",
    param: null,
  });
  assert.match(body.error.message, new RegExp(String(MAX_BODY_BYTES)));
  await assertStillServing();
});

test("a chunked body that streams past the limit is a 413 request_too_large", async () => {
  const chunk = "a".repeat(512);
  const chunks = Array.from({ length: 8 }, () => `${chunk.length.toString(16)}\r\n${chunk}\r\n`);
  // No terminating zero-size chunk: the server must stop at the limit, not wait for the end.
  const result = await raw(
    [
      "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n" +
        "transfer-encoding: chunked\r\n\r\n",
      ...chunks,
    ],
    false,
  );
  assert.ok(result.closed, "the server closes a connection whose body it stopped reading");
  const response = parseRawResponse(result.text);
  assert.equal(response.status, 413);
  assert.equal(response.headers["connection"], "close");
  const body: unknown = JSON.parse(response.body);
  assertErrorShape(body);
  assert.equal(body.error.code, "request_too_large");
  await assertStillServing();
});

test("a body that ends before its content-length gets a 400 incomplete_body and a close", async () => {
  const result = await raw(
    [
      "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n" +
        "content-length: 100\r\n\r\n",
      '{"input":"',
    ],
    true,
  );
  assert.ok(result.closed, "the server must close the connection");
  const response = parseRawResponse(result.text);
  assert.equal(response.status, 400);
  const body: unknown = JSON.parse(response.body);
  assertErrorShape(body);
  assert.equal(body.error.code, "incomplete_body");
  await assertStillServing();
});

test("garbage bytes that are not HTTP get a 400 and a closed connection", async () => {
  const result = await raw([Buffer.from([0x00, 0x01, 0xff, 0xfe]), "not http at all\r\n\r\n"], false);
  assert.ok(result.closed);
  assert.match(result.text, /^HTTP\/1\.1 400 /);
  await assertStillServing();
});

test("an unknown route is a 404", async () => {
  const body = await expectError("/v1/nothing-here", "{}", { status: 404, type: "not_found_error" });
  assert.match(body.error.message, /\/v1\/nothing-here/);
  await expectError("/", "", { status: 404 }, "GET");
});

test("a wrong method is a 405 with an allow header", async () => {
  // (GET /v1/chat/completions lists stored chat completions in OpenAI's API: a 404 that says why here.)
  const response = await send("/v1/completions", { method: "GET" });
  assert.equal(response.status, 405);
  assert.equal(response.headers.get("allow"), "POST");
  const body: unknown = JSON.parse(response.text);
  assertErrorShape(body);
  assert.equal(body.error.code, "method_not_allowed");

  const del = await send("/v1/models", { method: "DELETE" });
  assert.equal(del.status, 405);
  assert.equal(del.headers.get("allow"), "GET");
});

test("with WebSocket mode off, an upgrade on /v1/responses is refused with 426", async () => {
  const result = await raw(
    [
      "GET /v1/responses HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: Upgrade\r\nupgrade: websocket\r\n" +
        "sec-websocket-version: 13\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    ],
    false,
  );
  const response = parseRawResponse(result.text);
  assert.equal(response.status, 426);
  const body: unknown = JSON.parse(response.body);
  assertErrorShape(body);
  assert.equal(body.error.code, "websocket_not_supported");
});

test("after all of that the server still serves, streaming included", async () => {
  await assertStillServing();
  const response = await send("/v1/responses", { body: JSON.stringify({ input: "hi", stream: true }) });
  assert.equal(response.status, 200);
  const types = [...response.text.matchAll(/^event: (.+)$/gm)].map((m) => m[1]);
  assert.equal(types[0], "response.created");
  assert.equal(types.at(-1), "response.completed");
});

test("/metrics counts requests by route and 4xx status", async () => {
  const response = await send("/metrics", { method: "GET" });
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type") ?? "", /text\/plain/);
  const lines = response.text.split("\n").filter((l) => l.startsWith("spark_http_requests_total{"));
  assert.ok(lines.length > 0, "spark_http_requests_total has samples");
  const has = (route: string, status: string): boolean =>
    lines.some(
      (l) => l.includes(`route="${route}"`) && l.includes(`status="${status}"`) && / [1-9]\d*$/.test(l),
    );
  assert.ok(has("/v1/responses", "400"), lines.join("\n"));
  assert.ok(has("/v1/responses", "404"), lines.join("\n"));
  assert.ok(has("/v1/responses", "413"), lines.join("\n"));
  assert.ok(has("/v1/completions", "405"), lines.join("\n"));
  assert.ok(has("unmatched", "404"), lines.join("\n"));
  assert.ok(has("/v1/responses", "200"), lines.join("\n"));
});

test("/healthz is 200 with status ok", async () => {
  const response = await send("/healthz", { method: "GET" });
  assert.equal(response.status, 200);
  const body = JSON.parse(response.text) as { status: string };
  assert.equal(body.status, "ok");
});
