/**
 * The llama engine's speed parts, each against what it replaces, with the real node-llama-cpp and
 * the tiny GGUF model: decoding one token ahead gives the same tokens, KV state and LlamaChat output
 * as decoding on demand (also when a grammar comes into force mid-generation, as when a function
 * call starts); the caching tokenizer gives node-llama-cpp's tokens; the part queue merges a backlog.
 */
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import {
  getLlama,
  LlamaChat,
  LlamaGrammarEvaluationState,
  LlamaLogLevel,
  LlamaText,
  SpecialToken,
  SpecialTokensText,
  type ChatHistoryItem,
  type ChatModelFunctions,
  type Llama,
  type LlamaContext,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
  type Token,
} from "node-llama-cpp";
import type { EnginePart } from "../src/engine/types.js";
import { AsyncQueue } from "../src/engines/llama/async-queue.js";
import { AheadSequence } from "../src/engines/llama/decode-ahead.js";
import { cachingTokenizer } from "../src/engines/llama/token-cache.js";
import { MODEL_SKIP_MESSAGE, testModelPath } from "./helpers/model.js";

const modelPath = testModelPath();

test("the part queue merges deltas that wait together, and nothing else", async () => {
  const queue = new AsyncQueue<EnginePart>((a, b) =>
    a.type === "text-delta" && b.type === "text-delta" && a.id === b.id
      ? { ...a, delta: a.delta + b.delta }
      : undefined,
  );
  queue.push({ type: "text-start", id: "t1" });
  for (const delta of ["a", "b", "c"]) queue.push({ type: "text-delta", id: "t1", delta });
  queue.push({ type: "text-end", id: "t1" });
  const parts: EnginePart[] = [];
  const drained = (async () => {
    for await (const part of queue.drain()) parts.push(part);
  })();
  await new Promise((resolve) => setImmediate(resolve));
  queue.push({ type: "text-start", id: "t2" });
  queue.push({ type: "text-delta", id: "t2", delta: "d" });
  await new Promise((resolve) => setImmediate(resolve));
  queue.push({ type: "text-delta", id: "t2", delta: "e" });
  queue.close();
  await drained;
  assert.deepEqual(parts, [
    { type: "text-start", id: "t1" },
    { type: "text-delta", id: "t1", delta: "abc" },
    { type: "text-end", id: "t1" },
    { type: "text-start", id: "t2" },
    { type: "text-delta", id: "t2", delta: "d" },
    { type: "text-delta", id: "t2", delta: "e" },
  ]);
});

describe("llama engine internals", { skip: modelPath ? false : MODEL_SKIP_MESSAGE }, () => {
  let llama: Llama;
  let model: LlamaModel;
  let context: LlamaContext;
  let grammar: LlamaGrammar;
  /** The plain sequence (decoding on demand) and the one seen through `AheadSequence`. */
  let plain: LlamaContextSequence;
  let view: AheadSequence;
  let prompt: Token[];

  before(async () => {
    llama = await getLlama({
      gpu: false,
      build: "never",
      maxThreads: 0,
      logLevel: LlamaLogLevel.error,
      progressLogs: false,
    });
    model = await llama.loadModel({ modelPath: modelPath! });
    context = await model.createContext({ threads: 1, contextSize: 1024, sequences: 2 });
    plain = context.getSequence();
    view = new AheadSequence(context.getSequence(), cachingTokenizer(model.tokenizer));
    grammar = await llama.createGrammar({ grammar: 'root ::= "{" [a-z ]* "}"' });
    prompt = model.tokenize("Write a function in TypeScript that parses a CSV line into fields.");
  });
  after(async () => {
    await context?.dispose();
    await model?.dispose();
    await llama?.dispose();
  });

  /**
   * Takes `count` tokens from `sequence.evaluate` the way LlamaChat does; after `switchAt` tokens a
   * grammar comes into force (as when a function call starts). Returns the tokens and the KV state
   * left once the iterator is closed.
   */
  async function take(sequence: LlamaContextSequence, count: number, switchAt = Infinity) {
    await sequence.clearHistory();
    const state = new LlamaGrammarEvaluationState({ model, grammar });
    let engaged = false;
    const iterator = sequence.evaluate(prompt, {
      temperature: 0,
      grammarEvaluationState: () => (engaged ? state : undefined),
    });
    const tokens: Token[] = [];
    for (;;) {
      const result = await iterator.next();
      if (result.done) break;
      tokens.push(result.value);
      if (tokens.length === switchAt) engaged = true;
      if (tokens.length === count) break;
    }
    await iterator.return();
    return { tokens, kv: sequence.contextTokens };
  }

  test("decoding ahead yields the same tokens and leaves the same KV state", async () => {
    view.begin(1000, new AbortController().signal);
    const expected = await take(plain, 40);
    const undone = view.undone;
    assert.deepEqual(await take(view.sequence, 40), expected);
    assert.equal(view.undone, undone + 1, "the token decoded ahead at the stop was undone");
  });

  test("a grammar that comes into force while a token is in flight: that token is sampled again under it", async () => {
    view.begin(1000, new AbortController().signal);
    const expected = await take(plain, 30, 6);
    const text = model.detokenize(expected.tokens.slice(6));
    assert.match(text, /^\s*\{[a-z ]*\}?/, "the grammar constrains what follows");
    const undone = view.undone;
    assert.deepEqual(await take(view.sequence, 30, 6), expected);
    assert.equal(view.undone, undone + 1, "the token in flight at the switch was undone, none after");
  });

  test("with a budget of N tokens nothing is decoded past the N-th", async () => {
    view.begin(12, new AbortController().signal);
    const undone = view.undone;
    await take(view.sequence, 12);
    assert.equal(view.undone, undone, "no decode was started ahead of the last token");
  });

  test("an abort stops decoding ahead", async () => {
    const abort = new AbortController();
    view.begin(1000, abort.signal);
    await view.target.clearHistory();
    const iterator = view.sequence.evaluate(prompt, { temperature: 0 });
    await iterator.next();
    abort.abort();
    const undone = view.undone;
    await iterator.next();
    await iterator.return();
    assert.equal(view.undone, undone, "after the abort nothing more was started");
  });

  test("changing the sequence while a token is in flight waits for it and undoes it first", async () => {
    const run = async (sequence: LlamaContextSequence) => {
      await sequence.clearHistory();
      const iterator = sequence.evaluate(prompt, { temperature: 0 });
      const tokens: Token[] = [];
      for (let i = 0; i < 8; i++) tokens.push((await iterator.next()).value as Token);
      // As LlamaChat does when it re-renders: adapt the state, then start a new iteration.
      const kept = sequence.contextTokens.slice(0, prompt.length + 3);
      await sequence.adaptStateToTokens(kept, false);
      const after = sequence.contextTokens;
      await iterator.return();
      const next = sequence.evaluate([tokens[3]!], { temperature: 0 });
      const more = [(await next.next()).value, (await next.next()).value];
      await next.return();
      return { tokens, after, more, kv: sequence.contextTokens };
    };
    view.begin(1000, new AbortController().signal);
    assert.deepEqual(await run(view.sequence), await run(plain));
  });

  test("LlamaChat through AheadSequence writes exactly what it writes on the plain sequence", async () => {
    const functions: ChatModelFunctions = {
      get_weather: {
        description: "Current weather",
        params: { type: "object", properties: { city: { type: "string" } } },
      },
    };
    const history: ChatHistoryItem[] = [
      { type: "system", text: "You are a helpful assistant." },
      { type: "user", text: "What's the weather in Paris? Then write a haiku." },
      { type: "model", response: [] },
    ];
    const onPlain = new LlamaChat({ contextSequence: plain });
    const onView = new LlamaChat({ contextSequence: view.sequence });
    for (const withFunctions of [false, true]) {
      const generate = async (chat: LlamaChat) => {
        let text = "";
        const result = await chat.generateResponse(history, {
          ...(withFunctions ? { functions } : {}),
          maxTokens: 60,
          temperature: 0,
          repeatPenalty: false,
          onTextChunk: (chunk) => (text += chunk),
        });
        return { text, stop: result.metadata.stopReason, calls: result.functionCalls ?? [] };
      };
      view.begin(60, new AbortController().signal);
      const expected = await generate(onPlain);
      assert.ok(expected.text.length > 0);
      assert.deepEqual(await generate(onView), expected, withFunctions ? "with functions" : "plain");
      assert.deepEqual(view.target.contextTokens, plain.contextTokens);
    }
    onPlain.dispose();
    onView.dispose();
  });

  test("the caching tokenizer gives node-llama-cpp's tokens, from the cache too", () => {
    const cached = cachingTokenizer(model.tokenizer, 64);
    const text = LlamaText([
      new SpecialToken("BOS"),
      "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nWhat is a closure? [/INST] ",
      new SpecialTokensText("</s>"),
      "A function with the variables around it.",
    ]);
    const expected = text.tokenize(model.tokenizer);
    assert.deepEqual(text.tokenize(cached), expected);
    assert.deepEqual(text.tokenize(cached), expected, "from the cache");
    for (const options of [undefined, "trimLeadingSpace"] as const) {
      for (const special of [false, true]) {
        const sample = " <s> leading space and a special token";
        assert.deepEqual(cached(sample, special, options), model.tokenizer(sample, special, options));
      }
    }
    // Over its bound it forgets the oldest entries and still answers right.
    for (let i = 0; i < 50; i++)
      assert.deepEqual(cached(`line ${i} of text`), model.tokenize(`line ${i} of text`));
    const hit = cached("line 49 of text");
    hit.push(0 as Token);
    assert.deepEqual(cached("line 49 of text"), model.tokenize("line 49 of text"), "callers get a copy");
  });
});
