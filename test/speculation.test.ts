/**
 * Predicted Outputs in the llama engine (real node-llama-cpp, the tiny test model): the output with a
 * prediction (matching, partly matching, unrelated, empty) is the plain output token for token at
 * temperature 0; the counts are what the engine verified; a cancel during speculation stops it.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import type { EngineRequest, Usage } from "../src/engine/types.js";
import OpenAI from "openai";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { MAX_DRAFT_TOKENS } from "../src/engines/llama/prediction-drafter.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { terminalOf, WsClient } from "./helpers/ws-client.js";

const modelPath = testModelPath();

function request(text: string, prediction?: string): EngineRequest {
  return {
    model: "spark",
    items: [{ type: "message", role: "user", text }],
    tools: [],
    toolChoice: "auto",
    parallelToolCalls: true,
    temperature: 0,
    maxOutputTokens: 120,
    ...(prediction !== undefined ? { prediction } : {}),
  };
}

describe("Predicted Outputs in the llama engine", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let engine: LlamaEngine;
  /** In front of `engine` (closing a server closes its engines: once, at the end). */
  let server: SparkServer;
  const cancels: number[] = [];

  before(async () => {
    engine = new LlamaEngine({
      modelPath: async () => modelPath!,
      gpu: false,
      threads: 1,
      sequences: 1,
      onCancel: ({ tokensAfterAbort }) => cancels.push(tokensAfterAbort),
    });
    await engine.start();
    server = new SparkServer({ engine, port: 0 });
    await server.listen();
  });
  after(() => server?.close());

  async function run(
    req: EngineRequest,
    signal = new AbortController().signal,
  ): Promise<{ text: string; usage: Usage; reason: string }> {
    let text = "";
    let usage: Usage | undefined;
    let reason = "";
    for await (const part of engine.stream(req, signal)) {
      if (part.type === "text-delta") text += part.delta;
      if (part.type === "finish") {
        usage = part.usage;
        reason = part.reason;
      }
    }
    return { text, usage: usage!, reason };
  }

  for (const prompt of ["Write a sorting function in C.", "Explain recursion with an example in Python."]) {
    test(`identical output with any prediction at temperature 0: ${prompt}`, async () => {
      const plain = await run(request(prompt));
      assert.ok(plain.text.length > 20, "the model writes something");
      assert.equal(plain.usage.speculation, undefined, "no prediction, no speculation");
      const words = plain.text.split(" ");
      const partly = words.map((word, i) => (i % 7 === 3 ? "CHANGED" : word)).join(" ");
      const predictions = {
        matching: plain.text,
        partly,
        unrelated: "The quick brown fox jumps over the lazy dog. ".repeat(10),
        empty: "",
      };
      for (const [name, prediction] of Object.entries(predictions)) {
        const speculated = await run(request(prompt, prediction));
        assert.equal(speculated.text, plain.text, `${name} prediction changed the output`);
        assert.equal(speculated.usage.outputTokens, plain.usage.outputTokens, name);
        const counts = speculated.usage.speculation;
        if (name === "matching") {
          assert.ok(counts, "a matching prediction speculates");
          // Everything drafted from a prediction of the very output is accepted.
          assert.ok(counts.accepted >= plain.usage.outputTokens / 2, `accepted ${counts.accepted}`);
          assert.equal(counts.drafted, counts.accepted + counts.rejected);
          assert.equal(counts.predictionAccepted, counts.accepted);
          assert.ok(counts.steps < plain.usage.outputTokens / 2, `${counts.steps} verification steps`);
        }
        if (name === "partly") {
          assert.ok(counts, "a partly matching prediction speculates");
          // It re-aligns after each changed word: more is accepted than a prefix alone would give.
          assert.ok(counts.accepted > 0 && counts.rejected > 0, JSON.stringify(counts));
          assert.equal(counts.drafted, counts.accepted + counts.rejected);
        }
        if (name === "empty") assert.equal(counts, undefined);
      }
    });
  }

  test("input lookup drafts from the conversation's own text and changes nothing at temperature 0", async () => {
    const plain = await run(request("Write a sorting function in C."));
    const looked = await run({
      ...request("Write a sorting function in C."),
      speculation: { inputLookup: true },
    });
    assert.equal(looked.text, plain.text);
    const counts = looked.usage.speculation!;
    // The random model's output repeats itself, which is what input lookup finds.
    assert.ok(counts.accepted > 0, JSON.stringify(counts));
    assert.equal(counts.predictionAccepted, 0, "no prediction, so nothing is counted as one");
    assert.equal(counts.drafted, counts.accepted + counts.rejected);
    const both = await run({
      ...request("Write a sorting function in C.", plain.text.slice(0, plain.text.length / 2)),
      speculation: { inputLookup: true },
    });
    assert.equal(both.text, plain.text);
    assert.ok(both.usage.speculation!.predictionAccepted > 0);
    assert.ok(both.usage.speculation!.accepted > both.usage.speculation!.predictionAccepted);
    const off = await run({
      ...request("Write a sorting function in C."),
      speculation: { inputLookup: false },
    });
    assert.equal(off.usage.speculation, undefined);
  });

  test("a cancel during speculation stops the generation within one verification batch", async () => {
    const plain = await run(request("Write a sorting function in C."));
    const controller = new AbortController();
    let deltas = 0;
    let reason = "";
    for await (const part of engine.stream(
      request("Write a sorting function in C.", plain.text),
      controller.signal,
    )) {
      if (part.type === "text-delta" && ++deltas === 2) controller.abort();
      if (part.type === "finish") reason = part.reason;
    }
    assert.equal(reason, "cancelled");
    assert.equal(cancels.length, 1);
    assert.ok(cancels[0]! <= MAX_DRAFT_TOKENS + 1, `${cancels[0]} tokens after the abort`);
  });
  test("steering a response that speculates: it ends as steered and its successor speculates too", async () => {
    const plain = await run(request("Write a sorting function in C."));
    const client = await WsClient.connect(server.url);
    try {
      client.send({
        type: "response.create",
        input: "Write a sorting function in C.",
        max_output_tokens: 300,
        temperature: 0,
        store: false,
        prediction: { type: "content", content: plain.text },
      });
      const { steeredId, successorId } = await client.steerMidStream(3, "Shorter, please.");
      const steered = terminalOf(client.responseEvents(steeredId));
      assert.deepEqual(steered.response.incomplete_details, { reason: "steered" });
      const successor = terminalOf(client.responseEvents(successorId)).response;
      const usage = successor.usage as unknown as { speculation?: { steps: number } };
      assert.ok(usage.speculation && usage.speculation.steps > 0, "the successor inherits the prediction");
    } finally {
      await client.close();
    }
  });

  test("the verified counts reach the wire (Chat Completions, Responses) and /metrics", async () => {
    const plain = await run(request("Write a sorting function in C."));
    const openai = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "unused", maxRetries: 0 });
    const acceptedSoFar = async (): Promise<number> =>
      Number(
        /^spark_speculative_tokens_total\{result="accepted"\} (\d+)/m.exec(
          await server.metrics.registry.metrics(),
        )?.[1] ?? 0,
      );
    const before = await acceptedSoFar();
    {
      const chat = await openai.chat.completions.create({
        model: "spark",
        messages: [{ role: "user", content: "Write a sorting function in C." }],
        temperature: 0,
        max_tokens: 120,
        prediction: { type: "content", content: plain.text },
      });
      assert.equal(chat.choices[0]!.message.content, plain.text);
      const details = chat.usage!.completion_tokens_details!;
      const direct = await run(request("Write a sorting function in C.", plain.text));
      assert.equal(details.accepted_prediction_tokens, direct.usage.speculation!.accepted);
      assert.equal(details.rejected_prediction_tokens, direct.usage.speculation!.rejected);
      const response = await openai.responses.create({
        model: "spark",
        input: "Write a sorting function in C.",
        temperature: 0,
        max_output_tokens: 120,
        // @ts-expect-error: prediction on Responses is Spark's extension
        prediction: { type: "content", content: plain.text },
      });
      const usage = response.usage as unknown as {
        output_tokens_details: { accepted_prediction_tokens: number };
        speculation: { accepted: number; steps: number };
      };
      assert.equal(
        usage.output_tokens_details.accepted_prediction_tokens,
        direct.usage.speculation!.accepted,
      );
      assert.equal(usage.speculation.steps, direct.usage.speculation!.steps);
      // Counted for the chat and the Responses request (the direct run bypassed the server).
      assert.equal((await acceptedSoFar()) - before, 2 * direct.usage.speculation!.accepted);
    }
  });
});

describe(
  "a draft model (the tiny model drafting for itself)",
  { skip: modelPath ? false : MODEL_SKIP_MESSAGE },
  () => {
    let plainEngine: LlamaEngine;
    let drafted: LlamaEngine;
    before(async () => {
      plainEngine = new LlamaEngine({
        modelPath: async () => modelPath!,
        gpu: false,
        threads: 1,
        sequences: 1,
      });
      drafted = new LlamaEngine({
        modelPath: async () => modelPath!,
        draftModelPath: modelPath!,
        gpu: false,
        threads: 1,
        sequences: 1,
      });
      await plainEngine.start();
      await drafted.start();
    });
    after(async () => {
      await plainEngine?.close();
      await drafted?.close();
    });

    test("drafts every token right and changes nothing at temperature 0", async () => {
      const collect = async (engine: LlamaEngine): Promise<{ text: string; usage: Usage }> => {
        let text = "";
        let usage: Usage | undefined;
        for await (const part of engine.stream(
          request("Write a sorting function in C."),
          new AbortController().signal,
        )) {
          if (part.type === "text-delta") text += part.delta;
          if (part.type === "finish") usage = part.usage;
        }
        return { text, usage: usage! };
      };
      const plain = await collect(plainEngine);
      const speculated = await collect(drafted);
      assert.equal(speculated.text, plain.text);
      const counts = speculated.usage.speculation!;
      // The same model drafting greedily for itself is never wrong.
      assert.equal(counts.rejected, 0, JSON.stringify(counts));
      assert.ok(counts.accepted > plain.usage.outputTokens / 2, JSON.stringify(counts));
      assert.equal(counts.predictionAccepted, 0);
    });
  },
);
