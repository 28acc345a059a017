/**
 * `POST /v1/responses/input_tokens` through the SDK's `responses.inputTokens.count`: the count is
 * what the same request's `usage.input_tokens` turns out to be (same history, template and tools,
 * same tokenizer), on the real llama engine and on the script engine.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import type { FunctionTool } from "openai/resources/responses/responses";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { apiError } from "./helpers/openai-api.js";
import { startScriptServer } from "./helpers/servers.js";

const modelPath = testModelPath();

const tools: FunctionTool[] = [
  {
    type: "function",
    name: "read_file",
    description: "Read a file of the workspace.",
    parameters: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
    strict: false,
  },
];

function client(server: SparkServer): OpenAI {
  return new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
}

describe("input token counts on the llama engine", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let server: SparkServer;
  let openai: OpenAI;

  before(async () => {
    const engine = new LlamaEngine({ modelPath: async () => modelPath!, gpu: false, threads: 1 });
    await engine.start();
    server = new SparkServer({ engine, port: 0 });
    await server.listen();
    openai = client(server);
  });
  after(() => server?.close());

  test("the count equals the input tokens the same request is charged, tools and history included", async () => {
    const body = { model: "spark", instructions: "Answer briefly.", input: "What is in README.md?", tools };
    const counted = await openai.responses.inputTokens.count(body);
    assert.equal(counted.object, "response.input_tokens");
    const created = await openai.responses.create({ ...body, max_output_tokens: 4 });
    assert.equal(counted.input_tokens, created.usage!.input_tokens);
    // Tools are part of the rendered prompt.
    const withoutTools = await openai.responses.inputTokens.count({ ...body, tools: [] });
    assert.ok(withoutTools.input_tokens < counted.input_tokens);

    const next = { model: "spark", previous_response_id: created.id, input: "And in package.json?", tools };
    const continued = await openai.responses.inputTokens.count(next);
    const second = await openai.responses.create({ ...next, max_output_tokens: 4 });
    assert.equal(continued.input_tokens, second.usage!.input_tokens);
    assert.ok(continued.input_tokens > counted.input_tokens);
  });

  test("a parameter the route does not take, or a bad one, is a 400 naming it", async () => {
    const unknown = await apiError(
      openai.post("/responses/input_tokens", { body: { input: "hi", stream: true } }),
    );
    assert.equal(unknown.status, 400);
    assert.equal(unknown.param, "stream");
    const missing = await apiError(
      openai.responses.inputTokens.count({ input: "hi", previous_response_id: "resp_missing" }),
    );
    assert.equal(missing.param, "previous_response_id");
  });
});

describe("input token counts on the script engine", () => {
  test("count and usage agree", async () => {
    const server = await startScriptServer([{ output: [{ type: "message", text: "ok" }] }]);
    try {
      const openai = client(server);
      const body = { model: "spark", input: "three small words" };
      const counted = await openai.responses.inputTokens.count(body);
      const created = await openai.responses.create(body);
      assert.equal(counted.input_tokens, created.usage!.input_tokens);
      // GET on the path is not a response id lookup that succeeds.
      const wrongMethod = await fetch(`${server.url}/v1/responses/input_tokens`);
      assert.equal(wrongMethod.status, 404);
    } finally {
      await server.close();
    }
  });
});
