/**
 * Figures 5–7, WebSocket mode:
 *   5. a 20-turn tool loop, WebSocket with incremental input vs HTTP re-sending the full history:
 *      per-turn overhead (turn time minus the engine's own time) and bytes sent per turn;
 *   6. steering latency: `response.steer` sent to the successor's first token, vs a plain
 *      continuation with the same input (the engine's time to first token plus create overhead);
 *   7. cancel latency: socket closed to engine stopped, in milliseconds and in tokens.
 * Servers are in process on 127.0.0.1, port 0; clients are real sockets (ws, undici via fetch).
 */
import type { Engine, EnginePart, EngineRequest } from "../src/engine/types.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { parseScript, ScriptEngine, type ScriptLine } from "../src/engines/script/script-engine.js";
import { processCpuMicros, threadCpuMicros } from "./kit/cpu-time.js";
import { ThreadedLoopClient } from "./threaded-loop.js";
import {
  BenchSocket,
  clientLoop,
  isTerminal,
  INSTRUCTIONS,
  TASK,
  TOOL,
  TOOL_CALL_ARGUMENTS,
  TOOL_OUTPUT,
  type ClientTurn,
  type LoopMode,
} from "./tool-loop.js";
import { fmt, ms, percentile, type FigureResult, type Log } from "./kit/report.js";
import { withSparkServer } from "./kit/in-process.js";

const TURNS = 20;
/** The long run that checks a turn's cost does not grow with the conversation. */
const LONG_TURNS = 200;
const REPORTED_TURNS = [1, 10, 20] as const;
const RATE = 1000;
export function scriptLines(lines: object[]): ScriptLine[] {
  return parseScript(lines.map((line) => JSON.stringify(line)).join("\n"), "bench");
}

/** Starts `engine` and serves it on 127.0.0.1, port 0, for the duration of `body`. */
async function withServer<T>(engine: Engine, body: (url: string) => Promise<T>): Promise<T> {
  await engine.start();
  return withSparkServer({ engine }, body);
}

interface LoopSample {
  turnMs: number[];
  /** The engine's own time for the same turn, measured around its stream on the server. */
  engineMs: number[];
  bytes: number[];
  /** CPU time of the client's process over the turn (on this thread: server, engine and client). */
  cpuMicros: number[];
  /** When each turn was sent, on this thread's clock. */
  sentAt: number[];
}

/**
 * A loop run by the client on this thread, with each turn's engine time taken from the server side
 * (the engine's streams end in turn order; the i-th after `from` is the i-th turn's).
 */
async function loop(mode: LoopMode, url: string, engine: ObservedEngine, turns = TURNS): Promise<LoopSample> {
  const from = engine.runs.length;
  const client = await clientLoop(mode, url, turns);
  return sampleOf(client, engine.runs.slice(from), performance.timeOrigin);
}

/** Per-turn figures from the client's turns and the engine's runs (`origin`: the runs' timeOrigin). */
function sampleOf(
  turns: readonly ClientTurn[],
  runs: readonly { startedAt: number; endedAt: number }[],
  origin: number,
): LoopSample {
  if (runs.length !== turns.length) throw new Error(`${turns.length} turns but ${runs.length} engine runs`);
  return {
    turnMs: turns.map((t) => t.endedAt - t.sentAt),
    engineMs: runs.map((r) => r.endedAt - r.startedAt),
    bytes: turns.map((t) => t.bytes),
    cpuMicros: turns.map((t) => t.cpuMicros),
    sentAt: turns.map((t) => t.sentAt - origin),
  };
}

const wsLoop = (url: string, engine: ObservedEngine, turns = TURNS): Promise<LoopSample> =>
  loop("ws", url, engine, turns);
const httpLoop = (url: string, engine: ObservedEngine): Promise<LoopSample> => loop("http", url, engine);

export async function toolLoop(
  options: { rounds: number; longRounds: number },
  log: Log,
): Promise<FigureResult> {
  const lines = scriptLines([
    { output: [{ type: "function_call", name: TOOL.name, arguments: TOOL_CALL_ARGUMENTS }] },
  ]);
  const engine = new ObservedEngine(new ScriptEngine({ lines, rate: RATE }));
  const ws: LoopSample[] = [];
  const http: LoopSample[] = [];
  const long: LoopSample[] = [];
  const apart = {
    ws: [] as { sample: LoopSample; serverCpu: number }[],
    http: [] as { sample: LoopSample; serverCpu: number }[],
  };
  await withServer(engine, async (url) => {
    await wsLoop(url, engine); // warm-up
    await httpLoop(url, engine);
    for (let round = 0; round < options.rounds; round++) {
      ws.push(await wsLoop(url, engine));
      http.push(await httpLoop(url, engine));
    }
    for (let round = 0; round < options.longRounds; round++) long.push(await wsLoop(url, engine, LONG_TURNS));
    // 5b: the client on its own thread; this thread is then the server (with the engine) alone.
    const threaded = new ThreadedLoopClient();
    try {
      await threaded.loop("ws", url, 2);
      for (let round = 0; round < options.rounds; round++) {
        for (const mode of round % 2 === 0 ? (["ws", "http"] as const) : (["http", "ws"] as const)) {
          const from = engine.runs.length;
          // The thread's own clock: exact enough over a whole loop, and the client's thread is not in it.
          const cpu = threadCpuMicros();
          const turns = await threaded.loop(mode, url, TURNS);
          const serverCpu = (threadCpuMicros() - cpu) / TURNS;
          const sample = sampleOf(turns, engine.runs.slice(from), performance.timeOrigin);
          (mode === "ws" ? apart.ws : apart.http).push({ sample, serverCpu });
        }
      }
    } finally {
      await threaded.close();
    }
  });
  // The engine's own CPU per turn: the same turn's stream consumed on this thread, no server.
  const engineCpu = await engineCpuPerTurn(lines);
  /** Median over rounds of one turn's value. */
  const at = (samples: LoopSample[], turn: number, value: (s: LoopSample, i: number) => number): number =>
    percentile(
      samples.map((s) => value(s, turn - 1)),
      0.5,
    );
  const overhead = (s: LoopSample, i: number): number => s.turnMs[i]! - s.engineMs[i]!;
  const rows = REPORTED_TURNS.map((turn) => ({
    turn,
    engineMs: at(ws, turn, (s, i) => s.engineMs[i]!),
    wsOverheadMs: at(ws, turn, overhead),
    httpOverheadMs: at(http, turn, overhead),
    wsBytes: at(ws, turn, (s, i) => s.bytes[i]!),
    httpBytes: at(http, turn, (s, i) => s.bytes[i]!),
  }));
  for (const row of rows) {
    log(
      `  turn ${String(row.turn).padStart(2)}: engine ${ms(row.engineMs)}; overhead WebSocket ${ms(row.wsOverheadMs)} vs HTTP ${ms(row.httpOverheadMs)}; ` +
        `bytes sent WebSocket ${fmt(row.wsBytes)} vs HTTP ${fmt(row.httpBytes)}`,
    );
  }
  const last = rows.at(-1)!;
  const first = rows[0]!;
  const cut = 1 - last.wsOverheadMs / last.httpOverheadMs;
  const firstCut = 1 - first.wsOverheadMs / first.httpOverheadMs;
  const flat = last.wsBytes <= first.wsBytes * 1.5 || last.wsBytes === rows[1]!.wsBytes;
  // A 200-turn run: nothing in a turn may grow with the conversation. Medians over the turns
  // around 20 and around 200, of every long round.
  const band = (from: number, to: number, value: (s: LoopSample, i: number) => number): number =>
    percentile(
      long.flatMap((s) => s.turnMs.slice(from - 1, to).map((_, k) => value(s, from - 1 + k))),
      0.5,
    );
  const around20 = { overheadMs: band(11, 30, overhead), cpuMicros: band(11, 30, (s, i) => s.cpuMicros[i]!) };
  const around200 = {
    overheadMs: band(LONG_TURNS - 19, LONG_TURNS, overhead),
    cpuMicros: band(LONG_TURNS - 19, LONG_TURNS, (s, i) => s.cpuMicros[i]!),
  };
  log(
    `  turn 1: WebSocket ${fmt(100 * (1 - firstCut), 1)}% of HTTP; turn 20: ${fmt(100 * (1 - cut), 1)}% of HTTP`,
  );
  const apartAt = (mode: "ws" | "http", turn: number): number =>
    percentile(
      apart[mode].map(({ sample }) => overhead(sample, turn - 1)),
      0.5,
    );
  const serverCpu = {
    ws: percentile(
      apart.ws.map((a) => a.serverCpu),
      0.5,
    ),
    http: percentile(
      apart.http.map((a) => a.serverCpu),
      0.5,
    ),
  };
  const threadedRows = [1, TURNS].map((turn) => ({
    turn,
    wsMs: apartAt("ws", turn),
    httpMs: apartAt("http", turn),
  }));
  log(
    `  client on its own thread: overhead at turn 1 WebSocket ${ms(threadedRows[0]!.wsMs)} vs HTTP ${ms(threadedRows[0]!.httpMs)}, ` +
      `turn ${TURNS} ${ms(threadedRows[1]!.wsMs)} vs ${ms(threadedRows[1]!.httpMs)}; server thread CPU per turn ` +
      `(minus the engine's own ${fmt(engineCpu)} µs) WebSocket ${fmt(serverCpu.ws - engineCpu)} µs vs HTTP ${fmt(serverCpu.http - engineCpu)} µs ` +
      `(${fmt((100 * (serverCpu.ws - engineCpu)) / (serverCpu.http - engineCpu), 1)}%)`,
  );
  log(
    `  ${LONG_TURNS}-turn WebSocket run (median of turns 11–30 vs ${LONG_TURNS - 19}–${LONG_TURNS}, ${options.longRounds} round(s)): ` +
      `overhead ${ms(around20.overheadMs)} vs ${ms(around200.overheadMs)}; this thread's CPU per turn ` +
      `(server, engine and client) ${fmt(around20.cpuMicros)} vs ${fmt(around200.cpuMicros)} µs`,
  );
  return {
    row: {
      figure: "5. 20-turn tool loop, turn 20 overhead",
      spark: `WS ${ms(last.wsOverheadMs)}, ${fmt(last.wsBytes)} B/turn`,
      reference: `HTTP ${ms(last.httpOverheadMs)}, ${fmt(last.httpBytes)} B/turn`,
      comparison: `${fmt(cut * 100)}% lower (turn 1: ${fmt(firstCut * 100)}%)`,
      goal: "≥ 80% lower at turns 1 and 20; bytes flat",
      met: cut >= 0.8 && firstCut >= 0.8 && flat,
    },
    data: {
      clientOnItsOwnThread: {
        rows: threadedRows,
        serverCpuMicrosPerTurn: {
          ws: serverCpu.ws - engineCpu,
          http: serverCpu.http - engineCpu,
          engine: engineCpu,
        },
      },
      rows,
      rounds: options.rounds,
      rate: RATE,
      longRun: { turns: LONG_TURNS, rounds: options.longRounds, around20, around200 },
    },
  };
}

/**
 * CPU time per turn of the engine alone: a continued turn's request (the task, the call, a new tool
 * output each time, as the loop sends) streamed and consumed on this thread, no server.
 */
async function engineCpuPerTurn(lines: ScriptLine[]): Promise<number> {
  const engine = new ScriptEngine({ lines, rate: RATE });
  const request = (): EngineRequest => ({
    model: "spark",
    items: [
      { type: "message", role: "system", text: INSTRUCTIONS },
      { type: "message", role: "user", text: TASK },
      { type: "tool_call", kind: "function", callId: "call_1", name: TOOL.name, input: TOOL_CALL_ARGUMENTS },
      { type: "tool_result", kind: "function", callId: "call_1", output: TOOL_OUTPUT },
    ],
    tools: [{ kind: "function", name: TOOL.name, parameters: TOOL.parameters }],
    toolChoice: "auto",
    parallelToolCalls: true,
  });
  const turns = 20;
  for await (const _part of engine.stream(request(), new AbortController().signal));
  const cpu = processCpuMicros();
  for (let i = 0; i < turns; i++)
    for await (const _part of engine.stream(request(), new AbortController().signal));
  return (processCpuMicros() - cpu) / turns;
}

/**
 * Wraps an engine to see, for each stream, when its signal aborted, how many token parts it still
 * produced afterwards, and when it ended.
 */
class ObservedEngine implements Engine {
  readonly specificationVersion = "v1";
  readonly stops: { abortedAt: number; endedAt: number; tokensAfterAbort: number }[] = [];
  /** Start and end of every stream, in the order they ended. */
  readonly runs: { startedAt: number; endedAt: number }[] = [];
  constructor(private readonly inner: Engine) {}
  get kind(): string {
    return this.inner.kind;
  }
  get capabilities() {
    return this.inner.capabilities;
  }
  start = (): Promise<void> => this.inner.start();
  status = () => this.inner.status();
  models = () => this.inner.models();
  resolveModel = (name: string) => this.inner.resolveModel(name);
  countTokens = (text: string) => this.inner.countTokens(text);
  close = (): Promise<void> => this.inner.close();

  async *stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    const startedAt = performance.now();
    let abortedAt = 0;
    let after = 0;
    const onAbort = (): void => void (abortedAt = performance.now());
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      for await (const part of this.inner.stream(request, signal)) {
        if (abortedAt && (part.type === "text-delta" || part.type === "tool-call-delta")) after++;
        yield part;
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.runs.push({ startedAt, endedAt: performance.now() });
      if (abortedAt) this.stops.push({ abortedAt, endedAt: performance.now(), tokensAfterAbort: after });
    }
  }
}

interface EngineUnderTest {
  name: string;
  engine: Engine;
  /** Tokens the engine itself decoded after each abort, when it reports them (llama). */
  decodedAfterAbort?: number[];
  /** Body fields for the long response that gets steered or cancelled. */
  long: Record<string, unknown>;
}

function scriptUnderTest(): EngineUnderTest {
  const lines = scriptLines([
    { output: [{ type: "message", text: "word ".repeat(5000) }] },
    { output: [{ type: "message", text: "Understood, switching to the new plan." }] },
  ]);
  return { name: "script", engine: new ScriptEngine({ lines, rate: RATE }), long: {} };
}

function llamaUnderTest(modelPath: string): EngineUnderTest {
  const decodedAfterAbort: number[] = [];
  const engine = new LlamaEngine({
    modelPath: async () => modelPath,
    gpu: false,
    log: () => {},
    onCancel: ({ tokensAfterAbort }) => decodedAfterAbort.push(tokensAfterAbort),
  });
  // The steered response's successor inherits these settings, so keep its run short.
  return { name: "llama", engine, decodedAfterAbort, long: { max_output_tokens: 400, temperature: 0 } };
}

/** Figure 6 for one engine. */
async function steering(subject: EngineUnderTest, rounds: number, log: Log): Promise<FigureResult> {
  const steerMs: number[] = [];
  const continueMs: number[] = [];
  await withServer(subject.engine, async (url) => {
    for (let round = -1; round < rounds; round++) {
      const client = await BenchSocket.open(url);
      const created = client.next((e) => e.type === "response.created");
      const firstDelta = client.next((e) => e.type === "response.output_text.delta");
      // store:true, so the reference below can continue from the steered response after its
      // successor has replaced it as the lane's latest.
      client.send({
        type: "response.create",
        input: "Write a long essay.",
        store: true,
        stream_id: "main",
        ...subject.long,
      });
      const steeredId = (await created).response!.id;
      await firstDelta;
      await new Promise((resolve) => setTimeout(resolve, 20));
      // The successor is the first response created after the steer; its first delta is the figure.
      // Waiters are registered before sending: `ws` may deliver several events in one go.
      let successorId = "";
      const successorDelta = client.next((e) => {
        if (e.type === "response.created" && e.response!.id !== steeredId) successorId = e.response!.id;
        return successorId !== "" && e.type === "response.output_text.delta";
      });
      const successorDone = client.next(
        (e) => isTerminal(e) && successorId !== "" && e.response!.id === successorId,
      );
      const sentAt = performance.now();
      client.send({
        type: "response.steer",
        previous_response_id: steeredId,
        input: "Stop. Use tabs instead.",
      });
      await successorDelta;
      const steerLatency = performance.now() - sentAt;
      await successorDone;
      // Reference: the same continuation sent as a plain create on another lane.
      const forkStarted = performance.now();
      const forkDelta = client.next((e) => e.type === "response.output_text.delta" && e.stream_id === "fork");
      client.send({
        type: "response.create",
        previous_response_id: steeredId,
        input: "Stop. Use tabs instead.",
        store: false,
        stream_id: "fork",
        ...subject.long,
        max_output_tokens: 8,
      });
      await forkDelta;
      const forkLatency = performance.now() - forkStarted;
      await client.next((e) => isTerminal(e) && e.stream_id === "fork");
      client.close();
      if (round >= 0) {
        steerMs.push(steerLatency);
        continueMs.push(forkLatency);
      }
    }
  });
  const steer = percentile(steerMs, 0.5);
  const plain = percentile(continueMs, 0.5);
  log(
    `  ${subject.name}: steer → successor's first token ${ms(steer)} (p50 of ${rounds}); same continuation as a create ${ms(plain)}`,
  );
  return {
    row: {
      figure: `6. Steering latency (${subject.name})`,
      spark: ms(steer),
      reference: `create ${ms(plain)}`,
      comparison: `+${ms(steer - plain)}`,
      goal: "≤ engine TTFT + 20 ms",
      met: steer - plain <= 20,
    },
    data: { steerMs, continueMs },
  };
}

/** Figure 7 for one engine: close the socket mid-stream, time until the engine stopped. */
async function cancelling(subject: EngineUnderTest, rounds: number, log: Log): Promise<FigureResult> {
  const observed = new ObservedEngine(subject.engine);
  const latencies: number[] = [];
  const tokens: number[] = [];
  await withServer(observed, async (url) => {
    for (let round = -1; round < rounds; round++) {
      const client = await BenchSocket.open(url);
      const deltas = client.next((e) => e.type === "response.output_text.delta");
      client.send({
        type: "response.create",
        input: "Write a long essay.",
        store: false,
        ...subject.long,
        max_output_tokens: 5000,
      });
      await deltas;
      await new Promise((resolve) => setTimeout(resolve, 20));
      const before = observed.stops.length;
      const closedAt = performance.now();
      client.socket.terminate();
      while (observed.stops.length === before) await new Promise((resolve) => setImmediate(resolve));
      const stop = observed.stops.at(-1)!;
      if (round >= 0) {
        latencies.push(stop.endedAt - closedAt);
        // Tokens the engine decoded after the abort (llama reports them), else those it still yielded.
        tokens.push(subject.decodedAfterAbort?.at(-1) ?? stop.tokensAfterAbort);
      }
    }
  });
  const p50 = percentile(latencies, 0.5);
  const worst = Math.max(...tokens);
  log(
    `  ${subject.name}: socket closed → engine stopped ${ms(p50)} (p50 of ${rounds}); at most ${worst} token(s) after the abort`,
  );
  return {
    row: {
      figure: `7. Cancel latency (${subject.name})`,
      spark: `${ms(p50)}, ≤ ${worst} token(s)`,
      reference: "socket close",
      comparison: `${worst} token(s) after abort`,
      goal: "≤ 1 token",
      met: worst <= 1,
    },
    data: { latencies, tokens },
  };
}

export async function steeringAndCancel(
  options: { rounds: number; modelPath: string | undefined },
  log: Log,
): Promise<FigureResult[]> {
  const results: FigureResult[] = [];
  const subjects = (): EngineUnderTest[] => [
    scriptUnderTest(),
    ...(options.modelPath ? [llamaUnderTest(options.modelPath)] : []),
  ];
  log("\n6. Steering latency: response.steer sent → the successor's first token");
  for (const subject of subjects()) results.push(await steering(subject, options.rounds, log));
  log("\n7. Cancel latency: WebSocket closed → engine stopped");
  for (const subject of subjects()) results.push(await cancelling(subject, options.rounds, log));
  return results;
}
