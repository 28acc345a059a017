/**
 * The server side of figure 9, in its own process so that its memory and CPU are measured apart
 * from the clients: a SparkServer with a ScriptEngine on 127.0.0.1, port 0.
 *
 *   node --expose-gc --import tsx bench/scale-server.ts '{"tokens":100,"rate":10,"capacity":1000}'
 *
 * Prints `{"url":"http://127.0.0.1:PORT"}` on stdout once listening. Then reads commands from stdin,
 * one JSON object a line, and answers each with one JSON line on stdout:
 *   {"id":1,"gc":true,"reset":true}  →  {"id":1,"stats":ServerStats}
 * `gc` collects garbage first (needs --expose-gc); `reset` starts a new window for the CPU time and
 * event-loop delay in the answer. The server stops when stdin ends or on SIGTERM.
 */
import { readFileSync } from "node:fs";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { createInterface } from "node:readline";
import { parseScript, ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer } from "../src/server/http-server.js";

export interface ScaleServerConfig {
  /** Tokens in the scripted reply (every response plays the same one). */
  tokens: number;
  /** Tokens per second of each stream. */
  rate: number;
  /** Responses the engine runs at once before new ones queue (SparkServer's default is 64). */
  capacity: number;
}

export interface ServerStats {
  /** Resident set size from /proc/self/status (VmRSS), else process.memoryUsage().rss. */
  rssBytes: number;
  /** Peak resident set size (VmHWM), when /proc is there. */
  peakRssBytes: number | undefined;
  heapUsedBytes: number;
  heapTotalBytes: number;
  externalBytes: number;
  arrayBuffersBytes: number;
  /** Open WebSocket connections and bytes queued for them but not yet written to the kernel. */
  connections: number;
  unsentBytes: number;
  /** Since the last reset: wall time, CPU time (user + system) and event-loop delay. */
  windowMs: number;
  cpuMs: number;
  loopDelayP50Ms: number;
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
}

/** A reply of `tokens` token-like pieces: the script engine splits "word word …" one word a piece. */
function scriptText(tokens: number): string {
  return Array.from({ length: tokens }, () => "word").join(" ");
}

function procStatusBytes(field: string): number | undefined {
  try {
    const match = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync("/proc/self/status", "utf8"));
    return match ? Number(match[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  const config = JSON.parse(process.argv[2] ?? "{}") as Partial<ScaleServerConfig>;
  const tokens = config.tokens ?? 100;
  const rate = config.rate ?? 10;
  const lines = parseScript(JSON.stringify({ output: [{ type: "message", text: scriptText(tokens) }] }));
  const engine = new ScriptEngine({ lines, rate });
  await engine.start();
  const server = new SparkServer({ engine, capacity: config.capacity ?? 64, host: "127.0.0.1", port: 0 });
  const url = await server.listen();

  const loop = monitorEventLoopDelay({ resolution: 5 });
  loop.enable();
  let windowStart = performance.now();
  let cpuStart = process.cpuUsage();

  const stats = (): ServerStats => {
    const memory = process.memoryUsage();
    const cpu = process.cpuUsage(cpuStart);
    const { connections, unsentBytes } = server.websocketStats();
    return {
      rssBytes: procStatusBytes("VmRSS") ?? memory.rss,
      peakRssBytes: procStatusBytes("VmHWM"),
      heapUsedBytes: memory.heapUsed,
      heapTotalBytes: memory.heapTotal,
      externalBytes: memory.external,
      arrayBuffersBytes: memory.arrayBuffers,
      connections,
      unsentBytes,
      windowMs: performance.now() - windowStart,
      cpuMs: (cpu.user + cpu.system) / 1000,
      loopDelayP50Ms: loop.percentile(50) / 1e6,
      loopDelayP99Ms: loop.percentile(99) / 1e6,
      loopDelayMaxMs: loop.max / 1e6,
    };
  };

  let stopping = false;
  const stop = async (): Promise<void> => {
    if (stopping) return;
    stopping = true;
    loop.disable();
    await server.close();
    process.exit(0);
  };
  process.once("SIGTERM", () => void stop());

  const input = createInterface({ input: process.stdin });
  input.on("line", (line) => {
    if (line.trim() === "") return;
    const command = JSON.parse(line) as { id: number; gc?: boolean; reset?: boolean };
    if (command.gc) {
      const gc = (globalThis as { gc?: () => void }).gc;
      // Twice: the first pass can leave garbage that only a second, full one returns.
      gc?.();
      gc?.();
    }
    const answer = stats();
    if (command.reset) {
      loop.reset();
      windowStart = performance.now();
      cpuStart = process.cpuUsage();
    }
    process.stdout.write(`${JSON.stringify({ id: command.id, stats: answer })}\n`);
  });
  input.once("close", () => void stop());

  process.stdout.write(`${JSON.stringify({ url, pid: process.pid, tokens, rate })}\n`);
}

await main();
