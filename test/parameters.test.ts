/**
 * Every parameter the `openai` package's types define for the create routes is served, a documented
 * no-op, or refused with a 400 naming it. The parameter lists are read from the package's `.d.ts`
 * files, so a parameter a newer SDK adds fails here until it is classified. Against the script
 * engine (what is checked is the API's handling of parameters, not the model).
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import type { SparkServer } from "../src/server/http-server.js";
import { sdkParameters } from "./helpers/sdk-types.js";
import { startScriptServer } from "./helpers/servers.js";

const TEXT = "Hello! I am Spark, and this is the end.";

type Kind = "served" | "no-op" | "refused";

/** How Spark handles each parameter; `refused` ones with a value that must be refused. */
const CHAT: Record<string, Kind> = {
  messages: "served",
  model: "served",
  audio: "refused",
  frequency_penalty: "refused",
  function_call: "refused",
  functions: "refused",
  logit_bias: "refused",
  logprobs: "served",
  max_completion_tokens: "served",
  max_tokens: "served",
  metadata: "served",
  modalities: "refused",
  moderation: "refused",
  n: "refused",
  parallel_tool_calls: "served",
  prediction: "served",
  presence_penalty: "refused",
  prompt_cache_key: "no-op",
  prompt_cache_options: "no-op",
  prompt_cache_retention: "no-op",
  reasoning_effort: "no-op",
  response_format: "served",
  safety_identifier: "no-op",
  seed: "refused",
  service_tier: "no-op",
  stop: "served",
  store: "refused",
  stream: "served",
  stream_options: "served",
  temperature: "served",
  tool_choice: "served",
  tools: "served",
  top_logprobs: "served",
  top_p: "served",
  user: "no-op",
  verbosity: "no-op",
  web_search_options: "refused",
};
const COMPLETIONS: Record<string, Kind> = {
  model: "served",
  prompt: "served",
  best_of: "refused",
  echo: "refused",
  frequency_penalty: "refused",
  logit_bias: "refused",
  logprobs: "refused",
  max_tokens: "served",
  n: "served",
  presence_penalty: "refused",
  seed: "refused",
  stop: "served",
  stream: "served",
  stream_options: "served",
  suffix: "served",
  temperature: "served",
  top_p: "served",
  user: "no-op",
};
const EMBEDDINGS: Record<string, Kind> = {
  input: "served",
  model: "served",
  dimensions: "served",
  encoding_format: "served",
  user: "no-op",
};
const RESPONSES: Record<string, Kind> = {
  access_programs: "refused",
  background: "served",
  background_options: "refused",
  context_management: "served",
  conversation: "served",
  image: "refused",
  include: "served",
  input: "served",
  instructions: "served",
  max_output_tokens: "served",
  // Spark runs no built-in tool, so a cap on their calls always holds.
  max_tool_calls: "no-op",
  metadata: "served",
  model: "served",
  moderation: "refused",
  parallel_tool_calls: "served",
  previous_response_id: "served",
  prompt: "refused",
  prompt_cache_key: "no-op",
  prompt_cache_options: "no-op",
  prompt_cache_retention: "no-op",
  reasoning: "no-op",
  safety_identifier: "no-op",
  service_tier: "no-op",
  store: "served",
  stream: "served",
  stream_options: "no-op",
  temperature: "served",
  text: "served",
  tool_choice: "served",
  tools: "served",
  top_logprobs: "served",
  top_p: "served",
  truncation: "refused",
  user: "no-op",
};

/** A value each refused parameter is refused with, and each no-op one is accepted with. */
const VALUES: Record<string, unknown> = {
  access_programs: { cyber: "standard" },
  background_options: { completion_window: "2h" },
  image: { context_compression: "enabled" },
  max_tool_calls: 3,
  moderation: { model: "omni-moderation-latest" },
  prompt_cache_options: { mode: "implicit", ttl: "30m" },
  audio: { voice: "alloy", format: "wav" },
  frequency_penalty: 0.5,
  presence_penalty: -0.5,
  function_call: "auto",
  functions: [{ name: "f", parameters: { type: "object", properties: {} } }],
  logit_bias: { "50256": -100 },
  modalities: ["text", "audio"],
  n: 2,
  seed: 7,
  store: true,
  web_search_options: {},
  best_of: 2,
  echo: true,
  logprobs: 2,
  prompt: { id: "pmpt_123" },
  truncation: "auto",
  prompt_cache_key: "my-cache",
  prompt_cache_retention: "24h",
  reasoning_effort: "low",
  reasoning: { effort: "high", summary: "auto" },
  safety_identifier: "user-hash",
  service_tier: "flex",
  stream_options: { include_obfuscation: false },
  user: "someone",
  verbosity: "low",
};

describe("every create parameter of the openai package is classified", () => {
  const routes = [
    [
      "chat/completions",
      "resources/chat/completions/completions.d.ts",
      "ChatCompletionCreateParamsBase",
      CHAT,
    ],
    ["completions", "resources/completions.d.ts", "CompletionCreateParamsBase", COMPLETIONS],
    ["embeddings", "resources/embeddings.d.ts", "EmbeddingCreateParams", EMBEDDINGS],
    ["responses", "resources/responses/responses.d.ts", "ResponseCreateParamsBase", RESPONSES],
  ] as const;
  for (const [route, file, name, table] of routes) {
    test(route, () => {
      const parameters = sdkParameters(file, name);
      assert.ok(parameters.length > 3);
      assert.deepEqual(
        parameters.filter((parameter) => !(parameter in table)),
        [],
        "unclassified",
      );
    });
  }
});

describe("refused parameters are 400s naming them; no-ops are accepted", () => {
  let server: SparkServer;
  before(async () => {
    server = await startScriptServer([
      { output: [{ type: "message", text: TEXT }] },
      { completion: "x + 1" },
    ]);
  });
  after(() => server.close());

  const post = async (path: string, body: Record<string, unknown>) => {
    const response = await fetch(`${server.url}/v1/${path}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(body),
    });
    return { status: response.status, body: (await response.json()) as { error?: { param: string | null } } };
  };
  const bases: Record<string, Record<string, unknown>> = {
    "chat/completions": { model: "spark", messages: [{ role: "user", content: "hi" }] },
    completions: { model: "spark", prompt: "let x = ", max_tokens: 4 },
    responses: { model: "spark", input: "hi" },
  };
  const tables: Record<string, Record<string, Kind>> = {
    "chat/completions": CHAT,
    completions: COMPLETIONS,
    responses: RESPONSES,
  };
  for (const [path, table] of Object.entries(tables)) {
    test(path, async () => {
      for (const [parameter, kind] of Object.entries(table)) {
        if (kind === "served") continue;
        assert.ok(parameter in VALUES, `a value for ${parameter}`);
        const answer = await post(path, { ...bases[path], [parameter]: VALUES[parameter] });
        if (kind === "refused") {
          assert.equal(answer.status, 400, `${path} ${parameter}`);
          assert.equal(answer.body.error?.param, parameter);
        } else {
          assert.equal(answer.status, 200, `${path} ${parameter}: ${JSON.stringify(answer.body)}`);
        }
      }
    });
  }

  test("refused parameters at their default ask for nothing and are accepted", async () => {
    const chat = await post("chat/completions", {
      ...bases["chat/completions"],
      frequency_penalty: 0,
      presence_penalty: 0,
      logit_bias: {},
      seed: null,
      n: 1,
      store: false,
      modalities: ["text"],
    });
    assert.equal(chat.status, 200);
    const responses = await post("responses", { ...bases.responses, truncation: "disabled", prompt: null });
    assert.equal(responses.status, 200);
  });

  test("chat stop ends the text before the first stop sequence, streaming or not", async () => {
    const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const completion = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "hi" }],
      stop: ["nothing here", "Spark,"],
    });
    assert.equal(completion.choices[0]!.message.content, "Hello! I am ");
    assert.equal(completion.choices[0]!.finish_reason, "stop");
    const stream = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "hi" }],
      stop: "end",
      stream: true,
    });
    let text = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(text, "Hello! I am Spark, and this is the ");
    assert.equal(finish, "stop");
    const untouched = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "hi" }],
      stop: ["absent"],
    });
    assert.equal(untouched.choices[0]!.message.content, TEXT);
  });
});
