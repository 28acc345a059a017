/**
 * Predicted Outputs on the Responses API (a Spark extension, the same shape as Chat Completions'):
 * the prediction reaches the engine, bad shapes are 400s naming the param, and `auto` routes a
 * request with a prediction to spark.
 */
import assert from "node:assert/strict";
import { after, test } from "node:test";
import OpenAI from "openai";
import type { EnginePart, EngineRequest } from "../src/engine/types.js";
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
