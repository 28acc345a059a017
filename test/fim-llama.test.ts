/**
 * Fill in the middle with the real llama engine: the tiny test model has no FIM tokens (refused
 * clearly), and a copy of it given FIM token ids (test/helpers/gguf-metadata.ts) checks the prompt
 * layout, KV reuse across keystrokes and cancellation.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { getLlama, LlamaLogLevel, type Llama, type LlamaModel, type Token } from "node-llama-cpp";
import OpenAI from "openai";
import type { EngineRequest } from "../src/engine/types.js";
import { CHUNK_CHARS, clipLines, exceedsTokens, type ClipTokenizer } from "../src/engines/llama/clip-text.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import type { SparkServer } from "../src/server/http-server.js";
import { startApi } from "./helpers/openai-api.js";
import { FIM_FIXTURE_TOKENS, fimTestModelPath, MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

const modelPath = testModelPath();
const skip = modelPath ? false : MODEL_SKIP_MESSAGE;

function fimRequest(
  prefix: string,
  suffix: string,
  extra: EngineRequest["fim"] extends infer F ? (F extends { extra: infer E } ? E : never) : never = [],
): EngineRequest {
  return {
    model: "spark",
    items: [],
    tools: [],
    toolChoice: "none",
    parallelToolCalls: false,
    temperature: 0,
    maxOutputTokens: 24,
    fim: { prefix, suffix, extra },
  };
}

describe("clipping tokenizes about a budget's worth of text, whatever the input", { skip }, () => {
  let llama: Llama;
  let model: LlamaModel;
  // Every call to the real tokenizer, and the characters it was given.
  let calls = 0;
  let chars = 0;
  let tokenizer: ClipTokenizer;
  const LIMIT = 3800;
  // Bounded by the budget and one chunk, never by the input (a few times over, for the re-cuts).
  const MAX_CHARS = 10 * CHUNK_CHARS;

  before(async () => {
    llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
    model = await llama.loadModel({ modelPath: modelPath! });
    tokenizer = {
      tokenize: (text) => {
        calls++;
        chars += text.length;
        return model.tokenize(text, false);
      },
      detokenize: (tokens) => model.detokenize(tokens),
    };
  });
  after(async () => {
    await model?.dispose();
    await llama?.dispose();
  });
  const reset = (): void => {
    calls = 0;
    chars = 0;
  };
  const text = (tokens: readonly Token[]): string => model.detokenize(tokens);

  test("many short lines then one long line at the cursor: the long line is not tokenized once per line", () => {
    // Before: the long line was tokenized again for each short line dropped (a 0.8 MB body, 25 s).
    const prefix = "x\n".repeat(200_000) + "y".repeat(400_000);
    reset();
    const tokens = clipLines(prefix, tokenizer, LIMIT, "keep-end");
    assert.ok(tokens.length <= LIMIT && tokens.length > LIMIT - 8, `${tokens.length} tokens`);
    assert.ok(chars <= MAX_CHARS, `${chars} characters tokenized in ${calls} calls`);
    assert.ok(calls <= 12, `${calls} tokenizer calls`);
    // The line is longer than the budget: the tokens nearest the cursor are kept.
    assert.ok(prefix.endsWith(text(tokens).trimStart()));
  });

  test("the suffix likewise, keeping its start", () => {
    const suffix = "y".repeat(400_000) + "\nx".repeat(200_000);
    reset();
    const tokens = clipLines(suffix, tokenizer, LIMIT, "keep-start");
    assert.ok(tokens.length <= LIMIT && tokens.length > LIMIT - 8, `${tokens.length} tokens`);
    assert.ok(chars <= MAX_CHARS, `${chars} characters tokenized in ${calls} calls`);
    assert.ok(suffix.startsWith(text(tokens).trimStart()));
  });

  test("a 14 MB prefix keeps whole lines next to the cursor, nearly filling the budget", () => {
    const line = "export function f(value: number): number { return value * 3 + 1; }\n";
    const prefix = line.repeat(Math.ceil(14_000_000 / line.length)) + "const last = ";
    reset();
    const tokens = clipLines(prefix, tokenizer, LIMIT, "keep-end");
    assert.ok(chars <= MAX_CHARS, `${chars} characters tokenized in ${calls} calls`);
    const lineTokens = model.tokenize(line, false).length;
    assert.ok(tokens.length <= LIMIT && tokens.length > LIMIT - 2 * lineTokens, `${tokens.length} tokens`);
    // Cut at a line start: the kept text is whole lines, then the cursor's line.
    const kept = text(tokens).trimStart();
    assert.ok(kept.startsWith("export function f(") && prefix.endsWith(kept), kept.slice(0, 40));
    // Exactly those lines' tokens, as tokenizing them alone gives (the clip point is stable).
    assert.deepEqual(tokens, model.tokenize(prefix.slice(prefix.length - kept.length), false));
  });

  test("a 14 MB suffix keeps whole lines from its start", () => {
    const line = "  return value * 3 + 1; // a line of the rest of the file\n";
    const suffix = line.repeat(Math.ceil(14_000_000 / line.length));
    reset();
    const tokens = clipLines(suffix, tokenizer, LIMIT, "keep-start");
    assert.ok(chars <= MAX_CHARS, `${chars} characters tokenized in ${calls} calls`);
    const lineTokens = model.tokenize(line, false).length;
    assert.ok(tokens.length <= LIMIT && tokens.length > LIMIT - 2 * lineTokens, `${tokens.length} tokens`);
    assert.ok(text(tokens).endsWith("\n"));
  });

  test("a conversation far over the context is found so after tokenizing about a context's worth", () => {
    const big = "word ".repeat(2_800_000);
    reset();
    assert.equal(exceedsTokens(["You are helpful.", big], tokenizer.tokenize, 4096), true);
    assert.ok(chars <= MAX_CHARS, `${chars} characters tokenized`);
    assert.equal(exceedsTokens(["You are helpful.", "word ".repeat(1000)], tokenizer.tokenize, 4096), false);
  });
});

describe("FIM with a model that has no FIM tokens", { skip }, () => {
  let server: SparkServer;
  let openai: OpenAI;
  before(async () => {
    const engine = new LlamaEngine({
      modelPath: async () => modelPath!,
      gpu: false,
      threads: 1,
      sequences: 1,
    });
    ({ server, openai } = await startApi(engine));
  });
  after(() => server?.close());

  test("a plain prompt (no suffix) is completed, whole, streamed, with n and with model auto", async () => {
    // Before: 400 fim_unsupported, though continuing a prompt needs no FIM tokens.
    const prompt = "def add(a, b):\n    ";
    const whole = await openai.completions.create({ model: "spark", prompt, max_tokens: 8, temperature: 0 });
    assert.equal(whole.object, "text_completion");
    assert.equal(whole.choices.length, 1);
    assert.ok(
      whole.usage!.prompt_tokens > 0 && whole.usage!.completion_tokens > 0,
      JSON.stringify(whole.usage),
    );
    const stream = await openai.completions.create({
      model: "spark",
      prompt,
      max_tokens: 8,
      temperature: 0,
      stream: true,
    });
    let streamed = "";
    let finish: string | null = null;
    for await (const chunk of stream) {
      streamed += chunk.choices[0]?.text ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    // Temperature 0: the same text, whole or streamed.
    assert.equal(streamed, whole.choices[0]!.text);
    assert.equal(finish, whole.choices[0]!.finish_reason);
    const two = await openai.completions.create({ model: "spark", prompt, max_tokens: 4, n: 2 });
    assert.deepEqual(
      two.choices.map((c) => c.index),
      [0, 1],
    );
    const auto = await openai.completions.create({ model: "auto", prompt, max_tokens: 4 });
    assert.equal(auto.choices.length, 1);
  });

  test("other files without a suffix still need FIM tokens", async () => {
    const response = await fetch(`${server.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "spark",
        prompt: "let a = ",
        input_extra: [{ filename: "b.ts", text: "export const b = 1;" }],
        max_tokens: 4,
      }),
    });
    assert.equal(response.status, 400);
    assert.equal(((await response.json()) as { error: { code: string } }).error.code, "fim_unsupported");
  });

  test("is refused with 400 fim_unsupported, naming what the model lacks", async () => {
    await assert.rejects(
      openai.completions.create({
        model: "spark",
        prompt: "def add(a, b):\n    ",
        suffix: "\n",
        max_tokens: 8,
      }),
      (error: InstanceType<typeof OpenAI.APIError>) => {
        assert.equal(error.status, 400);
        assert.equal(error.code, "fim_unsupported");
        assert.match(error.message, /fim_pre_token_id/);
        return true;
      },
    );
  });
});

describe("FIM with FIM tokens (the tiny model's copy)", { skip }, () => {
  let directory: string;
  let engine: LlamaEngine;
  let server: SparkServer;
  let openai: OpenAI;
  const cancels: number[] = [];

  before(async () => {
    directory = mkdtempSync(join(tmpdir(), "spark-fim-"));
    const path = (await fimTestModelPath(directory))!;
    engine = new LlamaEngine({
      modelPath: async () => path,
      gpu: false,
      threads: 1,
      sequences: 2,
      onCancel: ({ tokensAfterAbort }) => cancels.push(tokensAfterAbort),
    });
    ({ server, openai } = await startApi(engine));
  });
  after(async () => {
    await server?.close();
    rmSync(directory, { recursive: true, force: true });
  });

  test("lays out other files, then prefix, suffix and middle with the model's own tokens", async () => {
    const extra = [{ filename: "util.ts", text: "export const one = 1;" }];
    const tokens = engine.promptTokens(fimRequest("const two = ", ";\nexport default two;\n", extra));
    const { prefix, suffix, middle, fileSeparator } = FIM_FIXTURE_TOKENS;
    const at = (token: number): number => tokens.indexOf(token as never);
    // BOS, the file separator, the other file, then PRE prefix SUF suffix MID at the end.
    assert.equal(tokens[1], fileSeparator);
    assert.ok(at(fileSeparator) < at(prefix) && at(prefix) < at(suffix) && at(suffix) < at(middle));
    assert.equal(tokens.at(-1), middle);
    const text = async (from: number, to: number): Promise<string> =>
      engine.detokenize(tokens.slice(from, to) as never);
    assert.match(await text(2, at(prefix)), /util\.ts\nexport const one = 1;/);
    assert.equal((await text(at(prefix) + 1, at(suffix))).trim(), "const two =");
    assert.match(await text(at(suffix) + 1, at(middle)), /export default two;/);
  });

  test("the next keystroke evaluates only what changed (KV reuse reported as cached tokens)", async () => {
    const file = Array.from({ length: 60 }, (_, i) => `function f${i}(x) { return x * ${i}; }`).join("\n");
    const prompt = `${file}\nfunction g(y) {\n  return y`;
    const first = await openai.completions.create({
      model: "spark",
      prompt,
      suffix: "\n}\n",
      max_tokens: 8,
      temperature: 0,
    });
    const next = await openai.completions.create({
      model: "spark",
      prompt: `${prompt} `,
      suffix: "\n}\n",
      max_tokens: 8,
      temperature: 0,
    });
    const total = first.usage!.prompt_tokens;
    const cached = next.usage!.prompt_tokens_details?.cached_tokens ?? 0;
    assert.ok(total > 500, `the file is ${total} tokens`);
    // Everything before the cursor's last token stays cached; the suffix is evaluated again.
    assert.ok(cached >= total - 16, `cached ${cached} of ${next.usage!.prompt_tokens}`);
    assert.equal(first.choices[0]!.finish_reason, "length");
  });

  test("output equals a cold engine's at temperature 0 (reuse changes nothing)", async () => {
    const request = fimRequest("let total = 0;\nfor (const x of xs) {\n  total", "\n}\n");
    const collect = async (target: LlamaEngine): Promise<string> => {
      let text = "";
      for await (const part of target.stream(request, new AbortController().signal))
        if (part.type === "text-delta") text += part.delta;
      return text;
    };
    const warm = await collect(engine);
    const again = await collect(engine);
    assert.equal(again, warm);
    assert.ok(warm.length > 0);
  });

  test("a cancelled completion stops within one token", async () => {
    const prompt = "const a = ";
    // The random model writes 200 tokens here without meeting an end-of-generation token.
    const whole = await openai.completions.create({
      model: "spark",
      prompt,
      max_tokens: 200,
      temperature: 0,
    });
    assert.equal(whole.choices[0]!.finish_reason, "length");
    const controller = new AbortController();
    const stream = await openai.completions.create(
      { model: "spark", prompt, max_tokens: 200, temperature: 0, stream: true },
      { signal: controller.signal },
    );
    let chunks = 0;
    try {
      for await (const _chunk of stream) if (++chunks === 1) controller.abort();
    } catch {
      // The SDK reports the abort as an error.
    }
    // The server sees the socket close and cancels; wait for the engine to report it.
    for (let i = 0; i < 100 && cancels.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(cancels.length, 1);
    assert.ok(cancels[0]! <= 1, `decoded ${cancels[0]} tokens after the abort`);
  });
});
