/**
 * Figure 8: what keys, routing, rate limits and queue bookkeeping cost per request.
 *
 * Two servers with the same script engine (unlimited rate) run side by side, requests interleaved:
 * - bare: no keys, an explicit `model: "spark"`, no limits;
 * - full: 100 keys, `Authorization: Bearer`, `model: "auto"` (the router runs), requests/tokens/
 *   concurrency limits on the key and an engine queue with free slots.
 * The headline is the difference of the p50 times to first token seen by a client on its own thread.
 * End to end, that difference sits inside loopback noise, so two measures take the noise out:
 * - this process's CPU time per request (the two servers and their clients' threads: the steps'
 *   cost on the server and what the client pays for the extra headers and metadata), bare vs full,
 *   request by request, so that the machine's drift cancels;
 * - the same steps timed in process (authenticate + route + admit + release), hot, with the same
 *   prompt every time (a tool loop's turns: the router remembers a task's analysis) and with a new
 *   prompt every time (the router reads each one).
 */
import { Admission } from "../src/core/admission.js";
import { generateKey, KeyRing, type KeyRecord } from "../src/core/keys.js";
import { ModelRegistry } from "../src/core/model-registry.js";
import { ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { fmt, ms, summarize, type FigureResult, type Log } from "./kit/report.js";
import { processCpuMicros } from "./kit/cpu-time.js";
import { ThreadedSseClient } from "./kit/threaded-client.js";
import { messageEngine } from "./kit/in-process.js";

/** A typical interactive request: the router reads it and picks `spark`. */
const PROMPT = "Add a null check to parseConfig in src/config.ts so an empty file gives a clear error.";
const LIMITS = { requestsPerMinute: 1_000_000_000, tokensPerMinute: 1_000_000_000, concurrent: 1000 };
/** Issue 32: keys, routing and limits add under 50 µs per request end to end. */
const GOAL_MS = 0.05;

function engine(): ScriptEngine {
  const text = "Done: parseConfig now rejects an empty file.";
  return messageEngine(text);
}

function keyRing(): { keys: KeyRing; key: string } {
  const records: KeyRecord[] = [];
  let key = "";
  for (let i = 0; i < 100; i++) {
    const generated = generateKey();
    records.push({ id: `user-${i}`, hash: generated.hash });
    if (i === 57) key = generated.key;
  }
  return { keys: new KeyRing(records, { spark: LIMITS, deep: LIMITS }), key };
}

/** A difference with its sign: `+12`, `-3` (noise below zero is shown as measured). */
function signed(value: number): string {
  return value >= 0 ? `+${fmt(value)}` : fmt(value);
}

/** Time to first token, and this process's CPU time over the whole request (µs). */
async function ttft(
  client: ThreadedSseClient,
  body: Record<string, unknown>,
): Promise<{ ttft: number; cpu: number }> {
  const cpu = processCpuMicros();
  const result = await client.stream(body);
  const spent = processCpuMicros() - cpu;
  if (result.firstDeltaAt === undefined) throw new Error("no text delta");
  return { ttft: result.firstDeltaAt - result.startedAt, cpu: spent };
}

/** The added steps alone, in process: microseconds per request; `fresh`: a new prompt each time. */
function inProcessMicros(iterations: number, fresh = false): number {
  const { keys, key } = keyRing();
  const header = `Bearer ${key}`;
  const scriptEngine = engine();
  const models = ModelRegistry.single(scriptEngine, 64);
  const admission = new Admission({ maxQueue: 256 });
  const items = [{ type: "message" as const, role: "user" as const, text: PROMPT }];
  let request = 0;
  const run = (): void => {
    const principal = keys.authenticate(header);
    const text = fresh ? `${PROMPT} (request ${request++})` : PROMPT;
    const routed = fresh ? [{ type: "message" as const, role: "user" as const, text }] : items;
    const resolved = models.resolve("auto", () => ({ items: routed, tools: [] }));
    const ticket = admission.admit(
      principal,
      resolved.entry.tier,
      resolved.entry.engine,
      resolved.entry.capacity,
    );
    ticket.release(40);
  };
  for (let i = 0; i < 2000; i++) run();
  const started = performance.now();
  for (let i = 0; i < iterations; i++) run();
  return ((performance.now() - started) / iterations) * 1000;
}

export async function tenancyOverhead(
  options: { warmup: number; iterations: number },
  log: Log,
): Promise<FigureResult> {
  const bare = new SparkServer({ engine: engine(), port: 0 });
  const { keys, key } = keyRing();
  const full = new SparkServer({ engine: engine(), port: 0, keys, capacity: 64 });
  const bareClient = new ThreadedSseClient(await bare.listen());
  const fullClient = new ThreadedSseClient(await full.listen(), { authorization: `Bearer ${key}` });
  const bareBody = { model: "spark", input: PROMPT, store: false };
  const fullBody = { model: "auto", input: PROMPT, store: false };
  const bareTimes: number[] = [];
  const fullTimes: number[] = [];
  const bareCpu: number[] = [];
  const fullCpu: number[] = [];
  try {
    for (let i = 0; i < options.warmup + options.iterations; i++) {
      // Alternate which server goes first so drift and warm caches hit both alike.
      const pair =
        i % 2 === 0
          ? [await ttft(bareClient, bareBody), await ttft(fullClient, fullBody)]
          : [await ttft(fullClient, fullBody), await ttft(bareClient, bareBody)].reverse();
      if (i < options.warmup) continue;
      bareTimes.push(pair[0]!.ttft);
      fullTimes.push(pair[1]!.ttft);
      bareCpu.push(pair[0]!.cpu);
      fullCpu.push(pair[1]!.cpu);
    }
  } finally {
    await Promise.all([bareClient.close(), fullClient.close()]);
    await Promise.all([bare.close(), full.close()]);
  }
  const bareSummary = summarize(bareTimes);
  const fullSummary = summarize(fullTimes);
  const added = fullSummary.p50 - bareSummary.p50;
  const micros = inProcessMicros(50_000);
  const freshMicros = inProcessMicros(50_000, true);
  // Request by request (each pair ran back to back), so that the machine's drift cancels.
  const cpuAdded = summarize(fullCpu.map((cpu, i) => cpu - bareCpu[i]!));
  log(`   bare server  TTFT p50 ${ms(bareSummary.p50)}  p90 ${ms(bareSummary.p90)}`);
  log(`   keys+auto+limits TTFT p50 ${ms(fullSummary.p50)}  p90 ${ms(fullSummary.p90)}`);
  log(
    `   CPU per request (servers and clients): bare p50 ${fmt(summarize(bareCpu).p50)} µs, full ${fmt(summarize(fullCpu).p50)} µs; ` +
      `added, pair by pair: p50 ${fmt(cpuAdded.p50)} µs`,
  );
  log(
    `   added at p50: ${fmt(added * 1000)} µs end to end; the steps alone in process: ${fmt(micros, 1)} µs ` +
      `(a new prompt every request: ${fmt(freshMicros, 1)} µs)`,
  );
  return {
    row: {
      figure: "8. Keys + routing + limits + queue, cost per request",
      spark: `${signed(added * 1000)} µs p50; ${signed(cpuAdded.p50)} µs CPU (${fmt(micros, 1)} µs in process)`,
      reference: `bare ${ms(bareSummary.p50)} p50 TTFT`,
      comparison: `${ms(fullSummary.p50)} vs ${ms(bareSummary.p50)}`,
      goal: `< ${fmt(GOAL_MS * 1000)} µs at p50`,
      met: added < GOAL_MS,
    },
    data: {
      bare: bareSummary,
      full: fullSummary,
      addedP50Ms: added,
      inProcessMicrosPerRequest: micros,
      inProcessMicrosPerRequestFreshPrompt: freshMicros,
      cpuMicrosPerRequest: {
        bare: summarize(bareCpu),
        full: summarize(fullCpu),
        addedPairwise: cpuAdded,
      },
      iterations: options.iterations,
    },
  };
}
