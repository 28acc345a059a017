/**
 * Figures 5–7, WebSocket mode:
 *   5. a 20-turn tool loop, WebSocket with incremental input vs HTTP re-sending the full history:
 *      per-turn overhead (turn time minus the engine's own time) and bytes sent per turn;
 *   6. steering latency: `response.steer` sent to the successor's first token, vs a plain
 *      continuation with the same input (the engine's time to first token plus create overhead);
 *   7. cancel latency: socket closed to engine stopped, in milliseconds and in tokens.
 * Servers are in process on 127.0.0.1, port 0; clients are real sockets (ws, undici via fetch).
 */
import WebSocket from "ws";
import type { Engine, EnginePart, EngineRequest } from "../src/engine/types.js";
import { LlamaEngine } from "../src/engines/llama/llama-engine.js";
import { parseScript, ScriptEngine, type ScriptLine } from "../src/engines/script/script-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { threadCpuMicros } from "./cpu-time.js";
import { fmt, ms, percentile, type FigureResult, type Log } from "./report.js";

const TURNS = 20;
/** The long run that checks a turn's cost does not grow with the conversation. */
const LONG_TURNS = 200;
const REPORTED_TURNS = [1, 10, 20] as const;
const RATE = 1000;
const TOOL = {
  type: "function",
  name: "exec_command",
  description: "Run a shell command in the workspace and return its output.",
  parameters: {
    type: "object",
    properties: { cmd: { type: "string" }, workdir: { type: "string" } },
    required: ["cmd"],
  },
};
const TOOL_CALL_ARGUMENTS = '{"cmd":"sed -n 1,60p src/parser.ts"}';
/** What a shell tool returns in a coding loop: a screenful of source. */
const TOOL_OUTPUT = Array.from(
  { length: 60 },
  (_, i) => `${String(i + 1).padStart(4)}  export function step${i}(input: string): string { return input; }`,
).join("\n");
const INSTRUCTIONS = "You are a coding agent. Use exec_command to inspect the workspace.";
const TASK = "Find why the parser drops the last field.";

type Event = { type: string; response?: { id: string; output?: { call_id?: string }[] } } & Record<
  string,
  unknown
>;

function scriptLines(lines: object[]): ScriptLine[] {
  return parseScript(lines.map((line) => JSON.stringify(line)).join("\n"), "bench");
}

/** A WebSocket client that resolves waits on events; one per connection. */
class BenchSocket {
  readonly #waiters: { match: (e: Event) => boolean; resolve: (e: Event) => void }[] = [];
  private constructor(readonly socket: WebSocket) {
    socket.on("message", (data) => {
      const event = JSON.parse(data.toString()) as Event;
      for (let i = 0; i < this.#waiters.length; i++) {
        const waiter = this.#waiters[i]!;
        if (waiter.match(event)) {
          this.#waiters.splice(i, 1);
          waiter.resolve(event);
          return;
        }
      }
    });
  }

  static async open(url: string): Promise<BenchSocket> {
    const socket = new WebSocket(`${url.replace(/^http/, "ws")}/v1/responses`, { perMessageDeflate: false });
    await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
    return new BenchSocket(socket);
  }

  /** Sends a frame and returns its size in bytes. */
  send(frame: object): number {
    const text = JSON.stringify(frame);
    this.socket.send(text);
    return Buffer.byteLength(text);
  }

  next(match: (e: Event) => boolean): Promise<Event> {
    return new Promise((resolve) => this.#waiters.push({ match, resolve }));
  }

  close(): void {
    this.socket.close();
  }
}

/** Starts `engine` and serves it on 127.0.0.1, port 0, for the duration of `body`. */
async function withServer<T>(engine: Engine, body: (url: string) => Promise<T>): Promise<T> {
  await engine.start();
  const server = new SparkServer({ engine, host: "127.0.0.1", port: 0 });
  try {
    return await body(await server.listen());
  } finally {
    await server.close();
  }
}

const isTerminal = (e: Event): boolean =>
  e.type === "response.completed" || e.type === "response.incomplete" || e.type === "response.failed";

/** Reads an SSE response to its terminal event and returns that event. */
async function readSse(response: Response): Promise<Event> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    buffer += decoder.decode(chunk, { stream: true });
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = block
        .split("\n")
        .filter((line) => line.startsWith("data: "))
        .map((line) => line.slice(6))
        .join("\n");
      if (!data) continue;
      const event = JSON.parse(data) as Event;
      if (isTerminal(event)) return event;
    }
  }
  throw new Error("the stream ended without a terminal event");
}

interface LoopSample {
  turnMs: number[];
  /** The engine's own time for the same turn, measured around its stream on the server. */
  engineMs: number[];
  bytes: number[];
  /** CPU time of this thread (server, engine and client) over the turn. */
  cpuMicros: number[];
}

/** The duration of the engine stream that ended last. */
function lastEngineRun(engine: ObservedEngine): number {
  const run = engine.runs.at(-1)!;
  return run.endedAt - run.startedAt;
}

async function wsLoop(url: string, engine: ObservedEngine, turns = TURNS): Promise<LoopSample> {
  const client = await BenchSocket.open(url);
  const sample: LoopSample = { turnMs: [], engineMs: [], bytes: [], cpuMicros: [] };
  let previous: string | undefined;
  let callId = "";
  for (let turn = 1; turn <= turns; turn++) {
    const frame: Record<string, unknown> = {
      type: "response.create",
      model: "spark",
      instructions: INSTRUCTIONS,
      tools: [TOOL],
      store: false,
    };
    if (previous) {
      frame.previous_response_id = previous;
      frame.input = [{ type: "function_call_output", call_id: callId, output: TOOL_OUTPUT }];
    } else frame.input = [{ role: "user", content: TASK }];
    const cpu = threadCpuMicros();
    const started = performance.now();
    const done = client.next(isTerminal);
    sample.bytes.push(client.send(frame));
    const terminal = await done;
    sample.turnMs.push(performance.now() - started);
    sample.cpuMicros.push(threadCpuMicros() - cpu);
    sample.engineMs.push(lastEngineRun(engine));
    previous = terminal.response!.id;
    callId = terminal.response!.output?.[0]?.call_id ?? "";
  }
  client.close();
  return sample;
}

async function httpLoop(url: string, engine: ObservedEngine): Promise<LoopSample> {
  const sample: LoopSample = { turnMs: [], engineMs: [], bytes: [], cpuMicros: [] };
  const input: object[] = [{ role: "user", content: TASK }];
  for (let turn = 1; turn <= TURNS; turn++) {
    const body = JSON.stringify({
      model: "spark",
      instructions: INSTRUCTIONS,
      tools: [TOOL],
      store: false,
      stream: true,
      input,
    });
    const started = performance.now();
    const response = await fetch(`${url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body,
    });
    const terminal = await readSse(response);
    sample.turnMs.push(performance.now() - started);
    sample.engineMs.push(lastEngineRun(engine));
    sample.bytes.push(Buffer.byteLength(body));
    const call = terminal.response!.output?.[0] as { call_id: string; name: string; arguments: string };
    input.push(
      { type: "function_call", call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: "function_call_output", call_id: call.call_id, output: TOOL_OUTPUT },
    );
  }
  return sample;
}

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
  await withServer(engine, async (url) => {
    await wsLoop(url, engine); // warm-up
    await httpLoop(url, engine);
    for (let round = 0; round < options.rounds; round++) {
      ws.push(await wsLoop(url, engine));
      http.push(await httpLoop(url, engine));
    }
    for (let round = 0; round < options.longRounds; round++) long.push(await wsLoop(url, engine, LONG_TURNS));
  });
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
      rows,
      rounds: options.rounds,
      rate: RATE,
      longRun: { turns: LONG_TURNS, rounds: options.longRounds, around20, around200 },
    },
  };
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
