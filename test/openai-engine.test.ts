/**
 * The "openai" engine against fake upstreams: real HTTP servers on 127.0.0.1 speaking the Chat
 * Completions and Responses SSE protocols, so only the network boundary is simulated.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import type { EnginePart, EngineRequest } from "../src/engine/types.js";
import { OpenAIEngine } from "../src/engines/openai/openai-engine.js";
import type { OpenAIEngineOptions } from "../src/engines/openai/openai-engine.js";
import { SseParser, SseTooLargeError } from "../src/engines/openai/sse-lines.js";
import type { SseEvent } from "../src/engines/openai/sse-lines.js";
import { SparkError } from "../src/protocol/errors.js";
import { SparkServer } from "../src/server/http-server.js";
import { ConfigError, resolveSettings } from "../src/settings/config.js";
import { createModels } from "../src/cli/create-engine.js";
import { file, runToExit } from "./helpers/cli.js";
import { closedPort } from "./helpers/ports.js";

interface Recorded {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: string;
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse, body: string) => void | Promise<void>;

interface Upstream {
  baseUrl: string;
  requests: Recorded[];
  /** TCP connections accepted so far. */
  sockets(): number;
  close(): Promise<void>;
}

async function startUpstream(handler: Handler): Promise<Upstream> {
  const requests: Recorded[] = [];
  let sockets = 0;
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
      void handler(req, res, body);
    });
  });
  server.on("connection", () => sockets++);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    baseUrl: `http://127.0.0.1:${port}/v1`,
    requests,
    sockets: () => sockets,
    close: async () => {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function sseHeaders(res: http.ServerResponse): void {
  res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
}

function chatSse(events: unknown[]): string {
  return events.map((event) => `data: ${JSON.stringify(event)}\n\n`).join("") + "data: [DONE]\n\n";
}

function responsesSse(events: Record<string, unknown>[]): string {
  return events.map((event) => `event: ${String(event.type)}\ndata: ${JSON.stringify(event)}\n\n`).join("");
}

/** Writes `payload` in pieces of `size` bytes, each flushed separately, so the client sees many small reads. */
async function writeInPieces(res: http.ServerResponse, payload: string, size: number): Promise<void> {
  const bytes = Buffer.from(payload, "utf8");
  for (let i = 0; i < bytes.length; i += size) {
    await new Promise<void>((resolve) => res.write(bytes.subarray(i, i + size), () => resolve()));
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  res.end();
}

const chunk = (delta: Record<string, unknown>, finishReason: string | null = null) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  choices: [{ index: 0, delta, finish_reason: finishReason }],
});

const usageChunk = (usage: Record<string, unknown>) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  choices: [],
  usage,
});

function request(overrides: Partial<EngineRequest> = {}): EngineRequest {
  return {
    model: "upstream-model",
    items: [{ type: "message", role: "user", text: "hi" }],
    tools: [],
    toolChoice: "auto",
    parallelToolCalls: true,
    ...overrides,
  };
}

async function collect(
  engine: OpenAIEngine,
  req: EngineRequest,
  signal = new AbortController().signal,
): Promise<EnginePart[]> {
  const parts: EnginePart[] = [];
  for await (const part of engine.stream(req, signal)) parts.push(part);
  return parts;
}

function joined(parts: EnginePart[], type: "text-delta" | "tool-call-delta", id: string): string {
  return parts
    .filter(
      (part): part is Extract<EnginePart, { type: typeof type }> => part.type === type && part.id === id,
    )
    .map((part) => part.delta)
    .join("");
}

/** Runs `body` with an upstream and an engine, closing both whatever happens. */
async function withEngine(
  handler: Handler,
  options: Partial<OpenAIEngineOptions>,
  body: (engine: OpenAIEngine, upstream: Upstream) => Promise<void>,
): Promise<void> {
  const upstream = await startUpstream(handler);
  const engine = new OpenAIEngine({ baseUrl: upstream.baseUrl, ...options });
  try {
    await body(engine, upstream);
  } finally {
    await engine.close();
    await upstream.close();
  }
}

function isSparkError(status: number, code: string): (error: unknown) => boolean {
  return (error) => {
    assert.ok(error instanceof SparkError, `expected a SparkError, got ${String(error)}`);
    assert.equal(error.status, status);
    assert.equal(error.code, code);
    return true;
  };
}

test("chat: text streaming reassembles exactly across split bytes, CRLF and comments", async () => {
  const pieces = ["Hel", "lo, ", "wörld 👋", "\n", "done."];
  const payload =
    ": keep-alive comment\r\n\r\n" +
    chatSse([
      chunk({ role: "assistant", content: "" }),
      ...pieces.map((p) => chunk({ content: p })),
      chunk({}, "stop"),
    ])
      .split("\n")
      .join("\r\n");
  await withEngine(
    (_req, res) => {
      sseHeaders(res);
      void writeInPieces(res, payload, 5);
    },
    {},
    async (engine) => {
      const parts = await collect(engine, request());
      assert.deepEqual(
        parts.filter((part) => part.type !== "text-delta"),
        [
          { type: "text-start", id: "txt_0" },
          { type: "text-end", id: "txt_0" },
          {
            type: "finish",
            reason: "stop",
            usage: { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 },
          },
        ],
      );
      assert.equal(joined(parts, "text-delta", "txt_0"), pieces.join(""));
    },
  );
});

test("chat: usage with cached tokens is mapped, and finish_reason length", async () => {
  await withEngine(
    (_req, res) => {
      sseHeaders(res);
      res.end(
        chatSse([
          chunk({ content: "abc" }, "length"),
          usageChunk({
            prompt_tokens: 120,
            completion_tokens: 7,
            prompt_tokens_details: { cached_tokens: 96 },
          }),
        ]),
      );
    },
    {},
    async (engine) => {
      const parts = await collect(engine, request());
      assert.deepEqual(parts.at(-1), {
        type: "finish",
        reason: "length",
        usage: { inputTokens: 120, cachedInputTokens: 96, outputTokens: 7 },
      });
    },
  );
});

test("chat: parallel function calls split across many small writes are reassembled", async () => {
  const argsA = '{"path":"src/a.ts","line":3}';
  const argsB = '{"query":"naïve \\"quoted\\""}';
  const events = [
    chunk({
      tool_calls: [
        { index: 0, id: "call_up_1", type: "function", function: { name: "read", arguments: "" } },
      ],
    }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: argsA.slice(0, 9) } }] }),
    chunk({
      tool_calls: [
        { index: 1, type: "function", function: { name: "search", arguments: argsB.slice(0, 4) } },
      ],
    }),
    chunk({ tool_calls: [{ index: 0, function: { arguments: argsA.slice(9) } }] }),
    chunk({ tool_calls: [{ index: 1, function: { arguments: argsB.slice(4) } }] }),
    chunk({}, "tool_calls"),
    usageChunk({ prompt_tokens: 10, completion_tokens: 20 }),
  ];
  await withEngine(
    (_req, res) => {
      sseHeaders(res);
      void writeInPieces(res, chatSse(events), 3);
    },
    {},
    async (engine) => {
      const parts = await collect(
        engine,
        request({
          tools: [
            { kind: "function", name: "read", parameters: { type: "object" } },
            { kind: "function", name: "search", parameters: { type: "object" } },
          ],
        }),
      );
      const starts = parts.filter((part) => part.type === "tool-call-start");
      assert.equal(starts.length, 2);
      const [first, second] = starts;
      assert.deepEqual(first, {
        type: "tool-call-start",
        id: first?.id,
        kind: "function",
        name: "read",
        callId: "call_up_1",
      });
      assert.equal(second?.name, "search");
      assert.match(second?.callId ?? "", /^call_[0-9a-f]+$/);
      assert.equal(joined(parts, "tool-call-delta", first?.id ?? ""), argsA);
      assert.equal(joined(parts, "tool-call-delta", second?.id ?? ""), argsB);
      assert.equal(parts.filter((part) => part.type === "tool-call-end").length, 2);
      assert.deepEqual(parts.at(-1), {
        type: "finish",
        reason: "tool_calls",
        usage: { inputTokens: 10, cachedInputTokens: 0, outputTokens: 20 },
      });
    },
  );
});

test("chat: custom tools travel as function tools with an input string and come back as custom calls", async () => {
  const patch =
    '*** Begin Patch\n*** Update File: a.ts\n-const a = "x";\n+const a = "y"; // ✓ 😀\n*** End Patch';
  const args = JSON.stringify({ input: patch });
  // Fragment boundaries fall inside escapes (\n, \", and the surrogate pair of the emoji).
  const escaped = args.replace("😀", "\\ud83d\\ude00");
  const cuts = [
    3,
    12,
    escaped.indexOf("\\n") + 1,
    escaped.indexOf('\\"') + 1,
    escaped.indexOf("\\ud83d") + 4,
  ];
  const fragments: string[] = [];
  let from = 0;
  for (const cut of [...cuts.sort((a, b) => a - b), escaped.length]) {
    fragments.push(escaped.slice(from, cut));
    from = cut;
  }
  await withEngine(
    (_req, res) => {
      sseHeaders(res);
      res.end(
        chatSse([
          chunk({
            tool_calls: [{ index: 0, id: "call_p", function: { name: "apply_patch", arguments: "" } }],
          }),
          ...fragments.map((fragment) =>
            chunk({ tool_calls: [{ index: 0, function: { arguments: fragment } }] }),
          ),
          chunk({}, "tool_calls"),
        ]),
      );
    },
    {},
    async (engine, upstream) => {
      const parts = await collect(
        engine,
        request({
          items: [
            { type: "message", role: "user", text: "fix it" },
            {
              type: "tool_call",
              kind: "custom",
              callId: "call_old",
              name: "apply_patch",
              input: "*** Begin Patch\n",
            },
            { type: "tool_result", kind: "custom", callId: "call_old", output: "Done" },
          ],
          tools: [
            { kind: "custom", name: "apply_patch", description: "Apply a patch", format: { type: "text" } },
          ],
        }),
      );
      const sent = JSON.parse(upstream.requests[0]?.body ?? "{}") as Record<string, unknown>;
      assert.deepEqual(sent.tools, [
        {
          type: "function",
          function: {
            name: "apply_patch",
            description: "Apply a patch",
            parameters: { type: "object", properties: { input: { type: "string" } }, required: ["input"] },
          },
        },
      ]);
      assert.deepEqual(sent.messages, [
        { role: "user", content: "fix it" },
        {
          role: "assistant",
          content: null,
          tool_calls: [
            {
              id: "call_old",
              type: "function",
              function: { name: "apply_patch", arguments: JSON.stringify({ input: "*** Begin Patch\n" }) },
            },
          ],
        },
        { role: "tool", tool_call_id: "call_old", content: "Done" },
      ]);

      const start = parts.find((part) => part.type === "tool-call-start");
      assert.deepEqual(start, {
        type: "tool-call-start",
        id: start?.id,
        kind: "custom",
        name: "apply_patch",
        callId: "call_p",
      });
      assert.equal(joined(parts, "tool-call-delta", start?.id ?? ""), patch);
      assert.ok(
        parts.filter((part) => part.type === "tool-call-delta").length > 1,
        "input is streamed, not sent at once",
      );
      assert.equal(parts.at(-1)?.type, "finish");
    },
  );
});

test("chat: request body, bearer key, and keep-alive reuse over 5 sequential requests", async () => {
  await withEngine(
    (_req, res) => {
      sseHeaders(res);
      res.end(chatSse([chunk({ content: "ok" }, "stop")]));
    },
    { apiKey: "sk-test-123" },
    async (engine, upstream) => {
      const req = request({
        items: [
          { type: "message", role: "system", text: "be brief" },
          { type: "message", role: "developer", text: "use tools" },
          { type: "message", role: "user", text: "read a" },
          { type: "message", role: "assistant", text: "reading" },
          { type: "tool_call", kind: "function", callId: "call_1", name: "read", input: '{"path":"a"}' },
          { type: "tool_result", kind: "function", callId: "call_1", output: "contents" },
          { type: "message", role: "user", text: "thanks" },
        ],
        tools: [
          {
            kind: "function",
            name: "read",
            description: "Read a file",
            parameters: { type: "object", properties: {} },
          },
        ],
        toolChoice: { name: "read" },
        parallelToolCalls: false,
        maxOutputTokens: 50,
        temperature: 0.2,
        topP: 0.9,
      });
      for (let i = 0; i < 5; i++) assert.equal((await collect(engine, req)).at(-1)?.type, "finish");

      assert.equal(upstream.requests.length, 5);
      const first = upstream.requests[0];
      assert.equal(first?.method, "POST");
      assert.equal(first?.url, "/v1/chat/completions");
      assert.equal(first?.headers.authorization, "Bearer sk-test-123");
      assert.deepEqual(JSON.parse(first?.body ?? "{}"), {
        model: "upstream-model",
        messages: [
          { role: "system", content: "be brief" },
          { role: "system", content: "use tools" },
          { role: "user", content: "read a" },
          {
            role: "assistant",
            content: "reading",
            tool_calls: [
              { id: "call_1", type: "function", function: { name: "read", arguments: '{"path":"a"}' } },
            ],
          },
          { role: "tool", tool_call_id: "call_1", content: "contents" },
          { role: "user", content: "thanks" },
        ],
        stream: true,
        stream_options: { include_usage: true },
        max_tokens: 50,
        temperature: 0.2,
        top_p: 0.9,
        tools: [
          {
            type: "function",
            function: {
              name: "read",
              description: "Read a file",
              parameters: { type: "object", properties: {} },
            },
          },
        ],
        tool_choice: { type: "function", function: { name: "read" } },
        parallel_tool_calls: false,
      });
      assert.ok(upstream.sockets() < 5, `expected connection reuse, saw ${upstream.sockets()} sockets`);
    },
  );
});

test("ignore_eos is passed on to the upstream only when asked for", async () => {
  await withEngine(
    (_req, res) => {
      sseHeaders(res);
      res.end(chatSse([chunk({ content: "ok" }, "stop")]));
    },
    {},
    async (engine, upstream) => {
      const base = {
        items: [{ type: "message" as const, role: "user" as const, text: "hi" }],
        maxOutputTokens: 8,
      };
      await collect(engine, request({ ...base, ignoreEos: true }));
      await collect(engine, request(base));
      const bodies = upstream.requests.map((r) => JSON.parse(r.body) as Record<string, unknown>);
      assert.equal(bodies[0]?.ignore_eos, true);
      assert.equal("ignore_eos" in bodies[1]!, false);
    },
  );
});

test("abort mid-stream closes the upstream request and ends the iterator", { timeout: 10_000 }, async () => {
  let upstreamClosed: Promise<boolean> | undefined;
  await withEngine(
    (_req, res) => {
      // Never ends on its own: only the client going away can close it.
      upstreamClosed = once(res, "close").then(() => res.writableEnded);
      sseHeaders(res);
      res.write(`data: ${JSON.stringify(chunk({ content: "partial" }))}\n\n`);
    },
    {},
    async (engine) => {
      const controller = new AbortController();
      const parts: EnginePart[] = [];
      for await (const part of engine.stream(request(), controller.signal)) {
        parts.push(part);
        if (part.type === "text-delta") controller.abort();
      }
      assert.ok(upstreamClosed, "the upstream received the request");
      assert.equal(await upstreamClosed, false, "the upstream response was cut, not completed");
      assert.deepEqual(
        parts.map((part) => part.type),
        ["text-start", "text-delta", "text-end", "finish"],
      );
      assert.deepEqual(parts.at(-1), {
        type: "finish",
        reason: "cancelled",
        usage: { inputTokens: 0, cachedInputTokens: 0, outputTokens: 0 },
      });
    },
  );
});

test("upstream 500 becomes a 502 upstream_error", async () => {
  await withEngine(
    (_req, res) => {
      res.writeHead(500, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "CUDA out of memory", type: "server_error" } }));
    },
    {},
    async (engine) => {
      await assert.rejects(collect(engine, request()), (error) => {
        isSparkError(502, "upstream_error")(error);
        assert.match((error as Error).message, /HTTP 500.*CUDA out of memory/);
        return true;
      });
    },
  );
});

test("upstream 4xx with an OpenAI error body passes status, code, message and param through", async () => {
  await withEngine(
    (_req, res) => {
      res.writeHead(400, { "content-type": "application/json" });
      res.end(
        JSON.stringify({
          error: {
            message: "This model's maximum context length is 8192 tokens.",
            type: "invalid_request_error",
            code: "context_length_exceeded",
            param: "messages",
          },
        }),
      );
    },
    {},
    async (engine) => {
      await assert.rejects(collect(engine, request()), (error) => {
        isSparkError(400, "context_length_exceeded")(error);
        assert.equal((error as SparkError).message, "This model's maximum context length is 8192 tokens.");
        assert.equal((error as SparkError).param, "messages");
        return true;
      });
    },
  );
});

test("connection refused becomes a 503 upstream_unavailable naming the URL", async () => {
  const port = await closedPort();

  const engine = new OpenAIEngine({ baseUrl: `http://127.0.0.1:${port}/v1` });
  try {
    await assert.rejects(collect(engine, request()), (error) => {
      isSparkError(503, "upstream_unavailable")(error);
      assert.match((error as Error).message, new RegExp(`127\\.0\\.0\\.1:${port}/v1.*--upstream`));
      return true;
    });
    await engine.start();
    assert.equal(engine.status().ready, true);
    assert.match(engine.status().detail, /discovery failed/);
    assert.equal(engine.resolveModel("spark"), "spark");
  } finally {
    await engine.close();
  }
});

test("upstream 401 becomes upstream_auth_failed without leaking the key", async () => {
  const key = "sk-secret-xyz-987";
  await withEngine(
    (_req, res) => {
      res.writeHead(401, { "content-type": "application/json" });
      res.end(
        JSON.stringify({ error: { message: `Incorrect API key provided: ${key}`, code: "invalid_api_key" } }),
      );
    },
    { apiKey: key },
    async (engine) => {
      await assert.rejects(collect(engine, request()), (error) => {
        isSparkError(502, "upstream_auth_failed")(error);
        assert.equal((error as SparkError).type, "server_error");
        assert.match((error as Error).message, /--upstream-api-key-env/);
        assert.ok(!(error as Error).message.includes(key), "the API key is not in the message");
        return true;
      });
    },
  );
});

test("a malformed stream becomes a 502 upstream_protocol_error", async () => {
  for (const payload of [
    "data: {not json\n\n",
    `data: ${JSON.stringify(chunk({ content: "cut short" }))}\n\n`,
  ]) {
    await withEngine(
      (_req, res) => {
        sseHeaders(res);
        res.end(payload);
      },
      {},
      async (engine) => {
        await assert.rejects(collect(engine, request()), isSparkError(502, "upstream_protocol_error"));
      },
    );
  }
});

test("an upstream that never answers becomes a 504 upstream_timeout", async () => {
  await withEngine(
    () => {
      // Never responds.
    },
    { timeoutMs: 200 },
    async (engine) => {
      await assert.rejects(collect(engine, request()), isSparkError(504, "upstream_timeout"));
    },
  );
});

test("start() discovers models; spark resolves to the first, unknown names do not resolve", async () => {
  await withEngine(
    (req, res) => {
      if (req.url === "/v1/models") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(
          JSON.stringify({ object: "list", data: [{ id: "qwen-coder", owned_by: "vllm" }, { id: "other" }] }),
        );
        return;
      }
      sseHeaders(res);
      res.end(chatSse([chunk({ content: "ok" }, "stop")]));
    },
    { apiKey: "k" },
    async (engine, upstream) => {
      assert.equal(engine.status().ready, false);
      await engine.start();
      assert.equal(engine.status().ready, true);
      assert.equal(upstream.requests[0]?.headers.authorization, "Bearer k");
      assert.deepEqual(
        engine.models().map((model) => model.id),
        ["spark", "qwen-coder", "other"],
      );
      assert.equal(engine.resolveModel("spark"), "qwen-coder");
      assert.equal(engine.resolveModel("other"), "other");
      assert.equal(engine.resolveModel("gpt-unknown"), undefined);
      await collect(engine, request({ model: engine.resolveModel("spark") ?? "" }));
      assert.equal((JSON.parse(upstream.requests[1]?.body ?? "{}") as { model: string }).model, "qwen-coder");
    },
  );
  await withEngine(
    (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ data: [{ id: "qwen-coder" }] }));
    },
    { model: "configured" },
    async (engine) => {
      await engine.start();
      assert.equal(engine.resolveModel("spark"), "configured");
      assert.equal(engine.resolveModel("configured"), "configured");
    },
  );
});

test("responses: text and a function call stream into parts; the request uses Responses shapes", async () => {
  const events = [
    { type: "response.created", response: { id: "resp_1", status: "in_progress" } },
    {
      type: "response.output_item.added",
      output_index: 0,
      item: { id: "msg_1", type: "message", role: "assistant" },
    },
    {
      type: "response.output_text.delta",
      item_id: "msg_1",
      output_index: 0,
      content_index: 0,
      delta: "Let me ",
    },
    {
      type: "response.output_text.delta",
      item_id: "msg_1",
      output_index: 0,
      content_index: 0,
      delta: "look.",
    },
    {
      type: "response.output_text.done",
      item_id: "msg_1",
      output_index: 0,
      content_index: 0,
      text: "Let me look.",
    },
    { type: "response.output_item.done", output_index: 0, item: { id: "msg_1", type: "message" } },
    {
      type: "response.output_item.added",
      output_index: 1,
      item: { id: "fc_1", type: "function_call", call_id: "call_r1", name: "read", arguments: "" },
    },
    { type: "response.function_call_arguments.delta", item_id: "fc_1", output_index: 1, delta: '{"path":' },
    { type: "response.function_call_arguments.delta", item_id: "fc_1", output_index: 1, delta: '"a.ts"}' },
    {
      type: "response.function_call_arguments.done",
      item_id: "fc_1",
      output_index: 1,
      arguments: '{"path":"a.ts"}',
    },
    {
      type: "response.output_item.done",
      output_index: 1,
      item: {
        id: "fc_1",
        type: "function_call",
        call_id: "call_r1",
        name: "read",
        arguments: '{"path":"a.ts"}',
      },
    },
    {
      type: "response.output_item.added",
      output_index: 2,
      item: { id: "ct_1", type: "custom_tool_call", call_id: "call_r2", name: "apply_patch", input: "" },
    },
    { type: "response.custom_tool_call_input.delta", item_id: "ct_1", output_index: 2, delta: "*** Begin" },
    { type: "response.custom_tool_call_input.delta", item_id: "ct_1", output_index: 2, delta: " Patch" },
    {
      type: "response.output_item.done",
      output_index: 2,
      item: {
        id: "ct_1",
        type: "custom_tool_call",
        call_id: "call_r2",
        name: "apply_patch",
        input: "*** Begin Patch",
      },
    },
    {
      type: "response.completed",
      response: {
        id: "resp_1",
        status: "completed",
        usage: { input_tokens: 50, input_tokens_details: { cached_tokens: 32 }, output_tokens: 12 },
      },
    },
  ];
  await withEngine(
    (_req, res) => {
      sseHeaders(res);
      void writeInPieces(res, responsesSse(events), 16);
    },
    { api: "responses", apiKey: "sk-r" },
    async (engine, upstream) => {
      const parts = await collect(
        engine,
        request({
          items: [
            { type: "message", role: "developer", text: "be careful" },
            { type: "message", role: "user", text: "read a.ts" },
            { type: "tool_call", kind: "function", callId: "c1", name: "read", input: '{"path":"b"}' },
            { type: "tool_result", kind: "function", callId: "c1", output: "B" },
            { type: "tool_call", kind: "custom", callId: "c2", name: "apply_patch", input: "patch" },
            { type: "tool_result", kind: "custom", callId: "c2", output: "ok" },
          ],
          tools: [
            { kind: "function", name: "read", parameters: { type: "object", properties: {} } },
            { kind: "custom", name: "apply_patch", description: "Patch files" },
          ],
          toolChoice: "required",
          maxOutputTokens: 100,
        }),
      );

      const sent = upstream.requests[0];
      assert.equal(sent?.url, "/v1/responses");
      assert.equal(sent?.headers.authorization, "Bearer sk-r");
      assert.deepEqual(JSON.parse(sent?.body ?? "{}"), {
        model: "upstream-model",
        input: [
          { type: "message", role: "developer", content: "be careful" },
          { type: "message", role: "user", content: "read a.ts" },
          { type: "function_call", call_id: "c1", name: "read", arguments: '{"path":"b"}' },
          { type: "function_call_output", call_id: "c1", output: "B" },
          { type: "custom_tool_call", call_id: "c2", name: "apply_patch", input: "patch" },
          { type: "custom_tool_call_output", call_id: "c2", output: "ok" },
        ],
        stream: true,
        store: false,
        max_output_tokens: 100,
        tools: [
          { type: "function", name: "read", parameters: { type: "object", properties: {} }, strict: false },
          { type: "custom", name: "apply_patch", description: "Patch files" },
        ],
        tool_choice: "required",
        parallel_tool_calls: true,
      });

      assert.deepEqual(
        parts.filter((part) => part.type !== "text-delta" && part.type !== "tool-call-delta"),
        [
          { type: "text-start", id: "txt_0" },
          { type: "text-end", id: "txt_0" },
          { type: "tool-call-start", id: "tool_0", kind: "function", name: "read", callId: "call_r1" },
          { type: "tool-call-end", id: "tool_0" },
          { type: "tool-call-start", id: "tool_1", kind: "custom", name: "apply_patch", callId: "call_r2" },
          { type: "tool-call-end", id: "tool_1" },
          {
            type: "finish",
            reason: "tool_calls",
            usage: { inputTokens: 50, cachedInputTokens: 32, outputTokens: 12 },
          },
        ],
      );
      assert.equal(joined(parts, "text-delta", "txt_0"), "Let me look.");
      assert.equal(joined(parts, "tool-call-delta", "tool_0"), '{"path":"a.ts"}');
      assert.equal(joined(parts, "tool-call-delta", "tool_1"), "*** Begin Patch");
    },
  );
});

test("responses: response.failed becomes a 502 upstream_error with the upstream message", async () => {
  await withEngine(
    (_req, res) => {
      sseHeaders(res);
      res.end(
        responsesSse([
          { type: "response.created", response: { id: "resp_2" } },
          {
            type: "response.failed",
            response: { id: "resp_2", error: { code: "server_error", message: "engine crashed" } },
          },
        ]),
      );
    },
    { api: "responses" },
    async (engine) => {
      await assert.rejects(collect(engine, request()), (error) => {
        isSparkError(502, "upstream_error")(error);
        assert.match((error as Error).message, /engine crashed/);
        return true;
      });
    },
  );
});

// ---------------------------------------------------------------------------------------------
// Bounds: whatever the upstream sends, the engine reads a bounded amount and does linear work.

const MiB = 1024 * 1024;

interface Firehose {
  /** Bytes written to the socket before the client went away or the end was reached. */
  written: number;
  /** Whether the response was ended by the upstream (false: the client cut it). */
  ended: boolean;
}

/**
 * Writes `head`, then 'x' bytes in 64 KiB pieces (waiting for each to flush) until `total` bytes or
 * until the client closes the connection, then ends the response if still open. `pause(written)`
 * may hold the writer between two pieces.
 */
async function firehose(
  res: http.ServerResponse,
  head: string,
  total: number,
  pause: (written: number) => Promise<void> = async () => {},
): Promise<Firehose> {
  const piece = Buffer.alloc(64 * 1024, "x");
  let closed = false;
  // A write pending when the client goes away may never call back: the close ends the wait too.
  const closing = once(res, "close").then(() => {
    closed = true;
    return false;
  });
  const write = (data: string | Buffer) =>
    Promise.race([closing, new Promise<boolean>((resolve) => res.write(data, (error) => resolve(!error)))]);
  const state: Firehose = { written: 0, ended: false };
  let ok = await write(head);
  while (ok && !closed && state.written < total) {
    await pause(state.written);
    ok = await write(piece);
    if (ok) state.written += piece.length;
  }
  // A write that failed (the client cut the connection) may call back before `close` is emitted:
  // the body ended only if every byte was written.
  if (!closed && ok) {
    res.end();
    state.ended = true;
  }
  return state;
}

function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/** The SSE events of a Spark response body, parsed. */
function sseEvents(text: string): Record<string, unknown>[] {
  return text
    .split("\n")
    .filter((line) => line.startsWith("data: ") && line !== "data: [DONE]")
    .map((line) => JSON.parse(line.slice(6)) as Record<string, unknown>);
}

test("an upstream line of 20 MiB without a newline fails the response at the 8 MiB bound; /healthz answers meanwhile", async () => {
  const firstMiBSent = deferred();
  const healthzAnswered = deferred();
  let sent: Promise<Firehose> | undefined;
  const upstream = await startUpstream((_req, res) => {
    sseHeaders(res);
    sent = firehose(res, "data: ", 20 * MiB, async (written) => {
      if (written !== MiB) return;
      firstMiBSent.resolve();
      await healthzAnswered.promise;
    });
  });
  const engine = new OpenAIEngine({ baseUrl: upstream.baseUrl, model: "m" });
  const server = new SparkServer({ engine, port: 0 });
  try {
    await engine.start();
    await server.listen();
    const responding = fetch(`${server.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "spark", input: "hi", stream: true }),
    }).then(async (response) => ({ status: response.status, text: await response.text() }));

    // The server answers other requests while this response's huge line streams in.
    await firstMiBSent.promise;
    const health = await fetch(`${server.url}/healthz`);
    assert.equal(health.status, 200);
    assert.equal(((await health.json()) as { status: string }).status, "ok");
    healthzAnswered.resolve();

    const { status, text } = await responding;
    assert.equal(status, 200);
    const events = sseEvents(text);
    const failed = events.find((event) => event.type === "response.failed");
    assert.ok(failed, `a response.failed event ends the stream; got ${text.slice(0, 500)}`);
    assert.equal(events.at(-1), failed, "the failure is the terminal event");
    const error = (failed.response as { error: { code: string; message: string } }).error;
    assert.equal(error.code, "upstream_protocol_error");
    assert.match(error.message, /line longer than 8 MiB/);
    assert.ok(sent, "the upstream received the request");
    await sent;
  } finally {
    await server.close();
    await engine.close();
    await upstream.close();
  }
});

test("an endless upstream error body is read up to 64 KiB, then the connection is cut", async () => {
  let sent: Promise<Firehose> | undefined;
  await withEngine(
    (_req, res) => {
      res.writeHead(500, { "content-type": "text/plain" });
      sent = firehose(res, "", 64 * MiB);
    },
    {},
    async (engine) => {
      await assert.rejects(collect(engine, request()), (error) => {
        isSparkError(502, "upstream_error")(error);
        assert.match((error as Error).message, /HTTP 500/);
        return true;
      });
      assert.ok(sent, "the upstream received the request");
      const { ended, written } = await sent;
      assert.equal(ended, false, `the upstream was cut (it wrote ${written} bytes)`);
    },
  );
});

test("an endless model list fails discovery at the 8 MiB bound and cuts the connection", async () => {
  let sent: Promise<Firehose> | undefined;
  await withEngine(
    (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      sent = firehose(res, '{"data":[{"id":"', 64 * MiB);
    },
    {},
    async (engine) => {
      await engine.start();
      assert.equal(engine.status().ready, true);
      assert.match(engine.status().detail, /discovery failed.*larger than 8 MiB/);
      assert.ok(sent, "the upstream received the request");
      assert.equal((await sent).ended, false, "the engine cut the model list");
    },
  );
});

test("the SSE parser examines each byte at most twice, however the input is split", () => {
  const events = Array.from({ length: 200 }, (_, i) => `event: e${i}\r\ndata: ${"y".repeat(i * 37)}\r\n\r`);
  const text = `\uFEFF: comment\n${events.join("\n")}\n`;
  const bytes = Buffer.from(text, "utf8");
  const whole = new SseParser();
  const expected = [...whole.push(bytes), ...whole.end()];
  assert.equal(expected.length, 200);
  assert.deepEqual(expected[3], { event: "e3", data: "y".repeat(111) });
  for (const size of [1, 2, 7, 4096]) {
    const parser = new SseParser();
    const got: SseEvent[] = [];
    for (let i = 0; i < bytes.length; i += size) got.push(...parser.push(bytes.subarray(i, i + size)));
    got.push(...parser.end());
    assert.deepEqual(got, expected, `pieces of ${size} bytes`);
    assert.ok(parser.scanned <= 2 * bytes.length, `scanned ${parser.scanned} of ${bytes.length} bytes`);
  }

  // One long line in small pieces: the work stays linear (a rescan per piece would be ~n²/2 bytes).
  const parser = new SseParser();
  const piece = Buffer.alloc(16, "z");
  const pieces = 256 * 1024;
  for (let i = 0; i < pieces; i++) assert.deepEqual(parser.push(piece), []);
  assert.ok(parser.scanned <= 2 * pieces * piece.length, `scanned ${parser.scanned} bytes`);
});

test("the SSE parser throws at its bound: a line, or an event's data lines together", () => {
  const exact = new SseParser(1024);
  assert.deepEqual(exact.push(Buffer.from(`data:${"a".repeat(1019)}\n\n`)), [
    { event: undefined, data: "a".repeat(1019) },
  ]);

  const long = new SseParser(1024);
  long.push(Buffer.from("data:"));
  assert.throws(
    () => {
      for (let i = 0; i < 100; i++) long.push(Buffer.alloc(100, "a"));
    },
    (error) => error instanceof SseTooLargeError && /a line longer than 1 KiB/.test(error.message),
  );

  const many = new SseParser(1024);
  assert.throws(
    () => many.push(Buffer.from(`data: ${"b".repeat(500)}\n`.repeat(3))),
    (error) => error instanceof SseTooLargeError && /an event's data longer than 1 KiB/.test(error.message),
  );
});

// ---------------------------------------------------------------------------------------------
// The upstream timeout setting: --upstream-timeout, SPARK_UPSTREAM_TIMEOUT, upstreamTimeout.

test("upstreamTimeout from a flag, the environment, a models entry or the top level reaches the engine", async () => {
  const upstream = await startUpstream((_req, res) => {
    // Headers, then nothing: only the body timeout can end this.
    sseHeaders(res);
    res.flushHeaders();
  });
  const openai = { engine: "openai", upstream: upstream.baseUrl, upstreamModel: "m" };
  const cases: [string, Record<string, unknown>, NodeJS.ProcessEnv][] = [
    ["flag", { ...openai, upstreamTimeout: 0.5 }, {}],
    ["environment", openai, { SPARK_UPSTREAM_TIMEOUT: "0.5" }],
    [
      "models entry",
      {
        config: file(
          "timeout-entry.json",
          JSON.stringify({ models: { deep: { ...openai, upstreamTimeout: 0.5 } } }),
        ),
      },
      { SPARK_UPSTREAM_TIMEOUT: "1000" },
    ],
    [
      "top level, inherited by an entry",
      {
        config: file("timeout-top.json", JSON.stringify({ upstreamTimeout: 0.5, models: { deep: openai } })),
      },
      {},
    ],
  ];
  try {
    for (const [name, flags, env] of cases) {
      const models = await createModels(resolveSettings(flags, env), () => {});
      const engine = models.engines()[0];
      assert.ok(engine instanceof OpenAIEngine, name);
      try {
        await assert.rejects(collect(engine, request()), (error) => {
          isSparkError(504, "upstream_timeout")(error);
          assert.match((error as Error).message, /within 500 ms/, name);
          return true;
        });
      } finally {
        await engine.close();
      }
    }
  } finally {
    await upstream.close();
  }
});

test("a bad upstreamTimeout is a config error naming its source and the key", async () => {
  const rejects = (flags: Record<string, unknown>, env: NodeJS.ProcessEnv, message: RegExp) =>
    assert.throws(
      () => resolveSettings(flags, env),
      (error) => error instanceof ConfigError && message.test(error.message),
    );
  rejects({ upstreamTimeout: 0 }, {}, /invalid upstreamTimeout \(--upstream-timeout\) from command line/);
  rejects({}, { SPARK_UPSTREAM_TIMEOUT: "soon" }, /from environment variable SPARK_UPSTREAM_TIMEOUT/);
  const config = file(
    "timeout-bad.json",
    JSON.stringify({ models: { deep: { engine: "openai", upstream: "http://x/v1", upstreamTimeout: -1 } } }),
  );
  rejects({ config }, {}, /timeout-bad\.json: models\.deep\.upstreamTimeout: .*>0/);

  const { code, stderr } = await runToExit(["serve", "--port", "0", "--upstream-timeout", "-5"]);
  assert.equal(code, 2, stderr);
  assert.match(stderr, /invalid upstreamTimeout \(--upstream-timeout\) from command line/);
});

/**
 * An upstream that, like llama-server, closes its connection after every streamed answer, and
 * does so a moment later without answering a request that arrived on it meanwhile (the race a
 * kept connection runs: the client sends its next request before the close reaches it).
 */
function closesAfterEachStream(): Handler {
  const closing = new WeakSet<object>();
  return (req, res) => {
    const socket = req.socket;
    if (closing.has(socket)) return; // never answered: the socket goes in a moment
    closing.add(socket);
    sseHeaders(res);
    res.end(chatSse([chunk({ content: "ok" }, "stop")]));
    setTimeout(() => socket.destroy(), 500);
  };
}

test("keepAlive: false opens a connection per request: an upstream that closes after every stream fails none", async () => {
  const turns = async (engine: OpenAIEngine): Promise<number> => {
    let failed = 0;
    for (let i = 0; i < 5; i++) {
      try {
        assert.equal(joined(await collect(engine, request()), "text-delta", "txt_0"), "ok");
      } catch {
        failed++;
      }
    }
    return failed;
  };
  await withEngine(closesAfterEachStream(), { keepAlive: false }, async (engine, upstream) => {
    assert.equal(await turns(engine), 0);
    assert.equal(upstream.sockets(), 5);
  });
  // Reused, the same loop meets the close: why the llama-server child is given keepAlive: false.
  await withEngine(closesAfterEachStream(), {}, async (engine) => {
    assert.ok((await turns(engine)) > 0);
  });
});

test("an upstream on a Unix socket (socketPath): requests reach it, and the engine names it unix:PATH", async () => {
  const dir = mkdtempSync(join(tmpdir(), "spark-upstream-sock-"));
  const socketPath = join(dir, "upstream.sock");
  const seen: { host: string | undefined; url: string | undefined }[] = [];
  const server = http.createServer((req, res) => {
    seen.push({ host: req.headers.host, url: req.url });
    req.resume();
    req.on("end", () => {
      sseHeaders(res);
      res.end(chatSse([chunk({ content: "over the socket" }, "stop")]));
    });
  });
  server.listen(socketPath);
  await once(server, "listening");
  const engine = new OpenAIEngine({
    upstreams: [{ url: "http://localhost/v1", socketPath }],
    keepAlive: false,
    model: "upstream-model",
  });
  try {
    assert.equal(joined(await collect(engine, request()), "text-delta", "txt_0"), "over the socket");
    assert.deepEqual(seen, [{ host: "localhost", url: "/v1/chat/completions" }]);
    await engine.start();
    assert.match(engine.status().detail, new RegExp(`unix:${socketPath}/v1`));
  } finally {
    await engine.close();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(dir, { recursive: true, force: true });
  }
});
