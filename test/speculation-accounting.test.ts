/**
 * Exact Predicted Outputs accounting in the llama engine (real node-llama-cpp, the tiny test model).
 * The model's greedy output for a prompt is the prediction: its longest prefix whose text tokenizes
 * back to the very output tokens (all drafts accepted), the whole output's text (which the tokenizer
 * splits differently in places), and that text with one word and with two words altered at known
 * places. What the engine must report is computed here, independently of its generation loop: the
 * greedy tokens come from plain one-token-at-a-time decoding, the prediction's tokens from the
 * engine's own tokenization of it, and the verification steps are replayed with the real
 * `PredictionDrafter` under the rules of `speculative-decode.ts`. Chat Completions and Responses must
 * report exactly those counts, with the output unchanged.
 */
import assert from "node:assert/strict";
import { isDeepStrictEqual } from "node:util";
import { after, before, describe, test } from "node:test";
import {
  getLlama,
  LlamaChat,
  LlamaLogLevel,
  type Llama,
  type LlamaContext,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import OpenAI from "openai";
import { toChatHistory } from "../src/engines/llama/chat-history.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { MAX_DRAFT_TOKENS, PredictionDrafter } from "../src/engines/llama/prediction-drafter.js";
import { FIRST_DRAFT_TOKENS } from "../src/engines/llama/speculative-decode.js";
import { SparkServer } from "../src/server/http-server.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

const modelPath = testModelPath();

const PROMPT = "Write a sorting function in C.";
const MAX_TOKENS = 120;

interface Counts {
  drafted: number;
  accepted: number;
  rejected: number;
  steps: number;
}

/**
 * Replays `decodeSpeculative` on a known greedy output. `greedy` is what the model samples at each
 * output position (ending with the end-of-generation token when it stopped by itself); at temperature
 * 0 a drafted token is accepted exactly when it is that token, and each verification batch also
 * yields the model's own token after the accepted ones.
 */
function replay(
  greedy: readonly Token[],
  isEog: (token: Token) => boolean,
  prediction: readonly Token[],
  maxTokens: number,
): { counts: Counts; output: Token[] } {
  const drafter = new PredictionDrafter(prediction);
  const counts: Counts = { drafted: 0, accepted: 0, rejected: 0, steps: 0 };
  const output: Token[] = [];
  let limit = FIRST_DRAFT_TOKENS;
  for (;;) {
    const k = output.length;
    const draft = drafter.draft(Math.min(limit, maxTokens - k - 1));
    let matched = 0;
    while (matched < draft.length && draft[matched] === greedy[k + matched]) matched++;
    if (draft.length > 0) {
      limit = matched === draft.length ? Math.min(MAX_DRAFT_TOKENS, limit * 2) : matched + 1;
      counts.steps++;
      counts.drafted += draft.length;
      counts.accepted += matched;
      counts.rejected += draft.length - matched;
    }
    const verified = greedy.slice(k, k + matched + 1);
    assert.equal(verified.length, matched + 1, "the greedy output covers every verified position");
    for (const token of verified) {
      if (isEog(token)) return { counts, output };
      output.push(token);
      drafter.push(token);
      if (output.length >= maxTokens) return { counts, output };
    }
  }
}

/**
 * The same for a prediction that is the output token for token, stopped by the length limit after
 * `n` tokens, by arithmetic alone: every draft is accepted whole, so the draft length goes 8, 16,
 * 16, … capped by the room left (a draft never reaches the last allowed token); each batch yields its
 * draft plus one token of the model's own, which is not a drafted one.
 */
function perfectPrediction(n: number): Counts & { batches: number } {
  const counts = { drafted: 0, accepted: 0, rejected: 0, steps: 0, batches: 0 };
  let limit = FIRST_DRAFT_TOKENS;
  for (let k = 0; k < n;) {
    const draft = Math.min(limit, n - k - 1);
    if (draft > 0) {
      counts.steps++;
      counts.drafted += draft;
      counts.accepted += draft;
      limit = Math.min(MAX_DRAFT_TOKENS, limit * 2);
    }
    counts.batches++;
    k += draft + 1;
  }
  return counts;
}

/** `text` with the space-separated words at `indexes` altered (a suffix no word of the output has). */
function alter(text: string, indexes: readonly number[]): string {
  const words = text.split(" ");
  for (const index of indexes) words[index] = `${words[index]}zq`;
  return words.join(" ");
}

describe("exact Predicted Outputs accounting", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let engine: LlamaEngine;
  let server: SparkServer;
  let openai: OpenAI;
  let llama: Llama;
  let model: LlamaModel;
  let context: LlamaContext;

  before(async () => {
    engine = new LlamaEngine({ modelPath: async () => modelPath!, gpu: false, threads: 1, sequences: 1 });
    await engine.start();
    server = new SparkServer({ engine, port: 0 });
    openai = new OpenAI({ baseURL: `${await server.listen()}/v1`, apiKey: "unused", maxRetries: 0 });
    llama = await getLlama({
      gpu: false,
      build: "never",
      maxThreads: 0,
      logLevel: LlamaLogLevel.error,
      progressLogs: false,
    });
    model = await llama.loadModel({ modelPath: modelPath! });
    context = await model.createContext({
      threads: 1,
      contextSize: model.trainContextSize,
    });
  });
  after(async () => {
    await server?.close();
    await context?.dispose();
    await model?.dispose();
    await llama?.dispose();
  });

  /** The prompt as the engine renders it, and the model's greedy tokens after it, decoded one at a time. */
  async function greedyDecode(maxTokens: number): Promise<{ prompt: Token[]; greedy: Token[] }> {
    const sequence = context.getSequence();
    try {
      const chatWrapper = new LlamaChat({ contextSequence: sequence }).chatWrapper;
      const prompt = chatWrapper
        .generateContextState({
          chatHistory: toChatHistory([{ type: "message", role: "user", text: PROMPT }]),
        })
        .contextText.tokenize(model.tokenizer);
      const greedy: Token[] = [];
      const iterator = sequence.evaluate(prompt, { temperature: 0 });
      for (;;) {
        const result = await iterator.next();
        if (result.done) break;
        greedy.push(result.value);
        if (model.isEogToken(result.value) || greedy.length >= maxTokens) break;
      }
      await iterator.return();
      return { prompt, greedy };
    } finally {
      sequence.dispose();
    }
  }

  async function chat(maxTokens: number, prediction?: string) {
    return openai.chat.completions.create({
      model: "spark",
      messages: [{ role: "user", content: PROMPT }],
      temperature: 0,
      max_tokens: maxTokens,
      ...(prediction !== undefined ? { prediction: { type: "content" as const, content: prediction } } : {}),
    });
  }

  test("accepted and rejected prediction tokens are exactly what verification gives, at known divergences", async (t) => {
    const { prompt, greedy } = await greedyDecode(MAX_TOKENS);
    const isEog = (token: Token): boolean => model.isEogToken(token);
    // The engine's tokenization of a prediction: no BOS, no dummy leading space.
    const tokenize = (text: string): Token[] => model.tokenize(text, false, "trimLeadingSpace");
    // The tiny random model writes token sequences that its tokenizer would split differently, so
    // the text of its whole output does not tokenize back to the same tokens; its longest prefix
    // that does is the prediction that is the output token for token.
    let exactLength = Math.min(MAX_TOKENS, greedy.length);
    while (exactLength > 0) {
      const tokens = greedy.slice(0, exactLength);
      if (!tokens.some(isEog) && isDeepStrictEqual(tokenize(model.detokenize(tokens)), tokens)) break;
      exactLength--;
    }
    assert.ok(exactLength >= 30, `a prefix of ${exactLength} tokens tokenizes back to itself`);

    const plainFull = (await chat(MAX_TOKENS)).choices[0]!.message.content!;
    const words = plainFull.split(" ");
    assert.ok(words.length > 20, `the model writes enough words: ${JSON.stringify(plainFull)}`);
    const word = (from: number): number => {
      let index = from;
      while (!/\w/.test(words[index]!)) index++;
      return index;
    };
    const middle = word(Math.floor(words.length / 2));
    const third = word(Math.floor(words.length / 3));
    const twoThirds = word(Math.floor((2 * words.length) / 3));
    const cases: { name: string; maxTokens: number; prediction: (plain: string) => string; exact?: true }[] =
      [
        {
          name: `the output, token for token (${exactLength} tokens)`,
          maxTokens: exactLength,
          prediction: (p) => p,
          exact: true,
        },
        { name: "the output's text", maxTokens: MAX_TOKENS, prediction: (p) => p },
        { name: `word ${middle} altered`, maxTokens: MAX_TOKENS, prediction: (p) => alter(p, [middle]) },
        {
          name: `words ${third} and ${twoThirds} altered`,
          maxTokens: MAX_TOKENS,
          prediction: (p) => alter(p, [third, twoThirds]),
        },
      ];
    for (const { name, maxTokens: requested, prediction: predict, exact } of cases) {
      const plainChat = await chat(requested);
      const plain = plainChat.choices[0]!.message.content!;
      const outputTokens = plainChat.usage!.completion_tokens;
      assert.equal(
        plainChat.usage!.prompt_tokens,
        prompt.length,
        "the prompt is rendered as the engine does",
      );
      const maxTokens = Math.min(requested, context.contextSize - prompt.length);
      const own = greedy.slice(0, maxTokens);
      const stopped = own.findIndex(isEog);
      const produced = stopped >= 0 ? own.slice(0, stopped) : own;
      assert.equal(produced.length, outputTokens, name);
      assert.equal(model.detokenize(produced), plain, `${name}: one-token decoding gives the plain output`);

      const prediction = predict(plain);
      const predicted = tokenize(prediction);
      assert.ok(!predicted.some(isEog));
      const replayed = replay(stopped >= 0 ? own.slice(0, stopped + 1) : own, isEog, predicted, maxTokens);
      assert.deepEqual(replayed.output, produced, `${name}: the replay gives the greedy output`);
      const expected = replayed.counts;
      let divergence = 0;
      while (divergence < produced.length && predicted[divergence] === produced[divergence]) divergence++;
      if (exact) {
        assert.deepEqual(predicted, produced, `${name}: the prediction is the output's tokens`);
        // Nothing drafted is wrong; all but one token per verification batch was drafted.
        const { batches, ...perfect } = perfectPrediction(outputTokens);
        assert.deepEqual(expected, perfect, name);
        assert.equal(expected.rejected, 0);
        assert.equal(expected.accepted, outputTokens - batches);
      } else {
        assert.ok(expected.rejected > 0, `${name}: what the output does not follow is drafted and rejected`);
      }

      const completion = await chat(requested, prediction);
      assert.equal(completion.choices[0]!.message.content, plain, `${name}: the chat output is unchanged`);
      assert.equal(completion.usage!.completion_tokens, outputTokens);
      const details = completion.usage!.completion_tokens_details!;
      const measuredChat = {
        accepted: details.accepted_prediction_tokens,
        rejected: details.rejected_prediction_tokens,
      };
      assert.deepEqual(
        measuredChat,
        { accepted: expected.accepted, rejected: expected.rejected },
        `${name}: Chat Completions counts`,
      );

      const response = await openai.responses.create({
        model: "spark",
        input: PROMPT,
        temperature: 0,
        max_output_tokens: requested,
        // @ts-expect-error: prediction on Responses is Spark's extension
        prediction: { type: "content", content: prediction },
      });
      assert.equal(response.output_text, plain, `${name}: the Responses output is unchanged`);
      const usage = response.usage as unknown as {
        output_tokens: number;
        output_tokens_details: { accepted_prediction_tokens: number; rejected_prediction_tokens: number };
        speculation: Counts;
      };
      assert.equal(usage.output_tokens, outputTokens);
      assert.equal(usage.output_tokens_details.accepted_prediction_tokens, expected.accepted, name);
      assert.equal(usage.output_tokens_details.rejected_prediction_tokens, expected.rejected, name);
      // Only the prediction drafts here (no input lookup, no draft model): the totals are its own.
      assert.deepEqual(usage.speculation, expected, `${name}: Responses speculation`);
      t.diagnostic(
        `${name}: ${predicted.length} prediction tokens, ${outputTokens} output tokens, first ` +
          `divergence at output token ${divergence}; expected ${JSON.stringify(expected)}, chat ` +
          `${JSON.stringify(measuredChat)}, responses ${JSON.stringify(usage.speculation)}`,
      );
    }
  });
});
