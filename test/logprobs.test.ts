/**
 * Log probabilities through the official `openai` SDK against the real llama engine: Chat
 * Completions' `logprobs` / `top_logprobs` and Responses' `include: ["message.output_text.logprobs"]`,
 * streaming included; the cases the engine cannot report exactly are 400s naming the parameter.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { SparkServer } from "../src/server/http-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { apiError, startLlamaApi } from "./helpers/openai-api.js";
import { startScriptServer } from "./helpers/servers.js";

const modelPath = testModelPath();

interface Logprob {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs: { token: string; logprob: number; bytes: number[] | null }[];
}

/** What every token's entry must satisfy: a log probability, its bytes, `top` alternatives best first. */
function checkEntries(entries: readonly Logprob[], top: number): void {
  for (const entry of entries) {
    assert.ok(entry.logprob <= 0 && Number.isFinite(entry.logprob), `logprob ${entry.logprob}`);
    assert.ok(Array.isArray(entry.bytes));
    assert.equal(entry.top_logprobs.length, top);
    for (let i = 1; i < entry.top_logprobs.length; i++)
      assert.ok(entry.top_logprobs[i - 1]!.logprob >= entry.top_logprobs[i]!.logprob);
    const mass = entry.top_logprobs.reduce((sum, alternative) => sum + Math.exp(alternative.logprob), 0);
    assert.ok(mass <= 1 + 1e-6);
  }
}

describe("logprobs on the llama engine", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let server: SparkServer;
  let openai: OpenAI;

  before(async () => {
    ({ server, openai } = await startLlamaApi(modelPath!));
  });
  after(() => server?.close());

  test("chat: one entry per output token; at temperature 0 each token is the likeliest", async () => {
    const completion = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "Count to five." }],
      logprobs: true,
      top_logprobs: 3,
      max_completion_tokens: 12,
      temperature: 0,
    });
    const choice = completion.choices[0]!;
    const entries = choice.logprobs!.content! as Logprob[];
    assert.equal(entries.length, completion.usage!.completion_tokens);
    checkEntries(entries, 3);
    for (const entry of entries) assert.equal(entry.logprob, entry.top_logprobs[0]!.logprob);
    assert.equal(entries.map((entry) => entry.token).join(""), choice.message.content);
  });

  test("the distribution does not depend on the temperature: the first token's alternatives agree", async () => {
    const ask = (temperature: number) =>
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "Name a colour." }],
        logprobs: true,
        top_logprobs: 5,
        max_completion_tokens: 3,
        temperature,
      });
    const greedy = (await ask(0)).choices[0]!.logprobs!.content![0]!;
    const sampled = (await ask(1.2)).choices[0]!.logprobs!.content![0]!;
    assert.deepEqual(
      sampled.top_logprobs.map((entry) => entry.token),
      greedy.top_logprobs.map((entry) => entry.token),
    );
    sampled.top_logprobs.forEach((entry, i) =>
      assert.ok(Math.abs(entry.logprob - greedy.top_logprobs[i]!.logprob) < 1e-3),
    );
  });

  test("chat streaming: the chunks' entries are the whole answer's", async () => {
    const stream = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "Count to five." }],
      logprobs: true,
      top_logprobs: 2,
      max_completion_tokens: 12,
      stream: true,
      stream_options: { include_usage: true },
    });
    const entries: Logprob[] = [];
    let text = "";
    let tokens = 0;
    for await (const chunk of stream) {
      if (chunk.usage) tokens = chunk.usage.completion_tokens;
      const choice = chunk.choices[0];
      if (!choice) continue;
      text += choice.delta.content ?? "";
      entries.push(...((choice.logprobs?.content ?? []) as Logprob[]));
    }
    assert.equal(entries.length, tokens);
    checkEntries(entries, 2);
    assert.equal(entries.map((entry) => entry.token).join(""), text);
  });

  test("responses: include message.output_text.logprobs, streamed in the deltas and in the text part", async () => {
    // The SDK's create params lack top_logprobs (its Response has it); the API takes it.
    const params = {
      model: "spark",
      input: "Count to five.",
      include: ["message.output_text.logprobs"],
      top_logprobs: 2,
      max_output_tokens: 12,
      stream: true,
    } as OpenAI.Responses.ResponseCreateParamsStreaming;
    const stream = await openai.responses.create(params);
    const streamed: Logprob[] = [];
    let done: Logprob[] | undefined;
    let final: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      if (event.type === "response.output_text.delta") streamed.push(...(event.logprobs as Logprob[]));
      if (event.type === "response.output_text.done") done = event.logprobs as Logprob[];
      if (event.type === "response.incomplete" || event.type === "response.completed") final = event.response;
    }
    assert.ok(final && done);
    assert.deepEqual(streamed, done);
    assert.equal(streamed.length, final.usage!.output_tokens);
    checkEntries(streamed, 2);
    const message = final.output.find((item) => item.type === "message");
    assert.ok(message && message.type === "message");
    const part = message.content[0];
    assert.ok(part && part.type === "output_text");
    assert.deepEqual(part.logprobs, done);
  });

  test("what cannot be reported exactly, or is malformed, is a 400 naming the parameter", async () => {
    const tools = [
      { type: "function" as const, function: { name: "f", parameters: { type: "object", properties: {} } } },
    ];
    const withTools = await apiError(
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        tools,
        logprobs: true,
      }),
    );
    assert.equal(withTools.status, 400);
    assert.equal(withTools.param, "logprobs");
    const withFormat = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        include: ["message.output_text.logprobs"],
        text: { format: { type: "json_object" } },
      }),
    );
    assert.equal(withFormat.param, "include");
    const tooMany = await apiError(
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        logprobs: true,
        top_logprobs: 21,
      }),
    );
    assert.equal(tooMany.param, "top_logprobs");
    const alone = await apiError(
      openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        top_logprobs: 2,
      }),
    );
    assert.equal(alone.param, "top_logprobs");
    const unknown = await apiError(
      openai.responses.create({
        model: "spark",
        input: "hi",
        include: ["message.output_text.nothing" as never],
      }),
    );
    assert.equal(unknown.param, "include[0]");
    // With tool_choice "none" the tools cannot be called: plain text, reported.
    const none = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: "hi" }],
      tools,
      tool_choice: "none",
      logprobs: true,
      max_completion_tokens: 3,
    });
    assert.ok(none.choices[0]!.logprobs!.content!.length > 0);
  });
});

describe("logprobs on an engine that cannot report them", () => {
  test("the script engine refuses them with a 400", async () => {
    const server = await startScriptServer([{ output: [{ type: "message", text: "hello" }] }]);
    try {
      const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
      const error = await apiError(
        openai.chat.completions.create({
          model: "spark",
          messages: [{ role: "user", content: "hi" }],
          logprobs: true,
        }),
      );
      assert.equal(error.param, "logprobs");
      const plain = await openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "hi" }],
        logprobs: false,
      });
      assert.equal(plain.choices[0]!.logprobs, null);
    } finally {
      await server.close();
    }
  });
});
