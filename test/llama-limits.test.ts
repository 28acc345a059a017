/**
 * The llama engine's output limits with the real node-llama-cpp and the tiny GGUF model: every
 * generation ends within the model's context (clients such as Continue send no maximum, opencode
 * sends 32,000), a prompt that leaves no room is a plain 400 `context_length_exceeded` on every
 * transport, and `--max-output-tokens` is the default maximum of every model.
 */
import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import OpenAI from "openai";
import { resolveSettings } from "../src/settings/config.js";
import { createModels } from "../src/cli/create-engine.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import type { SparkServer } from "../src/server/http-server.js";
import { startApi } from "./helpers/openai-api.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";
import { terminalOf, WsClient } from "./helpers/ws-client.js";

const modelPath = testModelPath();
const CONTEXT = 256;
/** The tiny model at temperature 0 never writes an end-of-generation token for this prompt. */
const LONG_RUNNING = "Tell me a long story.";
/** About 400 tokens: more than the whole context. */
const TOO_LONG = "word ".repeat(400);

describe("llama engine: output within the context", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let engine: LlamaEngine;
  let server: SparkServer;
  let openai: OpenAI;

  before(async () => {
    engine = new LlamaEngine({
      modelPath: async () => modelPath!,
      gpu: false,
      threads: 1,
      contextSize: CONTEXT,
      sequences: 2,
    });
    ({ server, openai } = await startApi(engine));
  });
  after(() => server?.close());

  test("a Chat Completions stream without max_tokens ends by itself at the room left, finish_reason length", async () => {
    const stream = await openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: LONG_RUNNING }],
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    let text = "";
    for await (const chunk of stream) {
      finish = chunk.choices[0]?.finish_reason ?? finish;
      text += chunk.choices[0]?.delta.content ?? "";
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(finish, "length");
    assert.ok(usage && text.length > 0);
    const room = CONTEXT - usage.prompt_tokens;
    assert.ok(usage.completion_tokens <= room, `${usage.completion_tokens} output tokens, room ${room}`);
    assert.ok(usage.completion_tokens >= room - 2, "it ran until the context was full");
  });

  test("Responses: no max_output_tokens or a larger one ends incomplete, reason max_output_tokens", async () => {
    for (const max_output_tokens of [undefined, 32_000]) {
      const response = await openai.responses.create({
        model: "spark",
        input: LONG_RUNNING,
        temperature: 0,
        ...(max_output_tokens ? { max_output_tokens } : {}),
      });
      assert.equal(response.status, "incomplete");
      assert.deepEqual(response.incomplete_details, { reason: "max_output_tokens" });
      const usage = response.usage!;
      assert.ok(usage.output_tokens <= CONTEXT - usage.input_tokens);
      assert.ok(usage.output_tokens >= CONTEXT - usage.input_tokens - 2);
    }
    const stream = await openai.responses.create({
      model: "spark",
      input: LONG_RUNNING,
      temperature: 0,
      stream: true,
    });
    let terminal: OpenAI.Responses.ResponseStreamEvent | undefined;
    for await (const event of stream) terminal = event;
    assert.equal(terminal?.type, "response.incomplete");
    if (terminal?.type === "response.incomplete") {
      assert.deepEqual(terminal.response.incomplete_details, { reason: "max_output_tokens" });
      assert.ok(terminal.response.usage!.total_tokens <= CONTEXT);
    }
  });

  test("a smaller max_output_tokens still applies", async () => {
    const response = await openai.responses.create({
      model: "spark",
      input: LONG_RUNNING,
      max_output_tokens: 10,
      temperature: 0,
    });
    assert.equal(response.usage?.output_tokens, 10);
    assert.deepEqual(response.incomplete_details, { reason: "max_output_tokens" });
  });

  test("the context is never shifted: after a turn that filled it, the prompt is still cached", async () => {
    const input = "Count to three, slowly.";
    const first = await openai.responses.create({ model: "spark", input, temperature: 0 });
    assert.equal(first.usage?.total_tokens, CONTEXT);
    // Shifting would have erased the start of the sequence, and with it the cached prompt.
    const again = await openai.responses.create({
      model: "spark",
      input,
      max_output_tokens: 4,
      temperature: 0,
    });
    assert.equal(again.usage?.input_tokens_details.cached_tokens, again.usage!.input_tokens - 1);
    assert.equal(again.output_text, first.output_text.slice(0, again.output_text.length));
  });

  test("a prompt longer than the context is a 400 context_length_exceeded with the counts, streaming or not", async () => {
    for (const stream of [false, true]) {
      const chat = await openai.chat.completions
        .create({ model: "spark", messages: [{ role: "user", content: TOO_LONG }], stream })
        .then(
          () => assert.fail("accepted"),
          (error: unknown) => error,
        );
      const responses = await openai.responses.create({ model: "spark", input: TOO_LONG, stream }).then(
        () => assert.fail("accepted"),
        (error: unknown) => error,
      );
      for (const error of [chat, responses]) {
        assert.ok(error instanceof OpenAI.APIError, String(error));
        assert.equal(error.status, 400);
        assert.equal(error.code, "context_length_exceeded");
        assert.match(
          error.message,
          /maximum context length is 256 tokens, but the conversation is \d{3} tokens/,
        );
      }
    }
  });

  test("over a WebSocket the too-long create is an error event, and the connection goes on", async () => {
    const client = await WsClient.connect(server.url);
    client.send({ type: "response.create", input: TOO_LONG });
    const error = await client.waitForType("error");
    assert.equal(error.status, 400);
    assert.equal((error.error as { code: string }).code, "context_length_exceeded");
    const next = terminalOf(await client.turn({ input: "hi", max_output_tokens: 3 }));
    assert.equal(next.response.usage?.output_tokens, 3);
    await client.close();
  });

  test("a conversation too long for the context can still be compacted", async () => {
    const input: OpenAI.Responses.ResponseInputItem[] = [];
    for (let i = 0; i < 6; i++) {
      input.push({ role: "user", content: `Step ${i}: go on.` });
      input.push({ role: "assistant", content: `Done with step ${i}. ${"More detail here. ".repeat(12)}` });
    }
    input.push({ role: "user", content: "Now finish." });
    const tooLong = await openai.responses.create({ model: "spark", input, max_output_tokens: 4 }).then(
      () => assert.fail("accepted"),
      (error: unknown) => error,
    );
    assert.ok(tooLong instanceof OpenAI.APIError && tooLong.code === "context_length_exceeded");
    // The model cannot read it to summarize it: the summary is extractive, and compaction succeeds.
    const compacted = await openai.responses.compact({ model: "spark", input });
    assert.equal(compacted.output.at(-1)?.type, "compaction");
    const kept = compacted.output.slice(0, -1) as unknown as { content: { text: string }[] }[];
    assert.equal(kept.at(-1)?.content[0]?.text, "Now finish.");
  });

  test("at the edge: a prompt leaving 2 cells gets 2 tokens, one leaving 1 is a 400", async () => {
    /** An input whose rendered prompt is exactly `tokens` long (one "a" is one token here). */
    const inputOf = (tokens: number): string => {
      for (let words = 1; words < CONTEXT; words++) {
        const text = "a ".repeat(words).trim();
        const length = engine.promptTokens({
          model: "spark",
          items: [{ type: "message", role: "user", text }],
          tools: [],
          toolChoice: "auto",
          parallelToolCalls: true,
        }).length;
        if (length === tokens) return text;
        if (length > tokens) break;
      }
      throw new Error(`no input renders to ${tokens} tokens`);
    };
    const edge = await openai.responses.create({
      model: "spark",
      input: inputOf(CONTEXT - 2),
      temperature: 0,
    });
    assert.equal(edge.usage?.input_tokens, CONTEXT - 2);
    assert.equal(edge.usage?.output_tokens, 2);
    assert.equal(edge.status, "incomplete");
    const over = await openai.responses.create({ model: "spark", input: inputOf(CONTEXT - 1) }).then(
      () => assert.fail("accepted"),
      (error: unknown) => error,
    );
    assert.ok(over instanceof OpenAI.APIError);
    assert.equal(over.code, "context_length_exceeded");
  });
});

describe("--max-output-tokens", () => {
  const dir = mkdtempSync(join(tmpdir(), "spark-limits-"));
  const script = join(dir, "script.jsonl");
  writeFileSync(script, '{"output":[{"type":"message","text":"hi"}]}\n');

  test("is the default of every model, built-in aliases included; a model's own defaults win", async () => {
    const flat = await createModels(
      resolveSettings({ engine: "script", script, maxOutputTokens: 64 }, {}),
      () => {},
    );
    for (const alias of ["spark", "deep", "gpt-5.3-codex-spark", "gpt-5.3-codex"]) {
      const entry = flat.entries().find((e) => e.alias === alias);
      assert.equal(entry?.defaults.maxOutputTokens, 64, alias);
    }
    const fromEnv = await createModels(
      resolveSettings({ engine: "script", script }, { SPARK_MAX_OUTPUT_TOKENS: "128" }),
      () => {},
    );
    assert.equal(fromEnv.entries().find((e) => e.alias === "spark")?.defaults.maxOutputTokens, 128);
    const config = join(dir, "config.json");
    writeFileSync(
      config,
      JSON.stringify({
        maxOutputTokens: 64,
        models: {
          spark: { engine: "script", script },
          deep: { engine: "script", script, defaults: { maxOutputTokens: 1000 } },
        },
      }),
    );
    const declared = await createModels(resolveSettings({ config }, {}), () => {});
    assert.equal(declared.entries().find((e) => e.alias === "spark")?.defaults.maxOutputTokens, 64);
    assert.equal(declared.entries().find((e) => e.alias === "deep")?.defaults.maxOutputTokens, 1000);
    const none = await createModels(resolveSettings({ engine: "script", script }, {}), () => {});
    assert.equal(none.entries().find((e) => e.alias === "spark")?.defaults.maxOutputTokens, undefined);
  });

  test("is validated", () => {
    assert.throws(
      () => resolveSettings({ engine: "script", script }, { SPARK_MAX_OUTPUT_TOKENS: "0" }),
      /maxOutputTokens|SPARK_MAX_OUTPUT_TOKENS/,
    );
  });
});
