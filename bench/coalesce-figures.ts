/**
 * Figure 33: coalesced writes (issue 32, item 1). Token deltas arriving under 1 ms apart are held
 * and written together (with the first delta arriving 0.5 ms after the oldest held, at most 8, at
 * most 1 ms); the first token and a paced engine's go out at once. What that costs a client, and
 * what it saves the server:
 *
 * 33a. The delay added per token. An engine in the bench emits text deltas at a fixed rate (a
 *      second's worth, 1,000 at most), each carrying the moment it was produced (epoch
 *      milliseconds, to the microsecond); the client, on its own thread, records when each delta's
 *      chunk was read. Delay = read − produced, per token, p50 and p99, through a server that
 *      coalesces and one that writes every event at the end of its tick (`coalesce: { windowMs: 0,
 *      … }`), rounds alternating. Added = coalesced − not, at each percentile. Also the gap between
 *      consecutive deltas as the client reads them, and the server's socket writes per token. Goal:
 *      under 2 ms added at p99, at every rate.
 * 33b. The tiny model through the server (when the test model is there): the client's inter-token
 *      gaps, writes per token and the server thread's CPU per token, coalesced vs not.
 */
import { ServerResponse } from "node:http";
import type { Engine, EnginePart, EngineRequest } from "../src/engine/types.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { SparkServer, type SparkServerOptions } from "../src/server/http-server.js";
import { threadCpuMicros } from "./kit/cpu-time.js";
import { fmt, percentile, type FigureResult, type Log } from "./kit/report.js";
import type { StreamResult } from "./kit/sse-client.js";
import { ThreadedSseClient } from "./kit/threaded-client.js";

const GOAL_ADDED_P99_MS = 2;
const UNCOALESCED: NonNullable<SparkServerOptions["coalesce"]> = { windowMs: 0, holdMs: 0, maxHeld: 1 };

/** Socket writes of SSE bodies in this process: counted around a round. */
let sseWrites = 0;
const write = ServerResponse.prototype.write;
function countWrites(): () => void {
  ServerResponse.prototype.write = function (this: ServerResponse, ...args: unknown[]) {
    sseWrites++;
    return (write as (...a: unknown[]) => boolean).apply(this, args);
  } as typeof write;
  return () => {
    ServerResponse.prototype.write = write;
  };
}

/**
 * Emits `tokens` text deltas at `rate` per second, each the epoch time it was produced. Between
 * tokens it yields to the event loop (`setImmediate`) until the next is due: timers cannot pace
 * below a millisecond, and the server's own work must run in between, as it does between decodes.
 */
class PacedEngine implements Engine {
  readonly specificationVersion = "v1";
  readonly kind = "paced";
  readonly capabilities = { functionTools: false, customTools: false, prefixReuse: false, summaries: false };
  constructor(
    private readonly rate: () => number,
    /** Tokens per response: a second's worth, at most `max`. */
    private readonly max: number,
  ) {}
  start = async (): Promise<void> => {};
  status = () => ({ ready: true, detail: "ready" });
  models = () => [{ id: "spark", ownedBy: "bench" }];
  resolveModel = (name: string): string => name;
  countTokens = async (text: string): Promise<number> => text.length;
  close = async (): Promise<void> => {};

  async *stream(_request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    const id = "text_1";
    const rate = this.rate();
    const interval = 1000 / rate;
    const tokens = Math.min(this.max, rate);
    yield { type: "text-start", id };
    const start = performance.now();
    for (let i = 0; i < tokens && !signal.aborted; i++) {
      const due = start + i * interval;
      while (performance.now() < due) await new Promise((resolve) => setImmediate(resolve));
      yield { type: "text-delta", id, delta: `${(performance.timeOrigin + performance.now()).toFixed(3)} ` };
    }
    yield { type: "text-end", id };
    yield {
      type: "finish",
      reason: "stop",
      usage: { inputTokens: 1, cachedInputTokens: 0, outputTokens: tokens },
    };
  }
}

interface Trace {
  /** Per token: read − produced, ms. */
  delays: number[];
  /** Between consecutive deltas as read, ms. */
  gaps: number[];
  writesPerToken: number;
}

function traceOf(result: StreamResult, writes: number): Trace {
  const trace = result.trace ?? [];
  const delays = trace.map((t) => t.at - Number.parseFloat(t.delta));
  const gaps = trace.slice(1).map((t, i) => t.at - trace[i]!.at);
  return { delays, gaps, writesPerToken: writes / Math.max(1, trace.length) };
}

interface RateRow {
  rate: number;
  coalesced: { delayP50: number; delayP99: number; gapP50: number; gapP99: number; writesPerToken: number };
  uncoalesced: { delayP50: number; delayP99: number; gapP50: number; gapP99: number; writesPerToken: number };
  addedP50: number;
  addedP99: number;
}

function summary(traces: Trace[]): RateRow["coalesced"] {
  const delays = traces.flatMap((t) => t.delays);
  const gaps = traces.flatMap((t) => t.gaps);
  return {
    delayP50: percentile(delays, 0.5),
    delayP99: percentile(delays, 0.99),
    gapP50: percentile(gaps, 0.5),
    gapP99: percentile(gaps, 0.99),
    writesPerToken: traces.reduce((sum, t) => sum + t.writesPerToken, 0) / traces.length,
  };
}

export async function coalesceFigures(
  options: {
    rates: number[];
    tokens: number;
    rounds: number;
    modelPath: string | undefined;
    llamaTokens: number;
  },
  log: Log,
): Promise<FigureResult> {
  let rate = options.rates[0]!;
  const engine = new PacedEngine(() => rate, options.tokens);
  const on = new SparkServer({ engine, port: 0 });
  const off = new SparkServer({ engine, port: 0, coalesce: UNCOALESCED });
  const clients = {
    on: new ThreadedSseClient(await on.listen()),
    off: new ThreadedSseClient(await off.listen()),
  };
  const restore = countWrites();
  const rows: RateRow[] = [];
  try {
    for (const r of options.rates) {
      rate = r;
      const traces = { on: [] as Trace[], off: [] as Trace[] };
      for (let round = -1; round < options.rounds; round++) {
        for (const kind of round % 2 === 0 ? (["on", "off"] as const) : (["off", "on"] as const)) {
          sseWrites = 0;
          const result = await clients[kind].stream({ input: "go", store: false }, "/v1/responses", {
            trace: true,
          });
          if (round >= 0) traces[kind].push(traceOf(result, sseWrites));
        }
      }
      const coalesced = summary(traces.on);
      const uncoalesced = summary(traces.off);
      const row = {
        rate: r,
        coalesced,
        uncoalesced,
        addedP50: coalesced.delayP50 - uncoalesced.delayP50,
        addedP99: coalesced.delayP99 - uncoalesced.delayP99,
      };
      rows.push(row);
      log(
        `  ${fmt(r)} tok/s: delay per token p50/p99 coalesced ${fmt(coalesced.delayP50, 3)} / ${fmt(coalesced.delayP99, 3)} ms, ` +
          `not ${fmt(uncoalesced.delayP50, 3)} / ${fmt(uncoalesced.delayP99, 3)} ms (added ${fmt(row.addedP50, 3)} / ${fmt(row.addedP99, 3)} ms); ` +
          `gap at the client p50/p99 ${fmt(coalesced.gapP50, 3)} / ${fmt(coalesced.gapP99, 3)} vs ${fmt(uncoalesced.gapP50, 3)} / ${fmt(uncoalesced.gapP99, 3)} ms; ` +
          `writes per token ${fmt(coalesced.writesPerToken, 2)} vs ${fmt(uncoalesced.writesPerToken, 2)}`,
      );
    }
  } finally {
    restore();
    await Promise.all([clients.on.close(), clients.off.close()]);
    await Promise.all([on.close(), off.close()]);
  }
  const llama = options.modelPath ? await llamaCoalescing(options.modelPath, options, log) : undefined;
  const worst = Math.max(...rows.map((row) => row.addedP99));
  const at1000 = rows.find((row) => row.rate === 1000) ?? rows[0]!;
  return {
    row: {
      figure: "33. Coalesced writes: delay added per token",
      spark: `+${fmt(at1000.addedP50, 3)} ms p50, +${fmt(at1000.addedP99, 3)} ms p99 at ${fmt(at1000.rate)} tok/s`,
      reference: `writes/token ${fmt(at1000.coalesced.writesPerToken, 2)} vs ${fmt(at1000.uncoalesced.writesPerToken, 2)}`,
      comparison: `worst p99 added ${fmt(worst, 3)} ms (${options.rates.map(fmt).join(", ")} tok/s)`,
      goal: `< ${GOAL_ADDED_P99_MS} ms added (p99)`,
      met: worst < GOAL_ADDED_P99_MS,
    },
    data: { rows, tokens: options.tokens, rounds: options.rounds, ...(llama ? { llama } : {}) },
  };
}

/** 33b: the tiny model through a coalescing server and a non-coalescing one (same engine). */
async function llamaCoalescing(
  modelPath: string,
  options: { rounds: number; llamaTokens: number },
  log: Log,
): Promise<Record<string, unknown>> {
  const engine = new LlamaEngine({ modelPath: async () => modelPath, gpu: false, threads: 1, log: () => {} });
  await engine.start();
  const on = new SparkServer({ engine, port: 0 });
  const off = new SparkServer({ engine, port: 0, coalesce: UNCOALESCED });
  const clients = {
    on: new ThreadedSseClient(await on.listen()),
    off: new ThreadedSseClient(await off.listen()),
  };
  const restore = countWrites();
  const stats = {
    on: { gaps: [] as number[], writes: [] as number[], cpu: [] as number[], rate: [] as number[] },
    off: { gaps: [] as number[], writes: [] as number[], cpu: [] as number[], rate: [] as number[] },
  };
  try {
    for (let round = -1; round < options.rounds; round++) {
      for (const kind of round % 2 === 0 ? (["on", "off"] as const) : (["off", "on"] as const)) {
        sseWrites = 0;
        const cpu = threadCpuMicros();
        const result = await clients[kind].stream(
          {
            input: "Write a function.",
            max_output_tokens: options.llamaTokens,
            temperature: 0,
            ignore_eos: true,
            store: false,
          },
          "/v1/responses",
          { trace: true },
        );
        const spent = threadCpuMicros() - cpu;
        if (round < 0) continue;
        const trace = result.trace ?? [];
        const tokens = result.terminal?.response.usage?.output_tokens ?? trace.length;
        stats[kind].gaps.push(...trace.slice(1).map((t, i) => t.at - trace[i]!.at));
        stats[kind].writes.push(sseWrites / tokens);
        stats[kind].cpu.push(spent / tokens);
        stats[kind].rate.push((tokens - 1) / ((result.terminalAt! - result.firstDeltaAt!) / 1000));
      }
    }
  } finally {
    restore();
    await Promise.all([clients.on.close(), clients.off.close()]);
    await off.close().catch(() => {});
    await on.close();
  }
  const p = (values: number[], q: number): number => percentile(values, q);
  const line = (kind: "on" | "off"): string =>
    `gap p50/p99 ${fmt(p(stats[kind].gaps, 0.5), 3)} / ${fmt(p(stats[kind].gaps, 0.99), 3)} ms, ` +
    `${fmt(p(stats[kind].writes, 0.5), 2)} writes/token, server thread ${fmt(p(stats[kind].cpu, 0.5))} µs CPU/token, ${fmt(p(stats[kind].rate, 0.5))} tok/s`;
  log(`  tiny model, ${options.llamaTokens} tokens: coalesced ${line("on")}; not ${line("off")}`);
  return {
    coalesced: {
      gapP50: p(stats.on.gaps, 0.5),
      gapP99: p(stats.on.gaps, 0.99),
      writesPerToken: p(stats.on.writes, 0.5),
      cpuMicrosPerToken: p(stats.on.cpu, 0.5),
      rate: p(stats.on.rate, 0.5),
    },
    uncoalesced: {
      gapP50: p(stats.off.gaps, 0.5),
      gapP99: p(stats.off.gaps, 0.99),
      writesPerToken: p(stats.off.writes, 0.5),
      cpuMicrosPerToken: p(stats.off.cpu, 0.5),
      rate: p(stats.off.rate, 0.5),
    },
  };
}
