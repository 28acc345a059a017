/**
 * Predicted Outputs on the Responses API (a Spark extension, the same shape as Chat Completions'):
 * the prediction reaches the engine, bad shapes are 400s naming the param, and `auto` routes a
 * request with a prediction to spark.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";
import OpenAI from "openai";
import type { EnginePart, EngineRequest } from "../src/engine/types.js";
import { OpenAIEngine } from "../src/engines/openai/openai-engine.js";
import { parseScript, ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer } from "../src/server/http-server.js";

class RecordingEngine extends ScriptEngine {
  readonly seen: EngineRequest[] = [];
  override stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    this.seen.push(request);
    return super.stream(request, signal);
  }
}

const engine = new RecordingEngine({
  lines: parseScript(JSON.stringify({ output: [{ type: "message", text: "const a = 2;" }] }), "prediction"),
});
const server = new SparkServer({ engine, port: 0 });
const url = await server.listen();
const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0 });
after(() => server.close());

async function post(
  body: unknown,
): Promise<{ status: number; json: Record<string, unknown>; route: string | null }> {
  const response = await fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    json: (await response.json()) as Record<string, unknown>,
    route: response.headers.get("x-spark-route-rule"),
  };
}

test("a Responses prediction reaches the engine, as text or text parts", async () => {
  await openai.responses.create({
    model: "spark",
    input: "Change a to 2",
    // @ts-expect-error: prediction on Responses is Spark's extension
    prediction: { type: "content", content: "const a = 1;" },
  });
  assert.equal(engine.seen.at(-1)!.prediction, "const a = 1;");
  const parts = await post({
    model: "spark",
    input: "Change a to 2",
    prediction: {
      type: "content",
      content: [
        { type: "text", text: "const a = " },
        { type: "text", text: "1;" },
      ],
    },
  });
  assert.equal(parts.status, 200);
  assert.equal(engine.seen.at(-1)!.prediction, "const a = 1;");
  await post({ model: "spark", input: "no prediction" });
  assert.equal(engine.seen.at(-1)!.prediction, undefined);
});

test("a bad prediction is a 400 naming the param", async () => {
  for (const prediction of [{ type: "other", content: "x" }, { type: "content" }, "text"]) {
    const result = await post({ model: "spark", input: "x", prediction });
    assert.equal(result.status, 400, JSON.stringify(prediction));
    const error = result.json.error as { param: string; code: string };
    assert.match(error.param, /^prediction/);
    assert.equal(error.code, "invalid_value");
  }
});

test("model auto sends a request with a prediction to spark as an inline edit", async () => {
  const result = await post({
    model: "auto",
    input: "Rename a to b in this file",
    prediction: { type: "content", content: "const a = 1;" },
  });
  assert.equal(result.status, 200);
  assert.equal(result.route, "inline_completion");
});

test("speculation.input_lookup reaches the engine; a bad value is a 400", async () => {
  assert.equal((await post({ model: "spark", input: "x", speculation: { input_lookup: true } })).status, 200);
  assert.deepEqual(engine.seen.at(-1)!.speculation, { inputLookup: true });
  await openai.chat.completions.create({
    model: "spark",
    messages: [{ role: "user", content: "x" }],
    // @ts-expect-error: speculation is Spark's extension
    speculation: { input_lookup: false },
  });
  assert.deepEqual(engine.seen.at(-1)!.speculation, { inputLookup: false });
  const bad = await post({ model: "spark", input: "x", speculation: { input_lookup: "yes" } });
  assert.equal(bad.status, 400);
  assert.equal((bad.json.error as { param: string }).param, "speculation.input_lookup");
});

test("the openai engine forwards the prediction upstream and reports the upstream's prediction counts", async () => {
  const bodies: Record<string, unknown>[] = [];
  const upstream = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    req.on("end", () => {
      if (req.url === "/v1/models") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify({ object: "list", data: [{ id: "coder", object: "model" }] }));
        return;
      }
      bodies.push(JSON.parse(body) as Record<string, unknown>);
      const event = (data: unknown): string => `data: ${JSON.stringify(data)}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(
        event({
          choices: [
            { index: 0, delta: { role: "assistant", content: "const a = 2;" }, finish_reason: "stop" },
          ],
        }) +
          event({
            choices: [],
            usage: {
              prompt_tokens: 9,
              completion_tokens: 6,
              completion_tokens_details: { accepted_prediction_tokens: 4, rejected_prediction_tokens: 1 },
            },
          }) +
          "data: [DONE]\n\n",
      );
    });
  });
  upstream.listen(0, "127.0.0.1");
  await once(upstream, "listening");
  const upstreamEngine = new OpenAIEngine({
    baseUrl: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}/v1`,
  });
  await upstreamEngine.start();
  const relay = new SparkServer({ engine: upstreamEngine, port: 0 });
  const client = new OpenAI({ baseURL: `${await relay.listen()}/v1`, apiKey: "unused", maxRetries: 0 });
  try {
    const chat = await client.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "Change a to 2" }],
      prediction: { type: "content", content: "const a = 1;" },
    });
    assert.deepEqual(bodies[0]!.prediction, { type: "content", content: "const a = 1;" });
    assert.equal(chat.usage!.completion_tokens_details!.accepted_prediction_tokens, 4);
    assert.equal(chat.usage!.completion_tokens_details!.rejected_prediction_tokens, 1);
  } finally {
    await relay.close();
    upstream.closeAllConnections();
    upstream.close();
  }
});
