/**
 * The embedded llama.cpp engine with the real node-llama-cpp and the shared tiny GGUF model:
 * determinism, parity between the server and the engine, KV prefix reuse, and cancellation.
 */
import assert from "node:assert/strict";
import { request } from "node:http";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import type { ConversationItem, EngineRequest } from "../src/engine/types.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import type { SparkServer } from "../src/server/http-server.js";
import { startApi } from "./helpers/openai-api.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { terminalOf, WsClient } from "./helpers/ws-client.js";

const modelPath = testModelPath();

function engineRequest(items: ConversationItem[], maxOutputTokens = 24): EngineRequest {
  return {
    model: "spark",
    items,
    tools: [],
    toolChoice: "auto",
    parallelToolCalls: true,
    maxOutputTokens,
    temperature: 0,
  };
}

async function generate(engine: LlamaEngine, items: ConversationItem[], maxOutputTokens = 24) {
  let text = "";
  for await (const part of engine.stream(
    engineRequest(items, maxOutputTokens),
    new AbortController().signal,
  )) {
    if (part.type === "text-delta") text += part.delta;
    if (part.type === "finish") return { text, finish: part };
  }
  throw new Error("no finish part");
}

describe("llama engine", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let engine: LlamaEngine;
  let server: SparkServer;
  let openai: OpenAI;
  const cancels: number[] = [];

  before(async () => {
    engine = new LlamaEngine({
      modelPath: async () => modelPath!,
      gpu: false,
      onCancel: ({ tokensAfterAbort }) => cancels.push(tokensAfterAbort),
    });
    ({ server, openai } = await startApi(engine));
  });
  after(() => server?.close());

  test("loads the model, picks a thread count and reports the model", async () => {
    assert.equal(engine.status().ready, true);
    assert.ok(engine.threads >= 1);
    const models = await openai.models.list();
    assert.deepEqual(
      models.data.map((m) => m.id),
      // The tier aliases, OpenAI's names for them and the router first, then the engine's own name
      // for the file.
      ["spark", "deep", "gpt-5.3-codex-spark", "gpt-5.3-codex", "auto", "tiny-random-llama"],
    );
  });

  test("output is deterministic at temperature 0", async () => {
    const items: ConversationItem[] = [
      { type: "message", role: "user", text: "Write a sorting function in C." },
    ];
    const first = await generate(engine, items);
    const second = await generate(engine, items);
    assert.ok(first.text.length > 0);
    assert.equal(second.text, first.text);
    assert.equal(first.finish.reason, "length");
    assert.equal(first.finish.usage.outputTokens, 24);
  });

  test("the server returns the same text as the engine called directly", async () => {
    const prompt = "Explain recursion to a new programmer.";
    const direct = await generate(engine, [{ type: "message", role: "user", text: prompt }]);
    const response = await openai.responses.create({
      model: "spark",
      input: prompt,
      max_output_tokens: 24,
      temperature: 0,
    });
    assert.equal(response.output_text, direct.text);
    assert.equal(response.status, "incomplete");
    assert.equal(response.incomplete_details?.reason, "max_output_tokens");
    const stream = await openai.responses.create({
      model: "spark",
      input: prompt,
      max_output_tokens: 24,
      temperature: 0,
      stream: true,
    });
    let streamed = "";
    for await (const event of stream)
      if (event.type === "response.output_text.delta") streamed += event.delta;
    assert.equal(streamed, direct.text);
  });

  test("a continued turn reuses the KV cache and reports cached tokens", async () => {
    const history = Array.from(
      { length: 20 },
      (_, i) => `Line ${i}: the quick brown fox jumps over the lazy dog.`,
    ).join("\n");
    const first = await openai.responses.create({
      model: "spark",
      input: [{ role: "user", content: history }],
      max_output_tokens: 8,
      temperature: 0,
    });
    // Only the chat template's opening tokens can be shared with earlier, unrelated conversations.
    assert.ok(
      first.usage!.input_tokens_details.cached_tokens < 10,
      "a fresh conversation has almost nothing cached",
    );
    const second = await openai.responses.create({
      model: "spark",
      input: [
        { role: "user", content: history },
        { role: "assistant", content: first.output_text },
        { role: "user", content: "Now summarize." },
      ],
      max_output_tokens: 8,
      temperature: 0,
    });
    const cached = second.usage!.input_tokens_details.cached_tokens;
    assert.ok(
      cached >= first.usage!.input_tokens - 8,
      `cached ${cached} of the first turn's ${first.usage!.input_tokens}`,
    );
    assert.ok(cached < second.usage!.input_tokens);
  });

  test("a client that disconnects mid-stream stops generation within a few tokens", async () => {
    const before = Number((await server.metrics.cancellations.get()).values[0]?.value ?? 0);
    cancels.length = 0;
    const body = JSON.stringify({
      model: "spark",
      input: "Tell me a long story.",
      max_output_tokens: 3000,
      stream: true,
    });
    const url = new URL(`${server.url}/v1/responses`);
    await new Promise<void>((resolve, reject) => {
      const req = request(
        {
          host: url.hostname,
          port: url.port,
          path: url.pathname,
          method: "POST",
          headers: { "content-type": "application/json" },
        },
        (res) => {
          res.on("data", (chunk: Buffer) => {
            if (chunk.toString().includes("response.output_text.delta")) {
              req.destroy();
              resolve();
            }
          });
        },
      );
      req.on("error", (error) => (req.destroyed ? undefined : reject(error)));
      req.end(body);
    });
    while (cancels.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.ok(cancels[0]! <= 2, `decoded ${cancels[0]} tokens after the abort`);
    const afterCount = Number((await server.metrics.cancellations.get()).values[0]?.value ?? 0);
    assert.equal(afterCount, before + 1);
    // The engine is free again: the next request is served normally.
    const next = await openai.responses.create({ model: "spark", input: "hi", max_output_tokens: 4 });
    assert.equal(next.usage?.output_tokens, 4);
  });

  test("over one WebSocket, store:false turns reuse the KV cache: O(new tokens) per turn", async () => {
    const client = await WsClient.connect(server.url);
    const history = Array.from({ length: 12 }, (_, i) => `Step ${i}: compile, run, compare.`).join("\n");
    const first = terminalOf(
      await client.turn({ input: history, max_output_tokens: 8, temperature: 0, store: false }),
    );
    let previous = first.response;
    for (const text of ["Now the tests.", "And the docs."]) {
      const next = terminalOf(
        await client.turn({
          previous_response_id: previous.id,
          input: text,
          max_output_tokens: 8,
          temperature: 0,
          store: false,
        }),
      ).response;
      const usage = next.usage!;
      const earlier = previous.usage!.input_tokens + previous.usage!.output_tokens;
      assert.ok(
        usage.input_tokens_details.cached_tokens >= earlier - 8,
        `cached ${usage.input_tokens_details.cached_tokens} of the earlier ${earlier} tokens`,
      );
      assert.ok(
        usage.input_tokens - usage.input_tokens_details.cached_tokens < 40,
        "only the new turn is evaluated",
      );
      previous = next;
    }
    await client.close();
  });

  test("a steered response's successor evaluates only the steer input", async () => {
    const client = await WsClient.connect(server.url);
    client.send({
      type: "response.create",
      input: "Tell me a long story.",
      // Long enough to steer mid-stream; short enough that the successor (which inherits it) ends
      // well within the wait even on a loaded machine.
      max_output_tokens: 500,
      temperature: 0,
      store: false,
    });
    const { steeredId, successorId } = await client.steerMidStream(10, "Shorter, please.");
    const steered = terminalOf(client.responseEvents(steeredId));
    assert.deepEqual(steered.response.incomplete_details, { reason: "steered" });
    const successor = terminalOf(client.responseEvents(successorId)).response;
    const usage = successor.usage!;
    const earlier = steered.response.usage!.input_tokens + steered.response.usage!.output_tokens;
    assert.ok(
      usage.input_tokens_details.cached_tokens >= earlier - 8,
      `cached ${usage.input_tokens_details.cached_tokens} of the steered response's ${earlier} tokens`,
    );
    assert.ok(
      usage.input_tokens - usage.input_tokens_details.cached_tokens < 30,
      "only the steer input is evaluated",
    );
    await client.close();
  });

  test("closing the WebSocket stops decoding within a few tokens", async () => {
    cancels.length = 0;
    const client = await WsClient.connect(server.url);
    client.send({ type: "response.create", input: "Tell me a long story.", max_output_tokens: 3000 });
    await client.waitForType("response.output_text.delta");
    client.socket.terminate();
    while (cancels.length === 0) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.ok(cancels[0]! <= 2, `decoded ${cancels[0]} tokens after the close`);
  });

  test("compaction: the model writes the summary; the latest user message stays verbatim", async () => {
    const input: OpenAI.Responses.ResponseInputItem[] = [
      { role: "user", content: "Rename parse() to parseConfig() everywhere." },
      { role: "assistant", content: "Renamed in three files." },
      { role: "user", content: "Now add a test for empty input." },
    ];
    const compacted = await openai.responses.compact({ model: "spark", input });
    assert.ok(compacted.usage.output_tokens > 0, "the engine generated the summary");
    const kept = compacted.output.slice(0, -1) as unknown as { content: { text: string }[] }[];
    assert.equal(kept.at(-1)?.content[0]?.text, "Now add a test for empty input.");
    const resumed = await openai.responses.create({
      model: "spark",
      input: [
        ...(compacted.output as unknown as OpenAI.Responses.ResponseInputItem[]),
        { role: "user", content: "Go on." },
      ],
      max_output_tokens: 4,
    });
    assert.equal(resumed.usage?.output_tokens, 4);
  });

  test("concurrent requests are served on separate sequences with the same results", async () => {
    const prompts = ["alpha beta", "gamma delta", "epsilon zeta"];
    const sequential = [];
    for (const p of prompts)
      sequential.push((await generate(engine, [{ type: "message", role: "user", text: p }], 12)).text);
    const concurrent = await Promise.all(
      prompts.map((p) =>
        generate(engine, [{ type: "message", role: "user", text: p }], 12).then((r) => r.text),
      ),
    );
    assert.deepEqual(concurrent, sequential);
  });

  test("tool definitions and tool results are rendered into the model's chat format", async () => {
    const request: EngineRequest = {
      ...engineRequest([
        { type: "message", role: "user", text: "Weather in Paris? Then add a file." },
        {
          type: "tool_call",
          kind: "function",
          callId: "call_1",
          name: "get_weather",
          input: '{"city":"Paris"}',
        },
        { type: "tool_result", kind: "function", callId: "call_1", output: "sunny and 21C" },
        {
          type: "tool_call",
          kind: "custom",
          callId: "call_2",
          name: "apply_patch",
          input: "*** Begin Patch",
        },
        { type: "tool_result", kind: "custom", callId: "call_2", output: "patch applied" },
      ]),
      tools: [
        {
          kind: "function",
          name: "get_weather",
          description: "Current weather",
          parameters: {
            type: "object",
            properties: { city: { type: "string", default: "x" } },
            additionalProperties: false,
          },
        },
        { kind: "custom", name: "apply_patch", description: "Apply a patch" },
      ],
    };
    const prompt = await engine.detokenize(engine.promptTokens(request));
    for (const expected of ["get_weather", "apply_patch", "sunny and 21C", "patch applied", "Paris"]) {
      assert.ok(prompt.includes(expected), `prompt mentions ${expected}`);
    }
    const parts = [];
    for await (const part of engine.stream(request, new AbortController().signal)) parts.push(part);
    const finish = parts.at(-1);
    assert.ok(finish?.type === "finish" && finish.usage.outputTokens > 0);
  });

  test("with one sequence, requests queue; one that leaves while queued does not block the rest", async () => {
    const single = new LlamaEngine({
      modelPath: async () => modelPath!,
      gpu: false,
      threads: 1,
      sequences: 1,
    });
    await single.start();
    try {
      const leaving = new AbortController();
      const run = async (text: string, signal: AbortSignal) => {
        const parts = [];
        for await (const part of single.stream(
          engineRequest([{ type: "message", role: "user", text }], 16),
          signal,
        ))
          parts.push(part);
        return parts.at(-1);
      };
      const first = run("first", new AbortController().signal);
      const queued = run("leaves", leaving.signal).catch((error: unknown) => error);
      const third = run("third", new AbortController().signal);
      leaving.abort("client_disconnected");
      const results = await Promise.all([first, queued, third]);
      assert.equal(results[0]?.type === "finish" && results[0].reason, "length");
      assert.equal(results[1], "client_disconnected", "the queued request ends with its abort reason");
      assert.equal(results[2]?.type === "finish" && results[2].reason, "length");
    } finally {
      await single.close();
    }
  });
});
