/**
 * Figures 1 and 2: what the server adds on top of an engine, measured with the deterministic script
 * engine at unlimited rate so that the engine itself costs next to nothing.
 */
import type { EngineRequest } from "../src/engine/types.js";
import { ScriptEngine, splitPieces } from "../src/engines/script/script-engine.js";
import { fmt, ms, summarize, type FigureResult, type Log, type Summary } from "./kit/report.js";
import { SseClient, type StreamClient } from "./kit/sse-client.js";
import { ThreadedSseClient } from "./kit/threaded-client.js";
import { withSparkServer } from "./kit/in-process.js";

const PROMPT = "Say hello.";

function engineRequest(): EngineRequest {
  return {
    model: "spark",
    items: [{ type: "message", role: "user", text: PROMPT }],
    tools: [],
    toolChoice: "auto",
    parallelToolCalls: true,
  };
}

interface Clients {
  /** The client on its own thread, like a real client in another process: the headline figures. */
  threaded: ThreadedSseClient;
  /** The same client on the server's thread, taking turns with it on one event loop. */
  sameThread: SseClient;
}

/** Serves `engine` on 127.0.0.1, port 0, for the duration of `body`. */
async function withServer<T>(engine: ScriptEngine, body: (clients: Clients) => Promise<T>): Promise<T> {
  return withSparkServer({ engine }, async (url) => {
    const clients = { threaded: new ThreadedSseClient(url), sameThread: new SseClient(url) };
    try {
      return await body(clients);
    } finally {
      clients.sameThread.close();
      await clients.threaded.close();
    }
  });
}

/** Time from calling `engine.stream()` to its first `text-delta` part; the stream is read to its end. */
async function inProcessTtft(engine: ScriptEngine): Promise<number> {
  const signal = new AbortController().signal;
  const request = engineRequest();
  const started = performance.now();
  let first = 0;
  for await (const part of engine.stream(request, signal)) {
    if (part.type === "text-delta" && first === 0) first = performance.now();
  }
  return first - started;
}

/** Time from sending the request to reading the first `response.output_text.delta`. */
async function serverTtft(client: StreamClient): Promise<number> {
  const result = await client.stream({ model: "spark", input: PROMPT, store: false });
  if (result.firstDeltaAt === undefined) throw new Error("the server sent no text delta");
  return result.firstDeltaAt - result.startedAt;
}

export async function addedLatency(
  options: { warmup: number; iterations: number },
  log: Log,
): Promise<FigureResult> {
  const engine = new ScriptEngine({
    lines: [{ output: [{ type: "message", text: "Hello from Spark, a short scripted reply." }] }],
  });
  const samples = await withServer(engine, async (clients) => {
    const samples = {
      inProcess: [] as number[],
      threaded: [] as number[],
      sameThread: [] as number[],
      health: [] as number[],
    };
    const measure = {
      inProcess: () => inProcessTtft(engine),
      threaded: () => serverTtft(clients.threaded),
      sameThread: () => serverTtft(clients.sameThread),
      health: () => clients.sameThread.get("/healthz"),
    };
    const order = Object.keys(measure) as (keyof typeof measure)[];
    for (let i = 0; i < options.warmup + options.iterations; i++) {
      // Interleaved, in alternating order, so that drift and GC hit all alike.
      for (const key of i % 2 === 0 ? order : [...order].reverse()) {
        const value = await measure[key]();
        if (i >= options.warmup) samples[key].push(value);
      }
    }
    return samples;
  });
  const inProcess = summarize(samples.inProcess);
  const server = summarize(samples.threaded);
  const sameThread = summarize(samples.sameThread);
  const health = summarize(samples.health);
  const added = server.p50 - inProcess.p50;
  const line = (s: Summary): string => `p50 ${ms(s.p50)}, p90 ${ms(s.p90)}`;
  log(`  ${server.n} interleaved requests of each kind:`);
  log(`  engine in process:                       ${line(inProcess)}`);
  log(`  server, client on its own thread:        ${line(server)}; added at p50 ${ms(added)}`);
  log(
    `  server, client on the server's thread:   ${line(sameThread)}; added at p50 ${ms(sameThread.p50 - inProcess.p50)}`,
  );
  log(`  for scale, GET /healthz round trip, client on the server's thread: ${line(health)}`);
  return {
    row: {
      figure: "1. Time to first token, script engine",
      spark: line(server),
      reference: `in process: ${line(inProcess)}`,
      comparison: `+${ms(added)} at p50`,
      goal: "< 1 ms added",
      met: added < 1,
    },
    data: {
      unit: "ms",
      inProcess,
      server,
      serverClientOnServerThread: sameThread,
      healthRoundTrip: health,
      addedP50: added,
    },
  };
}

/** `count` pieces of at most four letters, each with its leading space: one engine part apiece. */
function longText(count: number): string {
  const words = [
    "fn",
    "let",
    "x",
    "=",
    "a+b",
    "if",
    "else",
    "for",
    "i++",
    "ret",
    "the",
    "fox",
    "run",
    "{",
    "}",
  ];
  const out: string[] = [];
  for (let i = 0; i < count; i++) out.push(words[(i * 7 + (i >> 3)) % words.length]!);
  return out.join(" ");
}

export async function relayThroughput(
  options: { pieces: number; rounds: number },
  log: Log,
): Promise<FigureResult> {
  const text = longText(options.pieces);
  const pieces = splitPieces(text).length;
  if (pieces !== options.pieces) throw new Error(`expected ${options.pieces} pieces, got ${pieces}`);
  const engine = new ScriptEngine({ lines: [{ output: [{ type: "message", text }] }] });

  const inProcessRound = async (): Promise<number> => {
    let count = 0;
    let first = 0;
    let last = 0;
    for await (const part of engine.stream(engineRequest(), new AbortController().signal)) {
      if (part.type !== "text-delta") continue;
      last = performance.now();
      if (count++ === 0) first = last;
    }
    if (count !== pieces) throw new Error(`in process: ${count} deltas, expected ${pieces}`);
    return (count - 1) / ((last - first) / 1000);
  };
  const serverRound = async (client: StreamClient): Promise<number> => {
    const result = await client.stream({ model: "spark", input: PROMPT, store: false });
    if (result.deltas !== pieces) throw new Error(`server: ${result.deltas} deltas, expected ${pieces}`);
    return (result.deltas - 1) / ((result.lastDeltaAt! - result.firstDeltaAt!) / 1000);
  };

  const rates = await withServer(engine, async ({ threaded, sameThread }) => {
    await inProcessRound();
    await serverRound(threaded);
    await serverRound(sameThread);
    const rates = { inProcess: [] as number[], threaded: [] as number[], sameThread: [] as number[] };
    for (let round = 0; round < options.rounds; round++) {
      rates.inProcess.push(await inProcessRound());
      rates.threaded.push(await serverRound(threaded));
      rates.sameThread.push(await serverRound(sameThread));
    }
    return rates;
  });
  const inProcess = summarize(rates.inProcess);
  const server = summarize(rates.threaded);
  const sameThread = summarize(rates.sameThread);
  const range = (s: Summary): string => `${fmt(s.p50)} (range ${fmt(s.min)}–${fmt(s.max)})`;
  log(`  ${fmt(pieces)} pieces per stream, median of ${options.rounds} round(s):`);
  log(`  server → client on its own thread:     ${range(server)} tok/s`);
  log(`  server → client on the server's thread: ${range(sameThread)} tok/s`);
  log(`  engine read in process:                 ${range(inProcess)} parts/s`);
  return {
    row: {
      figure: "2. Relay throughput, one SSE stream",
      spark: `${fmt(server.p50)} tok/s`,
      reference: `in process: ${fmt(inProcess.p50)} parts/s`,
      comparison: `${fmt((100 * server.p50) / inProcess.p50, 1)}% of in process`,
      goal: "≥ 100,000 tok/s",
      met: server.p50 >= 100_000,
    },
    data: {
      unit: "tokens/s",
      pieces,
      inProcess,
      server,
      serverClientOnServerThread: sameThread,
      ratio: server.p50 / inProcess.p50,
    },
  };
}
