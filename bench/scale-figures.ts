/**
 * Figure 9: many concurrent WebSocket sessions streaming from the script engine on one machine.
 * For 10, 100 and 1,000 sessions: the time between tokens as the client sees it (gaps between
 * consecutive `response.output_text.delta` events of a session, over every session), against the
 * engine's nominal gap; the server's memory per session; and the errors.
 *
 * The server runs in its own process (bench/scale-server.ts, a fresh one for each session count),
 * so that its memory and CPU are measured apart from the clients'; the clients are `ws` sockets on
 * this process's thread. For each count: warm up, collect garbage and read the server's RSS (the
 * baseline); open every connection (in batches of 100); send one `response.create` on each, spread
 * over one nominal gap so that the streams' timers do not all fire in the same millisecond; read the
 * RSS again half-way through the streams. Memory per session = (RSS mid-stream − baseline) / count.
 *
 * The headline p99 is over the steady state, while every session streams: the burst of creates at
 * the start (1,000 within one gap) costs the server a few hundred milliseconds, which shows in the
 * time to first token and in the p99 over all gaps, both reported beside it.
 *
 * Run alone: `node --import tsx bench/scale-figures.ts [--quick] [--rate 10] [--sessions 10,100,1000]
 * [--tokens 100]`.
 */
import { spawn, type ChildProcessByStdio } from "node:child_process";
import { readFileSync } from "node:fs";
import { monitorEventLoopDelay } from "node:perf_hooks";
import type { Readable, Writable } from "node:stream";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { fmt, ms, percentile, table, type FigureResult, type Log } from "./kit/report.js";
import type { ScaleServerConfig, ServerStats } from "./scale-server.js";

/** Session counts of the curve; the last is the figure. */
const SESSION_COUNTS: readonly number[] = [10, 100, 1000];
/**
 * Tokens per second of every stream: 1,000 sessions are 10,000 tokens (WebSocket frames) a second
 * in all. On the 2-core VM of BENCHMARKS.md one server thread spends ~50–65 µs a frame at this load,
 * so 20 tokens/s (20,000 frames/s) already keeps it 100% busy; 10 leaves it about a third idle.
 */
const RATE = 10;
/** Tokens per session: 10 s of streaming at RATE, so that the steady state dominates. */
const TOKENS = 100;
const QUICK_TOKENS = 40;
/** Connections opened at once; the next batch waits for the previous one. */
const CONNECT_BATCH = 100;
/** Sessions that stream a short reply before the baseline, so that the server's code is warm. */
const WARMUP_SESSIONS = 20;
/** Tokens of each warm-up reply (cut short with max_output_tokens). */
const WARMUP_TOKENS = 10;
/** The goal: steady-state p99 gap at most this, and no errors. */
const p99Goal = (nominalGapMs: number): number => 1.5 * nominalGapMs;

const ROOT = fileURLToPath(new URL("..", import.meta.url));
/** Extra node flags for the server process, e.g. `--cpu-prof --cpu-prof-dir=/tmp/prof` to profile it. */
const SERVER_NODE_ARGS = (process.env.SPARK_BENCH_SERVER_NODE_ARGS ?? "").split(" ").filter(Boolean);

export interface ScalePoint {
  sessions: number;
  tokensPerSession: number;
  tokensReceived: number;
  tokensExpected: number;
  gaps: number;
  gapP50Ms: number;
  gapP99Ms: number;
  gapP999Ms: number;
  gapMaxMs: number;
  /** The same over the steady state only: gaps between the last session's first token and the first
   * session's last token, when every session is streaming (none of the start-up burst). */
  steadyGaps: number;
  steadyGapP50Ms: number;
  steadyGapP99Ms: number;
  steadyGapMaxMs: number;
  /** Median over sessions of (last − first token) / nominal duration: 1 when the streams keep pace. */
  stretchP50: number;
  stretchMax: number;
  /** First token after the create was sent: p50 and p99 over sessions. */
  ttftP50Ms: number;
  ttftP99Ms: number;
  rssBeforeBytes: number;
  rssDuringBytes: number;
  heapUsedBeforeBytes: number;
  heapUsedDuringBytes: number;
  rssBytesPerSession: number;
  heapBytesPerSession: number;
  /** After every response ended, connections still open, after a GC: what an idle session keeps. */
  rssIdleBytes: number;
  heapUsedIdleBytes: number;
  heapBytesPerIdleSession: number;
  peakRssBytes: number | undefined;
  /** The server process's soft limit on open files. */
  serverOpenFileLimit: number | undefined;
  /** Server CPU and event-loop delay over the streaming window; CPU in percent of one core. */
  serverCpuPercent: number;
  serverLoopDelayP99Ms: number;
  serverLoopDelayMaxMs: number;
  /** This process's CPU over the same window, in percent of one core. */
  clientCpuPercent: number;
  /** This process's event-loop delay over the window: how late it may have read a frame. */
  clientLoopDelayP99Ms: number;
  clientLoopDelayMaxMs: number;
  /** CPU used by everything else on the machine over the window (other processes, the kernel's
   * share not charged to either), in percent of one core: high means the figure is disturbed. */
  otherCpuPercent: number;
  connectMs: number;
  streamMs: number;
  wallMs: number;
  errors: number;
  /** The first few errors, for the log. */
  errorSamples: string[];
}

type ServerProcess = ChildProcessByStdio<Writable, Readable, Readable>;

/** The server child: started, asked for stats over stdin, stopped. */
class ScaleServer {
  readonly #pending = new Map<number, (stats: ServerStats) => void>();
  #nextId = 0;
  #stderr = "";
  readonly exited: Promise<number | null>;

  private constructor(
    private readonly child: ServerProcess,
    readonly url: string,
    readonly pid: number,
    lines: AsyncIterator<string>,
  ) {
    this.exited = new Promise((resolve) => child.once("exit", (code) => resolve(code)));
    child.stderr.on(
      "data",
      (chunk: Buffer) => (this.#stderr = (this.#stderr + chunk.toString()).slice(-4000)),
    );
    void (async () => {
      for (let next = await lines.next(); !next.done; next = await lines.next()) {
        const answer = JSON.parse(next.value) as { id: number; stats: ServerStats };
        this.#pending.get(answer.id)?.(answer.stats);
        this.#pending.delete(answer.id);
      }
    })();
  }

  static async start(config: ScaleServerConfig): Promise<ScaleServer> {
    const child = spawn(
      process.execPath,
      [
        ...SERVER_NODE_ARGS,
        "--expose-gc",
        "--import",
        "tsx",
        "bench/scale-server.ts",
        JSON.stringify(config),
      ],
      { cwd: ROOT, stdio: ["pipe", "pipe", "pipe"] },
    );
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const first = await Promise.race([
      lines.next(),
      new Promise<never>((_, reject) =>
        child.once("exit", (code) =>
          reject(new Error(`the scale server exited (${code}) before listening: ${stderr.trim()}`)),
        ),
      ),
    ]);
    if (first.done) throw new Error(`the scale server printed nothing: ${stderr.trim()}`);
    const { url, pid } = JSON.parse(first.value) as { url: string; pid: number };
    return new ScaleServer(child, url, pid, lines);
  }

  /** Asks for the server's stats, after a full GC when `gc`; `reset` starts a new CPU/loop window. */
  stats(options: { gc?: boolean; reset?: boolean } = {}): Promise<ServerStats> {
    const id = this.#nextId++;
    return new Promise((resolve) => {
      this.#pending.set(id, resolve);
      this.child.stdin.write(`${JSON.stringify({ id, ...options })}\n`);
    });
  }

  get stderr(): string {
    return this.#stderr;
  }

  /** Ends stdin (the server closes gracefully), then kills it if it is still there after 5 s. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.stdin.end();
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 5000);
    await this.exited;
    clearTimeout(timer);
  }
}

/** One client connection and what it saw. */
class Session {
  /** Arrival time (performance.now()) of every `response.output_text.delta` event. */
  readonly arrivals: number[] = [];
  sentAt = 0;
  error: string | undefined;
  finished = false;
  readonly done: Promise<void>;
  #finish!: () => void;

  constructor(readonly socket: WebSocket) {
    this.done = new Promise((resolve) => (this.#finish = resolve));
    socket.on("message", (data: Buffer) => {
      const now = performance.now();
      const event = JSON.parse(data.toString()) as { type: string; error?: { message?: string } };
      switch (event.type) {
        case "response.output_text.delta":
          this.arrivals.push(now);
          return;
        case "response.completed":
          this.end();
          return;
        case "error":
        case "response.failed":
        case "response.incomplete":
          this.end(`${event.type}: ${event.error?.message ?? JSON.stringify(event).slice(0, 200)}`);
          return;
      }
    });
    socket.on("error", (error) => this.end(`socket error: ${error.message}`));
    socket.on("close", (code) => this.end(`closed (${code}) before the terminal event`));
  }

  /** Opens a connection; a failure becomes a session that already ended in error. */
  static async open(url: string, headers: Record<string, string> | undefined): Promise<Session> {
    const socket = new WebSocket(`${url.replace(/^http/, "ws")}/v1/responses`, {
      perMessageDeflate: false,
      ...(headers ? { headers } : {}),
    });
    const opened = await new Promise<string | undefined>((resolve) => {
      socket.once("open", () => resolve(undefined));
      socket.once("error", (error) => resolve(`connect: ${error.message}`));
      socket.once("unexpected-response", (_request, response) => {
        resolve(`connect: HTTP ${response.statusCode}`);
        socket.terminate();
      });
    });
    const session = new Session(socket);
    if (opened) session.end(opened);
    return session;
  }

  get tokens(): number {
    return this.arrivals.length;
  }

  create(extra: Record<string, unknown> = {}): void {
    if (this.finished) return;
    this.sentAt = performance.now();
    this.socket.send(
      JSON.stringify({ type: "response.create", model: "spark", input: "hi", store: false, ...extra }),
    );
  }

  end(error?: string): void {
    if (this.finished) return;
    this.finished = true;
    this.error = error;
    this.#finish();
  }
}

/** Busy CPU time of the whole machine (all cores, from /proc/stat), in ms; undefined off Linux. */
function machineBusyMs(): number | undefined {
  try {
    const fields = readFileSync("/proc/stat", "utf8")
      .split("\n")[0]!
      .trim()
      .split(/\s+/)
      .slice(1)
      .map(Number);
    // user nice system idle iowait irq softirq steal …: everything but idle and iowait is busy.
    const busy = fields
      .slice(0, 8)
      .reduce((sum, value, index) => (index === 3 || index === 4 ? sum : sum + value), 0);
    return (busy * 1000) / 100; // USER_HZ is 100 on Linux
  } catch {
    return undefined;
  }
}

function clientCpuMs(since: NodeJS.CpuUsage): number {
  const cpu = process.cpuUsage(since);
  return (cpu.user + cpu.system) / 1000;
}

const sleep = (milliseconds: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, milliseconds));

/** The soft limit on open files of a process (Linux), for the log. */
function openFileLimit(pid: number | "self" = "self"): number | undefined {
  try {
    const match = /^Max open files\s+(\d+|unlimited)/m.exec(readFileSync(`/proc/${pid}/limits`, "utf8"));
    return match?.[1] === "unlimited" ? Infinity : match ? Number(match[1]) : undefined;
  } catch {
    return undefined;
  }
}

async function openAll(
  url: string,
  count: number,
  headers: Record<string, string> | undefined,
): Promise<Session[]> {
  const sessions: Session[] = [];
  for (let start = 0; start < count; start += CONNECT_BATCH) {
    const batch = Math.min(CONNECT_BATCH, count - start);
    sessions.push(...(await Promise.all(Array.from({ length: batch }, () => Session.open(url, headers)))));
  }
  return sessions;
}

/** Sends one create on every session, spread evenly over one nominal gap. */
async function createAll(sessions: readonly Session[], gapMs: number): Promise<void> {
  const slices = Math.max(1, Math.min(sessions.length, Math.round(gapMs)));
  const started = performance.now();
  for (let slice = 0; slice < slices; slice++) {
    const wait = started + (slice * gapMs) / slices - performance.now();
    if (wait >= 1) await sleep(wait);
    for (let i = slice; i < sessions.length; i += slices) sessions[i]!.create();
  }
}

/** Streams a short reply on a few sessions so that the server's code is warm before the baseline. */
async function warmUp(url: string, headers: Record<string, string> | undefined): Promise<void> {
  const sessions = await openAll(url, WARMUP_SESSIONS, headers);
  for (const session of sessions) session.create({ max_output_tokens: WARMUP_TOKENS });
  await Promise.all(sessions.map((s) => s.done));
  for (const session of sessions) session.socket.terminate();
  // Warm-up replies end `response.incomplete` (max_output_tokens) or, when shorter, completed.
  const failure = sessions.find((s) => s.error && !s.error.startsWith("response.incomplete"));
  if (failure) throw new Error(`warm-up failed: ${failure.error}`);
}

const max = (values: readonly number[]): number => values.reduce((m, v) => Math.max(m, v), -Infinity);
const min = (values: readonly number[]): number => values.reduce((m, v) => Math.min(m, v), Infinity);

/** One point of the curve: a fresh server, `count` sessions streaming `tokens` tokens each. */
async function measure(
  count: number,
  options: { tokens: number; rate: number; headers: Record<string, string> | undefined },
): Promise<ScalePoint> {
  const wallStart = performance.now();
  const gapMs = 1000 / options.rate;
  // Every session streams at once: the script engine has no compute to share, and the figure is
  // about the transport, so no response waits for an engine slot (the default capacity is 64).
  const capacity = Math.max(count, WARMUP_SESSIONS);
  const server = await ScaleServer.start({ tokens: options.tokens, rate: options.rate, capacity });
  const serverOpenFileLimit = openFileLimit(server.pid);
  // Resolves undefined if the server dies, so that no wait on it hangs.
  const orExit = <T>(promise: Promise<T>): Promise<T | undefined> =>
    Promise.race([promise, server.exited.then(() => undefined)]);
  let sessions: Session[] = [];
  try {
    await warmUp(server.url, options.headers);
    // Let the warm-up sockets close on the server before the baseline.
    while ((await server.stats()).connections > 0) await sleep(10);
    const before = await server.stats({ gc: true });

    const connectStart = performance.now();
    sessions = await openAll(server.url, count, options.headers);
    const connectMs = performance.now() - connectStart;

    await server.stats({ reset: true });
    const cpuStart = process.cpuUsage();
    const clientLoop = monitorEventLoopDelay({ resolution: 5 });
    clientLoop.enable();
    const machineStart = machineBusyMs();
    const streamStart = performance.now();
    const nominalMs = options.tokens * gapMs;
    const midway = sleep(nominalMs / 2).then(() => orExit(server.stats()));
    await createAll(sessions, gapMs);
    const deadline = nominalMs * 3 + 10_000;
    let timer: NodeJS.Timeout | undefined;
    const finished = await Promise.race([
      Promise.all(sessions.map((s) => s.done)).then(() => true),
      new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), deadline))),
      server.exited.then(() => false as const),
    ]);
    clearTimeout(timer);
    const streamMs = performance.now() - streamStart;
    const clientCpu = clientCpuMs(cpuStart);
    clientLoop.disable();
    const machineEnd = machineBusyMs();
    const during = await midway;
    const window = await orExit(server.stats());
    // Every response has ended but the connections are still open: what they keep after a GC.
    const idle = finished ? await orExit(server.stats({ gc: true })) : undefined;
    if (!finished) {
      const why = window ? `no terminal event within ${fmt(deadline)} ms` : "the server exited";
      for (const session of sessions) session.end(why);
    }

    const gaps: number[] = [];
    const steadyGaps: number[] = [];
    const stretches: number[] = [];
    const ttfts: number[] = [];
    const errors: string[] = [];
    const nominalStream = (options.tokens - 1) * gapMs;
    const streaming = sessions.filter((s) => s.tokens > 0);
    // Steady state: every session has had its first token and none has had its last.
    const steadyFrom = max(streaming.map((s) => s.arrivals[0]!));
    const steadyTo = min(streaming.map((s) => s.arrivals.at(-1)!));
    for (const session of sessions) {
      const arrivals = session.arrivals;
      for (let i = 1; i < arrivals.length; i++) {
        const gap = arrivals[i]! - arrivals[i - 1]!;
        gaps.push(gap);
        if (arrivals[i - 1]! >= steadyFrom && arrivals[i]! <= steadyTo) steadyGaps.push(gap);
      }
      if (arrivals.length > 0) ttfts.push(arrivals[0]! - session.sentAt);
      if (arrivals.length > 1) stretches.push((arrivals.at(-1)! - arrivals[0]!) / nominalStream);
      if (session.error) errors.push(session.error);
      else if (session.tokens !== options.tokens)
        errors.push(`received ${session.tokens} of ${options.tokens} tokens`);
    }
    if (!window) errors.push(`the server exited: ${server.stderr.trim().slice(-500)}`);
    const rssDuring = during?.rssBytes ?? Number.NaN;
    const heapDuring = during?.heapUsedBytes ?? Number.NaN;
    return {
      sessions: count,
      tokensPerSession: options.tokens,
      tokensReceived: sessions.reduce((sum, s) => sum + s.tokens, 0),
      tokensExpected: count * options.tokens,
      gaps: gaps.length,
      gapP50Ms: percentile(gaps, 0.5),
      gapP99Ms: percentile(gaps, 0.99),
      gapP999Ms: percentile(gaps, 0.999),
      gapMaxMs: max(gaps),
      steadyGaps: steadyGaps.length,
      steadyGapP50Ms: percentile(steadyGaps, 0.5),
      steadyGapP99Ms: percentile(steadyGaps, 0.99),
      steadyGapMaxMs: max(steadyGaps),
      stretchP50: percentile(stretches, 0.5),
      stretchMax: max(stretches),
      ttftP50Ms: percentile(ttfts, 0.5),
      ttftP99Ms: percentile(ttfts, 0.99),
      rssBeforeBytes: before.rssBytes,
      rssDuringBytes: rssDuring,
      heapUsedBeforeBytes: before.heapUsedBytes,
      heapUsedDuringBytes: heapDuring,
      rssBytesPerSession: (rssDuring - before.rssBytes) / count,
      heapBytesPerSession: (heapDuring - before.heapUsedBytes) / count,
      rssIdleBytes: idle?.rssBytes ?? Number.NaN,
      heapUsedIdleBytes: idle?.heapUsedBytes ?? Number.NaN,
      heapBytesPerIdleSession: ((idle?.heapUsedBytes ?? Number.NaN) - before.heapUsedBytes) / count,
      peakRssBytes: window?.peakRssBytes,
      serverOpenFileLimit,
      serverCpuPercent: window ? (window.cpuMs / window.windowMs) * 100 : Number.NaN,
      serverLoopDelayP99Ms: window?.loopDelayP99Ms ?? Number.NaN,
      serverLoopDelayMaxMs: window?.loopDelayMaxMs ?? Number.NaN,
      clientCpuPercent: (clientCpu / streamMs) * 100,
      clientLoopDelayP99Ms: clientLoop.percentile(99) / 1e6,
      clientLoopDelayMaxMs: clientLoop.max / 1e6,
      otherCpuPercent:
        machineStart === undefined || machineEnd === undefined || !window
          ? Number.NaN
          : ((machineEnd - machineStart - clientCpu - window.cpuMs) / streamMs) * 100,
      connectMs,
      streamMs,
      wallMs: performance.now() - wallStart,
      errors: errors.length,
      errorSamples: [...new Set(errors)].slice(0, 5),
    };
  } finally {
    for (const session of sessions) session.socket.terminate();
    await server.stop();
  }
}

const kib = (bytes: number): string => `${fmt(bytes / 1024)} KiB`;
const mib = (bytes: number): string => `${fmt(bytes / 2 ** 20, 1)} MiB`;

export interface SessionScaleOptions {
  /** Fewer tokens per session. */
  quick: boolean;
  /** Extra headers on every WebSocket upgrade (an Authorization header, say). */
  headers?: Record<string, string>;
  /** Tokens per second of each stream (default 10). */
  rate?: number;
  /** Session counts of the curve (default 10, 100, 1,000). */
  sessions?: readonly number[];
  /** Tokens per session (default 100, quick 40). */
  tokens?: number;
}

export async function sessionScale(options: SessionScaleOptions, log: Log): Promise<FigureResult> {
  const rate = options.rate ?? RATE;
  const counts = options.sessions ?? SESSION_COUNTS;
  const tokens = options.tokens ?? (options.quick ? QUICK_TOKENS : TOKENS);
  const gapMs = 1000 / rate;
  const goalMs = p99Goal(gapMs);
  const limit = openFileLimit();
  log(
    `  ${fmt(rate)} tokens/s per session (nominal gap ${ms(gapMs)}), ${tokens} tokens each; ` +
      `engine capacity = sessions; server in its own process; open-file limit ${limit === undefined ? "unknown" : fmt(limit)}`,
  );
  const needed = max(counts) + 100;
  if (limit !== undefined && limit < needed)
    log(`  warning: ${fmt(needed)} sockets need a higher open-file limit (ulimit -n)`);
  const points: ScalePoint[] = [];
  for (const count of counts) {
    const point = await measure(count, { tokens, rate, headers: options.headers });
    points.push(point);
    const share = (point.steadyGaps / Math.max(1, point.gaps)) * 100;
    log(
      `  ${fmt(count).padStart(5)} sessions: steady-state gap p50 ${ms(point.steadyGapP50Ms)}, ` +
        `p99 ${ms(point.steadyGapP99Ms)}, max ${ms(point.steadyGapMaxMs)} (${fmt(share)}% of gaps); ` +
        `all gaps p99 ${ms(point.gapP99Ms)}, max ${ms(point.gapMaxMs)}; TTFT p50 ${ms(point.ttftP50Ms)}, ` +
        `p99 ${ms(point.ttftP99Ms)}; stream length ×${fmt(point.stretchP50, 3)} of nominal ` +
        `(worst ×${fmt(point.stretchMax, 3)}); errors ${point.errors}; ${fmt(point.wallMs / 1000, 1)} s`,
    );
    log(
      `         server RSS ${mib(point.rssBeforeBytes)} → ${mib(point.rssDuringBytes)} mid-stream ` +
        `(${kib(point.rssBytesPerSession)}/session; heap ${kib(point.heapBytesPerSession)}/session), ` +
        `${mib(point.rssIdleBytes)} idle after GC (heap ${kib(point.heapBytesPerIdleSession)}/session); ` +
        `CPU server ${fmt(point.serverCpuPercent)}%, client ${fmt(point.clientCpuPercent)}%, ` +
        `other ${fmt(point.otherCpuPercent)}%; server loop delay p99 ${ms(point.serverLoopDelayP99Ms)}, ` +
        `max ${ms(point.serverLoopDelayMaxMs)}; client loop delay p99 ${ms(point.clientLoopDelayP99Ms)}, ` +
        `max ${ms(point.clientLoopDelayMaxMs)}`,
    );
    for (const sample of point.errorSamples) log(`      error: ${sample}`);
    if (point.otherCpuPercent > 25)
      log(`      warning: other processes used ${fmt(point.otherCpuPercent)}% of a core meanwhile`);
    if (point.serverOpenFileLimit !== undefined && point.serverOpenFileLimit < count + 100)
      log(`      warning: the server's open-file limit is ${fmt(point.serverOpenFileLimit)}`);
  }
  const last = points.at(-1)!;
  const errors = points.reduce((sum, p) => sum + p.errors, 0);
  const curve = points.map((p) => `${fmt(p.sessions)}: ${fmt(p.steadyGapP99Ms, 1)}`).join(" / ");
  return {
    row: {
      figure: `9. ${fmt(last.sessions)} concurrent WebSocket sessions`,
      spark: `p99 gap ${ms(last.steadyGapP99Ms)} at ${fmt(last.sessions)} (all gaps ${ms(last.gapP99Ms)})`,
      reference: `nominal ${ms(gapMs)}`,
      comparison: `${curve} ms p99; mem ${kib(last.rssBytesPerSession)}/session; errors ${errors}`,
      goal: `p99 ≤ 1.5× nominal, 0 errors`,
      met: errors === 0 && points.every((p) => p.steadyGapP99Ms <= goalMs),
    },
    data: {
      rate,
      nominalGapMs: gapMs,
      tokensPerSession: tokens,
      p99GoalMs: goalMs,
      openFileLimit: limit,
      points,
    },
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const { values } = parseArgs({
    options: {
      quick: { type: "boolean", default: false },
      rate: { type: "string" },
      sessions: { type: "string" },
      tokens: { type: "string" },
    },
  });
  const log: Log = (line) => console.log(line);
  const started = performance.now();
  log(`9. Concurrent WebSocket sessions${values.quick ? " (quick)" : ""}`);
  const { row } = await sessionScale(
    {
      quick: values.quick,
      ...(values.rate ? { rate: Number(values.rate) } : {}),
      ...(values.sessions ? { sessions: values.sessions.split(",").map(Number) } : {}),
      ...(values.tokens ? { tokens: Number(values.tokens) } : {}),
    },
    log,
  );
  log(`\n${((performance.now() - started) / 1000).toFixed(1)} s\n`);
  log(
    table(
      ["Figure", "Spark (server)", "Reference", "Comparison", "Goal", "Met"],
      [[row.figure, row.spark, row.reference, row.comparison, row.goal, row.met ? "yes" : "NO"]],
    ),
  );
}
