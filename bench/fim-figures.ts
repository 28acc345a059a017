/**
 * Figures 14 and 15 (issue 12): fill in the middle with the real llama engine, on a copy of the tiny
 * test model given FIM token ids (the model itself has none; see test/helpers/gguf-metadata.ts).
 * Both go through a Spark server on 127.0.0.1:0 over HTTP, streamed, as an editor calls it.
 *
 * 14. A ~2,000-token file with the cursor near its end: time to first token after typing one more
 *     character (the previous keystroke's prompt is cached in a sequence, so only what changed is
 *     evaluated), vs the same request cold (a file the engine has not seen: every token evaluated).
 * 15. Typing 10 characters 30 ms apart, each keystroke aborting the previous request as an editor
 *     does: generations started vs run to completion, and tokens decoded after an abort. Each asks
 *     for up to 256 tokens, longer than the 30 ms between keys even at the tiny model's speed.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { request } from "undici";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { fimTestModelPath } from "../test/helpers/model.js";
import { fmt, ms, summarize, type FigureResult, type Log } from "./kit/report.js";

interface FimConfig {
  rounds: number;
}

/** A source file of about `tokens` tokens (with the tiny model's Llama tokenizer). */
function sourceFile(seed: string, lines: number): string {
  return Array.from(
    { length: lines },
    (_, i) => `export function ${seed}${i}(value: number): number { return value * ${i} + ${i % 7}; }`,
  ).join("\n");
}

interface Streamed {
  ttftMs: number;
  cached: number;
  prompt: number;
}

/** Streams one completion; TTFT is from sending to the first text delta. */
async function complete(
  url: string,
  prompt: string,
  suffix: string,
  maxTokens: number,
  signal?: AbortSignal,
): Promise<Streamed> {
  const started = performance.now();
  const response = await request(`${url}/v1/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "spark",
      prompt,
      suffix,
      max_tokens: maxTokens,
      temperature: 0,
      stream: true,
      stream_options: { include_usage: true },
    }),
    ...(signal ? { signal } : {}),
  });
  let ttftMs = Number.NaN;
  let buffer = "";
  let cached = 0;
  let promptTokens = 0;
  for await (const chunk of response.body) {
    buffer += chunk.toString();
    let end: number;
    while ((end = buffer.indexOf("\n\n")) !== -1) {
      const line = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
      const data = JSON.parse(line.slice(6)) as {
        choices: { text: string }[];
        usage?: { prompt_tokens: number; prompt_tokens_details: { cached_tokens: number } };
      };
      if (Number.isNaN(ttftMs) && data.choices.some((c) => c.text !== ""))
        ttftMs = performance.now() - started;
      if (data.usage) {
        cached = data.usage.prompt_tokens_details.cached_tokens;
        promptTokens = data.usage.prompt_tokens;
      }
    }
  }
  return { ttftMs, cached, prompt: promptTokens };
}

export async function fimFigures(config: FimConfig, log: Log): Promise<FigureResult[]> {
  const directory = mkdtempSync(join(tmpdir(), "spark-bench-fim-"));
  const cancels: number[] = [];
  try {
    const path = await fimTestModelPath(directory);
    if (!path) throw new Error("the test model was not found (set SPARK_TEST_MODEL)");
    const engine = new LlamaEngine({
      modelPath: async () => path,
      gpu: false,
      sequences: 2,
      onCancel: ({ tokensAfterAbort }) => cancels.push(tokensAfterAbort),
      log: (line) => log(`  ${line}`),
    });
    await engine.start();
    const server = new SparkServer({ engine, port: 0 });
    const url = await server.listen();
    try {
      // 14. Warm vs cold, interleaved.
      const suffix = "\n  return total;\n}\n";
      const warm: number[] = [];
      const cold: number[] = [];
      let promptTokens = 0;
      let cachedTokens = 0;
      for (let round = 0; round < config.rounds + 1; round++) {
        const file = sourceFile(`cold${round}_`, 70);
        const before = `${file}\nfunction sum(xs: number[]) {\n  let total = 0;\n  for (const x of xs) total +`;
        const first = await complete(url, before, suffix, 16);
        const next = await complete(url, `${before} `, suffix, 16);
        if (round === 0) continue; // warm-up
        cold.push(first.ttftMs);
        warm.push(next.ttftMs);
        promptTokens = next.prompt;
        cachedTokens = next.cached;
      }
      const c = summarize(cold);
      const w = summarize(warm);
      const ratio = c.p50 / w.p50;
      log(`  prompt ${fmt(promptTokens)} tokens, ${fmt(cachedTokens)} cached after one more character`);
      log(`  cold (every token evaluated): p50 ${ms(c.p50)}, p90 ${ms(c.p90)}`);
      log(`  next keystroke (KV reuse):    p50 ${ms(w.p50)}, p90 ${ms(w.p90)}  → ${fmt(ratio, 1)}× lower`);
      const reuse: FigureResult = {
        row: {
          figure: "14. FIM TTFT after one more character",
          spark: `${ms(w.p50)} (KV reuse)`,
          reference: `${ms(c.p50)} cold, ${fmt(promptTokens)}-token prompt`,
          comparison: `${fmt(ratio, 1)}× lower`,
          goal: "≥ 10× lower",
          met: ratio >= 10,
        },
        data: { cold: c, warm: w, promptTokens, cachedTokens, ratio },
      };

      // 15. Ten keystrokes 30 ms apart, each aborting the previous request.
      const startedBefore = cancels.length;
      let base = `${sourceFile("typing", 20)}\nconst answer = `;
      let completed = 0;
      const inFlight: Promise<void>[] = [];
      let previous: AbortController | undefined;
      for (let key = 0; key < 10; key++) {
        previous?.abort();
        base += "abcdefghij"[key]!;
        const controller = new AbortController();
        previous = controller;
        inFlight.push(
          complete(url, base, "\n", 256, controller.signal).then(
            () => void completed++,
            () => undefined,
          ),
        );
        if (key < 9) await sleep(30);
      }
      await Promise.all(inFlight);
      // Wait for the engine to report the last cancellations.
      for (let i = 0; i < 50 && cancels.length - startedBefore < 10 - completed; i++) await sleep(20);
      const cancelled = cancels.slice(startedBefore);
      const after = cancelled.reduce((a, b) => a + b, 0);
      const worst = cancelled.length ? Math.max(...cancelled) : 0;
      log(
        `  10 keystrokes 30 ms apart: 10 started, ${completed} ran to completion, ${cancelled.length} cancelled; ` +
          `${after} tokens decoded after an abort (at most ${worst} per request)`,
      );
      const typing: FigureResult = {
        row: {
          figure: "15. Typing 10 chars 30 ms apart",
          spark: `${completed} of 10 completed, ${cancelled.length} cancelled`,
          reference: `${after} tokens after aborts (≤ ${worst} each)`,
          comparison: "",
          goal: "≤ 1 completes; others stop within 1 token",
          met: completed <= 1 && worst <= 1,
        },
        data: { started: 10, completed, cancelled: cancelled.length, tokensAfterAbort: after, worst },
      };
      return [reuse, typing];
    } finally {
      await server.close();
    }
  } finally {
    rmSync(directory, { recursive: true, force: true });
  }
}
