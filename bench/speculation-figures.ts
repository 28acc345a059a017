/**
 * Figures 16, 17 and 20 (issue 13): Predicted Outputs in the llama engine, with the tiny test model.
 * The model cannot write code, so the mechanism is measured: its own greedy output for a prompt
 * (about 400 tokens) is the prediction, with k% of its lines (runs of 8 words when it writes few
 * lines) altered.
 *
 * 16. Decode speed with the prediction vs without, same request, k = 0, 10, 50 (temperature 0; the
 *     outputs are checked identical); tokens accepted per verification step.
 * 18. Input lookup on a request whose answer repeats itself (the random model's output is a short
 *     cycle, which prompt-lookup finds in its own output), vs plain.
 * 19. A draft model: the tiny model drafting for itself (every draft right: the mechanism's upper
 *     bound), speed vs plain and acceptance rate.
 * 17. An unrelated prediction (English prose; another prompt's output would share the random model's
 *     repeating pieces): speed vs plain.
 * 20. What verification costs on this model: a K-token batch (a token sampled at every position) vs
 *     K single decode steps, K = 1, 4, 8, 16. A real model's decode is bound by reading its weights,
 *     so a K-token batch costs about one step; this one's is not (one layer, 8 dimensions), which
 *     caps what speculation can give here: the figure shows by how much.
 */
import { getLlama, type Token } from "node-llama-cpp";
import type { EngineRequest, Usage } from "../src/engine/types.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { fmt, ms, type FigureResult, type Log } from "./kit/report.js";

interface SpeculationConfig {
  rounds: number;
  tokens: number;
}

function request(
  prompt: string,
  maxOutputTokens: number,
  prediction?: string,
  inputLookup = false,
): EngineRequest {
  return {
    ...(inputLookup ? { speculation: { inputLookup: true } } : {}),
    model: "spark",
    items: [{ type: "message", role: "user", text: prompt }],
    tools: [],
    toolChoice: "auto",
    parallelToolCalls: true,
    temperature: 0,
    maxOutputTokens,
    ...(prediction !== undefined ? { prediction } : {}),
  };
}

interface Run {
  text: string;
  usage: Usage;
  /** Output tokens per second, first token to the end (prompt evaluation excluded). */
  rate: number;
}

async function run(engine: LlamaEngine, req: EngineRequest): Promise<Run> {
  let text = "";
  let usage: Usage | undefined;
  let first = 0;
  for await (const part of engine.stream(req, new AbortController().signal)) {
    if (part.type === "text-delta") {
      if (first === 0) first = performance.now();
      text += part.delta;
    } else if (part.type === "finish") usage = part.usage;
  }
  const seconds = (performance.now() - first) / 1000;
  return { text, usage: usage!, rate: (usage!.outputTokens - 1) / seconds };
}

/** Alters k% of the text's lines (or of its 8-word runs when it has fewer than 20 lines). */
export function alter(text: string, percent: number): string {
  const lines = text.split("\n");
  const units =
    lines.length >= 20 ? lines : (text.match(/(?:\S+\s*){1,8}/g) ?? [text]).map((unit) => unit.trimEnd());
  const every = percent > 0 ? Math.max(1, Math.round(100 / percent)) : Infinity;
  const changed = units.map((unit, i) =>
    i % every === Math.floor(every / 2) ? `${unit} // changed ${i}` : unit,
  );
  return changed.join(lines.length >= 20 ? "\n" : " ");
}

const median = (values: number[]): number =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

export async function speculationFigures(
  modelPath: string,
  config: SpeculationConfig,
  log: Log,
): Promise<FigureResult[]> {
  const engine = new LlamaEngine({ modelPath: async () => modelPath, gpu: false, sequences: 1 });
  await engine.start();
  try {
    const prompt = "Write a sorting function in C.";
    const plain = await run(engine, request(prompt, config.tokens));
    // Not another prompt's output: the random model's outputs share their repeating pieces.
    const unrelated = Array.from(
      { length: 40 },
      (_, i) => `Line ${i}: the quick brown fox jumps over the lazy dog while the ${i}th bell rings.`,
    ).join("\n");
    log(
      `  prompt: ${JSON.stringify(prompt)}, ${plain.usage.outputTokens} output tokens, ${engine.threads} thread(s)`,
    );
    const variants: [string, string | undefined, boolean?][] = [
      ["plain", undefined],
      ["lookup", undefined, true],
      ["k = 0", plain.text],
      ["k = 10", alter(plain.text, 10)],
      ["k = 50", alter(plain.text, 50)],
      ["unrelated", unrelated],
    ];
    const rates = new Map<string, number[]>(variants.map(([name]) => [name, []]));
    const usages = new Map<string, Usage>();
    for (let round = 0; round < config.rounds; round++) {
      for (const [name, prediction, lookup] of round % 2 === 0 ? variants : [...variants].reverse()) {
        const result = await run(engine, request(prompt, config.tokens, prediction, lookup));
        if (result.text !== plain.text) throw new Error(`${name}: the output changed with a prediction`);
        rates.get(name)!.push(result.rate);
        usages.set(name, result.usage);
      }
    }
    const base = median(rates.get("plain")!);
    const rows: string[] = [];
    const ratio = (name: string): number => median(rates.get(name)!) / base;
    const perStep = (name: string): string => {
      const s = usages.get(name)?.speculation;
      return s
        ? `${fmt(s.accepted / s.steps, 1)} accepted/step (${s.accepted} of ${s.drafted} drafted, ${s.steps} steps)`
        : "no drafts";
    };
    for (const [name] of variants) {
      rows.push(
        `  ${name.padEnd(10)} ${fmt(median(rates.get(name)!))} tok/s  ${fmt(ratio(name), 2)}×  ${name === "plain" ? "" : perStep(name)}`,
      );
    }
    for (const row of rows) log(row);

    // 19. The tiny model drafting for itself (the upper bound of the mechanism: every draft right).
    const drafting = new LlamaEngine({
      modelPath: async () => modelPath,
      draftModelPath: modelPath,
      gpu: false,
      sequences: 1,
      threads: engine.threads,
    });
    await drafting.start();
    const draftRates: number[] = [];
    let draftUsage: Usage | undefined;
    try {
      for (let round = 0; round < config.rounds; round++) {
        const result = await run(drafting, request(prompt, config.tokens));
        if (result.text !== plain.text) throw new Error("draft model: the output changed");
        draftRates.push(result.rate);
        draftUsage = result.usage;
      }
    } finally {
      await drafting.close();
    }
    const draftRatio = median(draftRates) / base;
    const draftCounts = draftUsage?.speculation;
    const acceptance = draftCounts ? draftCounts.accepted / Math.max(1, draftCounts.drafted) : 0;
    log(
      `  draft model (itself): ${fmt(median(draftRates))} tok/s  ${fmt(draftRatio, 2)}×  acceptance ${fmt(acceptance * 100, 1)}%, ` +
        `${draftCounts ? fmt(draftCounts.accepted / draftCounts.steps, 1) : "0"} accepted/step`,
    );

    // 20. A K-token verification batch vs K single steps, on a context of its own.
    const llama = await getLlama({ gpu: false, build: "never" });
    const model = await llama.loadModel({ modelPath });
    const context = await model.createContext({ contextSize: 1024, threads: engine.threads });
    const sequence = context.getSequence();
    const promptTokens = model.tokenize("Write a sorting function in C.");
    for await (const _token of sequence.evaluate(promptTokens, { temperature: 0 })) break;
    const kept = sequence.nextTokenIndex;
    const draft =
      plain.usage.outputTokens > 16
        ? (model.tokenize(plain.text, false, "trimLeadingSpace").slice(0, 16) as Token[])
        : [];
    const sampling = { generateNext: { token: true, options: { temperature: 0 } } };
    const batchCosts: string[] = [];
    const batch: Record<number, { batchMs: number; singleMs: number }> = {};
    for (const k of [1, 4, 8, 16]) {
      const batchTimes: number[] = [];
      const singleTimes: number[] = [];
      for (let round = 0; round < 20; round++) {
        await sequence.eraseContextTokenRanges([{ start: kept, end: sequence.nextTokenIndex }]);
        let started = performance.now();
        await sequence.controlledEvaluate(draft.slice(0, k).map((token) => [token, sampling]));
        batchTimes.push(performance.now() - started);
        await sequence.eraseContextTokenRanges([{ start: kept, end: sequence.nextTokenIndex }]);
        started = performance.now();
        for (const token of draft.slice(0, k)) await sequence.controlledEvaluate([[token, sampling]]);
        singleTimes.push(performance.now() - started);
      }
      batch[k] = { batchMs: median(batchTimes), singleMs: median(singleTimes) };
      batchCosts.push(
        `K=${k}: batch ${ms(batch[k]!.batchMs)} vs ${k} steps ${ms(batch[k]!.singleMs)} (${fmt(batch[k]!.batchMs / (batch[k]!.singleMs / k), 1)} steps' worth)`,
      );
    }
    await context.dispose();
    await model.dispose();
    log(`  verification batch cost: ${batchCosts.join("; ")}`);
    // What the mechanism gives when a batch costs what one step costs: tokens per step.
    const k0 = usages.get("k = 0")?.speculation;
    const ideal = k0 ? plain.usage.outputTokens / k0.steps : 1;
    log(
      `  with a batch costing one step (a weight-bound model), k = 0 would decode ${fmt(ideal, 1)}× as fast (output tokens per verification step)`,
    );

    const figure = (name: string, label: string, goal: string, target: number): FigureResult => ({
      row: {
        figure: label,
        spark: `${fmt(median(rates.get(name)!))} tok/s`,
        reference: `plain ${fmt(base)} tok/s`,
        comparison: `${fmt(ratio(name), 2)}×; ${perStep(name)}`,
        goal,
        met: ratio(name) >= target,
      },
      data: { rates: rates.get(name), plain: rates.get("plain"), usage: usages.get(name) },
    });
    return [
      figure("lookup", "18. Input lookup (the answer repeats itself)", "≥ 2×", 2),
      {
        row: {
          figure: "19. Draft model (tiny model for itself)",
          spark: `${fmt(median(draftRates))} tok/s`,
          reference: `plain ${fmt(base)} tok/s`,
          comparison: `${fmt(draftRatio, 2)}×; acceptance ${fmt(acceptance * 100, 1)}%`,
          goal: "report",
          met: undefined,
        },
        data: { rates: draftRates, usage: draftUsage },
      },
      figure("k = 0", "16a. Predicted Outputs, k = 0", "≥ 5×", 5),
      figure("k = 10", "16b. Predicted Outputs, k = 10", "≥ 3×", 3),
      figure("k = 50", "16c. Predicted Outputs, k = 50", "report", 0),
      figure("unrelated", "17. Unrelated prediction", "≥ 0.95× plain", 0.95),
      {
        row: {
          figure: "20. Verification batch cost",
          spark: `K=16 batch ${ms(batch[16]!.batchMs)}`,
          reference: `16 steps ${ms(batch[16]!.singleMs)}`,
          comparison: `${fmt(batch[16]!.batchMs / (batch[16]!.singleMs / 16), 1)} steps' worth; ideal k = 0: ${fmt(ideal, 1)}×`,
          goal: "report",
          met: undefined,
        },
        data: { batch, idealSpeedupK0: ideal },
      },
    ];
  } finally {
    await engine.close();
  }
}
