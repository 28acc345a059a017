/**
 * Figure 31: what constraining the output with a JSON-schema grammar costs the llama engine's
 * decode. The same request (same prompt, same token budget, temperature 0) is decoded with a
 * `json_schema` response format and without, alternating, on the engine in process; each round
 * yields decode tok/s (first text to the end) and process CPU time per output token. The schema
 * keeps the answer long (an object holding a list of unbounded strings), so the grammar is in force
 * for the whole budget; `ignoreEos` keeps the plain answer as long.
 *
 * Beside it, the same comparison on a bare node-llama-cpp loop (`sequence.evaluate` with and without
 * a `LlamaGrammarEvaluationState` of the same grammar): what llama.cpp's grammar sampling itself
 * costs, which no server can win back. The random test model makes it dear: its tokens are often
 * ones the grammar forbids (control bytes inside a string), and each such token costs a pass of the
 * grammar over the whole vocabulary.
 */
import { performance } from "node:perf_hooks";
import {
  getLlama,
  LlamaGrammarEvaluationState,
  LlamaLogLevel,
  type LlamaContextSequence,
  type LlamaGrammar,
  type LlamaModel,
} from "node-llama-cpp";
import type { EngineRequest } from "../src/engine/types.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { processCpuMicros } from "./kit/cpu-time.js";
import { fmt, summarize, type FigureResult, type Log } from "./kit/report.js";

export interface GrammarFigureOptions {
  rounds: number;
  tokens: number;
}

const SCHEMA = {
  type: "object",
  properties: {
    title: { type: "string", maxLength: 40 },
    lines: { type: "array", items: { type: "string" } },
  },
  required: ["title", "lines"],
  additionalProperties: false,
};

interface Round {
  tokensPerSecond: number;
  cpuMicrosPerToken: number;
  tokens: number;
}

async function decodeOnce(engine: LlamaEngine, request: EngineRequest): Promise<Round> {
  let first = 0;
  let last = 0;
  let cpuAtFirst = 0;
  let tokens = 0;
  for await (const part of engine.stream(request, new AbortController().signal)) {
    if (part.type === "text-delta") {
      last = performance.now();
      if (first === 0) {
        first = last;
        cpuAtFirst = processCpuMicros();
      }
    } else if (part.type === "finish") tokens = part.usage.outputTokens;
  }
  const cpu = processCpuMicros() - cpuAtFirst;
  const seconds = (last - first) / 1000;
  // The first token's decode happened before the clock started.
  return {
    tokensPerSecond: (tokens - 1) / seconds,
    cpuMicrosPerToken: cpu / Math.max(1, tokens - 1),
    tokens,
  };
}

/** The bare loop: `tokens` tokens (ignoring end-of-generation) with or without the grammar. */
async function bareOnce(
  model: LlamaModel,
  sequence: LlamaContextSequence,
  grammar: LlamaGrammar | undefined,
  tokens: number,
): Promise<Round> {
  await sequence.clearHistory();
  const prompt = model.tokenize("List the steps to make tea, as JSON.");
  const state = grammar ? new LlamaGrammarEvaluationState({ model, grammar }) : undefined;
  let count = 0;
  let first = 0;
  let cpuAtFirst = 0;
  for await (const _token of sequence.evaluate(prompt, {
    temperature: 0,
    yieldEogToken: true,
    ...(state ? { grammarEvaluationState: state } : {}),
  })) {
    if (count === 0) {
      first = performance.now();
      cpuAtFirst = processCpuMicros();
    }
    if (++count >= tokens) break;
  }
  const seconds = (performance.now() - first) / 1000;
  return {
    tokensPerSecond: (count - 1) / seconds,
    cpuMicrosPerToken: (processCpuMicros() - cpuAtFirst) / Math.max(1, count - 1),
    tokens: count,
  };
}

export async function grammarDecodeFigure(
  modelPath: string,
  options: GrammarFigureOptions,
  log: Log,
): Promise<FigureResult> {
  const engine = new LlamaEngine({ modelPath: async () => modelPath, gpu: false, threads: 1, sequences: 2 });
  await engine.start();
  try {
    const base: EngineRequest = {
      model: "spark",
      items: [{ type: "message", role: "user", text: "List the steps to make tea, as JSON." }],
      tools: [],
      toolChoice: "auto",
      parallelToolCalls: true,
      maxOutputTokens: options.tokens,
      temperature: 0,
      ignoreEos: true,
    };
    const constrained: EngineRequest = {
      ...base,
      responseFormat: {
        type: "json_schema",
        name: "steps",
        schema: SCHEMA,
        strict: true,
        param: "text.format",
      },
    };
    // Warm-up: the grammar is built once and cached; both paths touch their code once.
    await decodeOnce(engine, { ...base });
    await decodeOnce(engine, { ...constrained });
    const plain: Round[] = [];
    const grammar: Round[] = [];
    for (let round = 0; round < options.rounds; round++) {
      // Fresh request objects each round (the engine keeps per-request state), alternating order.
      const pair = round % 2 === 0 ? [false, true] : [true, false];
      for (const withGrammar of pair) {
        const result = await decodeOnce(engine, withGrammar ? { ...constrained } : { ...base });
        (withGrammar ? grammar : plain).push(result);
      }
    }
    // The bare loop, same prompt, same budget, same grammar (built from the same schema).
    const llama = await getLlama({
      gpu: false,
      build: "never",
      logLevel: LlamaLogLevel.error,
      progressLogs: false,
    });
    const bareModel = await llama.loadModel({ modelPath });
    const context = await bareModel.createContext({ contextSize: 1024, threads: 1 });
    const bareGrammar: LlamaGrammar = await llama.createGrammarForJsonSchema(SCHEMA as never);
    const barePlain: Round[] = [];
    const bareGrammarRounds: Round[] = [];
    try {
      const sequence = context.getSequence();
      await bareOnce(bareModel, sequence, bareGrammar, options.tokens);
      for (let round = 0; round < options.rounds; round++) {
        barePlain.push(await bareOnce(bareModel, sequence, undefined, options.tokens));
        bareGrammarRounds.push(await bareOnce(bareModel, sequence, bareGrammar, options.tokens));
      }
    } finally {
      await context.dispose();
      await bareModel.dispose();
    }
    const bareRatio =
      summarize(bareGrammarRounds.map((r) => r.tokensPerSecond)).p50 /
      summarize(barePlain.map((r) => r.tokensPerSecond)).p50;
    const bareCpuRatio =
      summarize(barePlain.map((r) => r.cpuMicrosPerToken)).p50 /
      summarize(bareGrammarRounds.map((r) => r.cpuMicrosPerToken)).p50;
    const plainRate = summarize(plain.map((r) => r.tokensPerSecond));
    const grammarRate = summarize(grammar.map((r) => r.tokensPerSecond));
    const plainCpu = summarize(plain.map((r) => r.cpuMicrosPerToken));
    const grammarCpu = summarize(grammar.map((r) => r.cpuMicrosPerToken));
    const ratio = grammarRate.p50 / plainRate.p50;
    const cpuRatio = plainCpu.p50 / grammarCpu.p50;
    log(
      `  without grammar: ${fmt(plainRate.p50)} tok/s p50 (${fmt(plainRate.min)}–${fmt(plainRate.max)}), ` +
        `${fmt(plainCpu.p50)} µs CPU/token, ${plain[0]?.tokens ?? 0} tokens`,
    );
    log(
      `  json_schema grammar: ${fmt(grammarRate.p50)} tok/s p50 (${fmt(grammarRate.min)}–${fmt(grammarRate.max)}), ` +
        `${fmt(grammarCpu.p50)} µs CPU/token, ${grammar[0]?.tokens ?? 0} tokens`,
    );
    log(`  ratio: ${fmt(ratio, 2)}× by wall time, ${fmt(cpuRatio, 2)}× by CPU time per token`);
    log(
      `  bare node-llama-cpp loop, same grammar: ${fmt(bareRatio, 2)}× by wall time, ${fmt(bareCpuRatio, 2)}× by CPU time ` +
        `(${fmt(summarize(barePlain.map((r) => r.cpuMicrosPerToken)).p50)} → ${fmt(summarize(bareGrammarRounds.map((r) => r.cpuMicrosPerToken)).p50)} µs CPU/token)`,
    );
    return {
      row: {
        figure: "31. JSON-schema grammar decode",
        spark: `${fmt(grammarRate.p50)} tok/s (${fmt(grammarCpu.p50)} µs CPU/tok)`,
        reference: `${fmt(plainRate.p50)} tok/s without (${fmt(plainCpu.p50)} µs CPU/tok)`,
        comparison: `${fmt(ratio, 2)}× wall, ${fmt(cpuRatio, 2)}× CPU (bare llama.cpp ${fmt(bareCpuRatio, 2)}× CPU)`,
        goal: "≥ 0.8×",
        met: ratio >= 0.8,
      },
      data: {
        plain,
        grammar,
        ratio,
        cpuRatio,
        barePlain,
        bareGrammar: bareGrammarRounds,
        bareRatio,
        bareCpuRatio,
      },
    };
  } finally {
    await engine.close();
  }
}
