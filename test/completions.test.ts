/**
 * `POST /v1/completions` (fill in the middle) through the real `openai` SDK against a server on
 * port 0 with the script engine: shapes streamed and whole, `n`, stop sequences, routing, keys,
 * bad input, and cancellation when the client goes away.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, describe, test } from "node:test";
import OpenAI from "openai";
import type { EngineRequest } from "../src/engine/types.js";
import { generateKey, KeyRing } from "../src/core/keys.js";
import { OpenAIEngine } from "../src/engines/openai/openai-engine.js";
import { parseScript, ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer, type SparkServerOptions } from "../src/server/http-server.js";

const SCRIPT = [
  { output: [{ type: "message", text: "a chat answer" }] },
  { completion: "return a + b;\n}", after: "add(a, b) {\n  " },
  { completion: "42; // the answer\nconsole.log(x);" },
];

/** Records the requests the engine saw. */
class RecordingEngine extends ScriptEngine {
  readonly seen: EngineRequest[] = [];
  override stream(
    request: EngineRequest,
    signal: AbortSignal,
  ): AsyncGenerator<import("../src/engine/types.js").EnginePart> {
    this.seen.push(request);
    return super.stream(request, signal);
  }
}

const servers: SparkServer[] = [];
after(async () => {
  for (const server of servers) await server.close();
});

async function start(rate?: number, options: Partial<SparkServerOptions> = {}) {
  const lines = parseScript(SCRIPT.map((line) => JSON.stringify(line)).join("\n"), "completions");
  const engine = new RecordingEngine(rate === undefined ? { lines } : { lines, rate });
  const server = new SparkServer({ engine, port: 0, ...options });
  servers.push(server);
  const url = await server.listen();
  return {
    engine,
    server,
    url,
    openai: new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 }),
  };
}

describe("POST /v1/completions", () => {
  test("answers in OpenAI's text_completion shape, with the suffix and other files reaching the engine", async () => {
    const { openai, engine } = await start();
    const completion = await openai.completions.create({
      model: "spark",
      prompt: "function add(a, b) {\n  ",
      suffix: "\n\nadd(1, 2);\n",
      max_tokens: 32,
      // @ts-expect-error: input_extra is Spark's (llama.cpp's) extension
      input_extra: [{ filename: "util.ts", text: "export const one = 1;" }],
    });
    assert.equal(completion.object, "text_completion");
    assert.match(completion.id, /^cmpl-/);
    assert.equal(completion.model, "spark");
    assert.deepEqual(completion.choices, [
      { text: "return a + b;\n}", index: 0, logprobs: null, finish_reason: "stop" },
    ]);
    assert.ok(completion.usage!.prompt_tokens > 0 && completion.usage!.completion_tokens > 0);
    assert.deepEqual(engine.seen.at(-1)!.fim, {
      prefix: "function add(a, b) {\n  ",
      suffix: "\n\nadd(1, 2);\n",
      extra: [{ filename: "util.ts", text: "export const one = 1;" }],
    });
    assert.equal(engine.seen.at(-1)!.maxOutputTokens, 32);
  });

  test("streams text deltas, then the finish reason, usage on request, and [DONE]", async () => {
    const { openai } = await start();
    const stream = await openai.completions.create({
      model: "spark",
      prompt: "const x = ",
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = "";
    const reasons: (string | null)[] = [];
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      assert.equal(chunk.object, "text_completion");
      for (const choice of chunk.choices) {
        text += choice.text;
        reasons.push(choice.finish_reason);
      }
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, "42; // the answer\nconsole.log(x);");
    assert.ok(reasons.length > 2, "one chunk per piece");
    assert.equal(reasons.at(-1), "stop");
    assert.equal(usage!.completion_tokens, reasons.length - 1);
  });

  test("stop sequences cut the text before the stop (held back while streaming), for every choice of n", async () => {
    const { openai } = await start();
    const whole = await openai.completions.create({
      model: "spark",
      prompt: "x = ",
      stop: ["\n", "never"],
      n: 2,
    });
    assert.deepEqual(
      whole.choices.map((c) => [c.index, c.text, c.finish_reason]),
      [
        [0, "42; // the answer", "stop"],
        [1, "42; // the answer", "stop"],
      ],
    );
    const stream = await openai.completions.create({
      model: "spark",
      prompt: "x = ",
      stop: "answer",
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    assert.equal(text, "42; // the ");
  });

  test("max_tokens ends with length", async () => {
    const { openai } = await start();
    const completion = await openai.completions.create({ model: "spark", prompt: "x = ", max_tokens: 2 });
    assert.equal(completion.choices[0]!.finish_reason, "length");
    assert.equal(completion.usage!.completion_tokens, 2);
  });

  test("model auto is the spark tier, and says why", async () => {
    const { url } = await start();
    const response = await fetch(`${url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "auto", prompt: "x = " }),
    });
    assert.equal(response.status, 200);
    assert.equal(response.headers.get("x-spark-route"), "spark");
    assert.equal(response.headers.get("x-spark-route-rule"), "inline_completion");
  });

  test("bad input is a 400 with a code and the param", async () => {
    const { url } = await start();
    const post = async (body: unknown) => {
      const response = await fetch(`${url}/v1/completions`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      return { status: response.status, body: (await response.json()) as { error: Record<string, unknown> } };
    };
    for (const [body, param] of [
      [{}, "prompt"],
      [{ prompt: 5 }, "prompt"],
      [{ prompt: "x", n: 9 }, "n"],
      [{ prompt: "x", max_tokens: 0 }, "max_tokens"],
      [{ prompt: "x", stop: ["a", "b", "c", "d", "e"] }, "stop"],
      [{ prompt: "x", input_extra: [{ filename: "a" }] }, "input_extra[0].text"],
      [{ prompt: "x", echo: true }, "echo"],
    ] as const) {
      const result = await post(body);
      assert.equal(result.status, 400, JSON.stringify(body));
      assert.equal(result.body.error.param, param);
      assert.equal(result.body.error.code, "invalid_value");
    }
    const missing = await post({ model: "nope", prompt: "x" });
    assert.equal(missing.status, 404);
    assert.equal(missing.body.error.code, "model_not_found");
  });

  test("a script without completion lines refuses FIM clearly", async () => {
    const lines = parseScript(JSON.stringify(SCRIPT[0]), "chat-only");
    const server = new SparkServer({ engine: new ScriptEngine({ lines }), port: 0 });
    servers.push(server);
    const openai = new OpenAI({ baseURL: `${await server.listen()}/v1`, apiKey: "unused", maxRetries: 0 });
    await assert.rejects(
      openai.completions.create({ model: "spark", prompt: "x" }),
      (error: InstanceType<typeof OpenAI.APIError>) => {
        assert.equal(error.status, 400);
        assert.equal(error.code, "fim_unsupported");
        return true;
      },
    );
  });

  test("needs a key when keys are configured", async () => {
    const alice = generateKey();
    const { url } = await start(undefined, { keys: new KeyRing([{ id: "alice", hash: alice.hash }], {}) });
    const anonymous = new OpenAI({ baseURL: `${url}/v1`, apiKey: "wrong", maxRetries: 0 });
    await assert.rejects(anonymous.completions.create({ model: "spark", prompt: "x" }), { status: 401 });
    const keyed = new OpenAI({ baseURL: `${url}/v1`, apiKey: alice.key, maxRetries: 0 });
    assert.equal((await keyed.completions.create({ model: "spark", prompt: "x = " })).choices.length, 1);
  });

  test("a client that goes away cancels the generation", async () => {
    const { openai, server } = await start(50);
    const controller = new AbortController();
    const stream = await openai.completions.create(
      { model: "spark", prompt: "x = ", stream: true },
      { signal: controller.signal },
    );
    try {
      for await (const _chunk of stream) controller.abort();
    } catch {
      // The SDK reports the abort.
    }
    const cancelled = async (): Promise<number> => {
      const text = await server.metrics.registry.metrics();
      return Number(/^spark_cancellations_total (\d+)/m.exec(text)?.[1] ?? 0);
    };
    for (let i = 0; i < 100 && (await cancelled()) === 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(await cancelled(), 1);
  });
});

describe("POST /v1/completions through the openai engine", () => {
  test("forwards prefix, suffix and other files to the upstream's /completions and relays its stream", async () => {
    const seen: { url: string; body: Record<string, unknown> }[] = [];
    const upstream = http.createServer((req, res) => {
      let body = "";
      req.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
      req.on("end", () => {
        if (req.url === "/v1/models") {
          res.writeHead(200, { "content-type": "application/json" });
          res.end(JSON.stringify({ object: "list", data: [{ id: "coder", object: "model" }] }));
          return;
        }
        seen.push({ url: req.url ?? "", body: JSON.parse(body) as Record<string, unknown> });
        res.writeHead(200, { "content-type": "text/event-stream" });
        const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;
        res.end(
          event({ choices: [{ index: 0, text: "return ", finish_reason: null }] }) +
            event({ choices: [{ index: 0, text: "a + b;", finish_reason: "stop" }] }) +
            event({ choices: [], usage: { prompt_tokens: 12, completion_tokens: 3 } }) +
            "data: [DONE]\n\n",
        );
      });
    });
    upstream.listen(0, "127.0.0.1");
    await once(upstream, "listening");
    const { port } = upstream.address() as AddressInfo;
    const engine = new OpenAIEngine({ baseUrl: `http://127.0.0.1:${port}/v1` });
    await engine.start();
    const server = new SparkServer({ engine, port: 0 });
    servers.push(server);
    const openai = new OpenAI({ baseURL: `${await server.listen()}/v1`, apiKey: "unused", maxRetries: 0 });
    try {
      const completion = await openai.completions.create({
        model: "spark",
        prompt: "function add(a, b) {\n  ",
        suffix: "\n}\n",
        max_tokens: 16,
        // @ts-expect-error: input_extra is Spark's (llama.cpp's) extension
        input_extra: [{ filename: "util.ts", text: "export const one = 1;" }],
      });
      assert.equal(completion.choices[0]!.text, "return a + b;");
      assert.equal(completion.usage!.prompt_tokens, 12);
      assert.equal(seen.length, 1);
      assert.equal(seen[0]!.url, "/v1/completions");
      assert.equal(seen[0]!.body.prompt, "// file: util.ts\nexport const one = 1;\nfunction add(a, b) {\n  ");
      assert.equal(seen[0]!.body.suffix, "\n}\n");
      assert.equal(seen[0]!.body.max_tokens, 16);
      assert.equal(seen[0]!.body.stream, true);
    } finally {
      upstream.closeAllConnections();
      upstream.close();
    }
  });
});
