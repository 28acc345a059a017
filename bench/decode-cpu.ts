/**
 * Figure 3b: CPU time per token of the tiny model's decode, which a loaded machine blurs far less
 * than tokens per second. Two child processes (bench/decode-child.ts), each alone in its process:
 * a bare node-llama-cpp `sequence.evaluate` loop, and the server (`SparkServer` with the in-process
 * `LlamaEngine`), both at the same thread count. This process is only the client (`SseClient` on
 * node:http, its own CPU not counted).
 *
 * Variants, in rounds whose order alternates: the bare loop; the engine called inside the server's
 * process without HTTP; a streaming Responses request; the same as Chat Completions. Every
 * generation runs to a fixed length (`ignore_eos`). For each round the child's CPU counters are
 * read before and after: the whole process's (every thread: the event loop, llama.cpp's, libuv's,
 * V8's) and the main thread's alone (Linux `/proc/thread-self/schedstat`).
 *
 * Goals (issue 32): the server process's CPU per token ≤ 1.10× the bare loop's, and Spark's own
 * main-thread CPU per token (the server's minus the engine's in process) ≤ 30 µs.
 */
import { fork, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { fmt, summarize, type FigureResult, type Log, type Summary } from "./kit/report.js";
import { SseClient, type StreamPath } from "./kit/sse-client.js";

const CHILD = fileURLToPath(new URL("./decode-child.ts", import.meta.url));

export const DECODE_PROMPT = "Write a function in TypeScript that parses a CSV line into fields.";

/** What the decode child is asked over IPC (see bench/decode-child.ts). */
export type ChildRequest = { id: number } & (
  { cmd: "cpu" } | { cmd: "bare"; tokens: number } | { cmd: "engine"; tokens: number }
);
type ChildAsk = { cmd: "cpu" } | { cmd: "bare" | "engine"; tokens: number };
interface ChildCpu {
  process: number;
  main: number;
}

type Reply = { id: number; error?: string } & Record<string, unknown>;

/** A decode child over IPC: one request at a time, answered by id. */
class Child {
  readonly #pending = new Map<number, (reply: Reply) => void>();
  #next = 0;
  private constructor(readonly process: ChildProcess) {
    process.on("message", (reply: Reply) => {
      const resolve = this.#pending.get(reply.id);
      this.#pending.delete(reply.id);
      resolve?.(reply);
    });
  }

  static async start(
    mode: "bare" | "server",
    modelPath: string,
    threads: number,
  ): Promise<{ child: Child; url: string }> {
    const child = fork(CHILD, [mode, modelPath, String(threads)], {
      execArgv: ["--import", "tsx"],
      stdio: ["ignore", "inherit", "inherit", "ipc"],
    });
    const ready = await new Promise<{ url?: string }>((resolve, reject) => {
      child.once("message", resolve);
      child.once("exit", (code) => reject(new Error(`the ${mode} child exited with ${code}`)));
    });
    return { child: new Child(child), url: ready.url ?? "" };
  }

  async ask(request: ChildAsk): Promise<Reply> {
    const id = this.#next++;
    const reply = await new Promise<Reply>((resolve) => {
      this.#pending.set(id, resolve);
      this.process.send({ ...request, id });
    });
    if (reply.error) throw new Error(reply.error);
    return reply;
  }

  async cpu(): Promise<ChildCpu> {
    const reply = await this.ask({ cmd: "cpu" });
    return { process: reply.process as number, main: reply.main as number };
  }

  stop(): void {
    this.process.disconnect();
  }
}

export interface DecodeCpuOptions {
  tokens: number;
  rounds: number;
  threads: number;
}

interface Sample {
  /** Process CPU per token, µs. */
  process: number;
  /** Main-thread CPU per token, µs. */
  main: number;
  /** Tokens per second over the round (wall time, client side for the server's). */
  rate: number;
}

type Variant = "bare" | "engine" | "responses" | "chat";

export async function decodeCpu(
  modelPath: string,
  options: DecodeCpuOptions,
  log: Log,
): Promise<FigureResult> {
  const bare = await Child.start("bare", modelPath, options.threads);
  const server = await Child.start("server", modelPath, options.threads);
  const client = new SseClient(server.url);
  const samples: Record<Variant, Sample[]> = { bare: [], engine: [], responses: [], chat: [] };
  const streamed = async (path: StreamPath): Promise<{ tokens: number; ms: number }> => {
    const body =
      path === "/v1/chat/completions"
        ? { messages: [{ role: "user", content: DECODE_PROMPT }], max_tokens: options.tokens }
        : { input: DECODE_PROMPT, max_output_tokens: options.tokens, store: false };
    const result = await client.stream({ model: "spark", temperature: 0, ignore_eos: true, ...body }, path);
    const tokens = result.terminal?.response.usage?.output_tokens ?? 0;
    if (tokens !== options.tokens)
      throw new Error(`${path} produced ${tokens} tokens, not ${options.tokens}`);
    return { tokens, ms: result.endedAt - result.startedAt };
  };
  const inChild =
    (child: Child, cmd: "bare" | "engine") => async (): Promise<{ tokens: number; ms: number }> => {
      const started = performance.now();
      const reply = await child.ask({ cmd, tokens: options.tokens });
      return { tokens: reply.tokens as number, ms: performance.now() - started };
    };
  const variants: [Variant, Child, () => Promise<{ tokens: number; ms: number }>][] = [
    ["bare", bare.child, inChild(bare.child, "bare")],
    ["engine", server.child, inChild(server.child, "engine")],
    ["responses", server.child, () => streamed("/v1/responses")],
    ["chat", server.child, () => streamed("/v1/chat/completions")],
  ];
  try {
    for (let round = -1; round < options.rounds; round++) {
      const order = round % 2 === 0 ? variants : [...variants].reverse();
      for (const [name, child, run] of order) {
        const before = await child.cpu();
        const { tokens, ms } = await run();
        const after = await child.cpu();
        if (round < 0) continue;
        samples[name].push({
          process: (after.process - before.process) / tokens,
          main: (after.main - before.main) / tokens,
          rate: (tokens / ms) * 1000,
        });
      }
    }
  } finally {
    client.close();
    bare.child.stop();
    server.child.stop();
  }
  const p50 = (name: Variant, key: keyof Sample): number => summarize(samples[name].map((s) => s[key])).p50;
  const summary = (name: Variant, key: keyof Sample): Summary => summarize(samples[name].map((s) => s[key]));
  for (const name of Object.keys(samples) as Variant[]) {
    log(
      `  ${name.padEnd(9)} process CPU ${fmt(p50(name, "process"))} µs/token (range ${fmt(summary(name, "process").min)}–${fmt(summary(name, "process").max)}), ` +
        `main thread ${fmt(p50(name, "main"))} µs/token, ${fmt(p50(name, "rate"))} tok/s`,
    );
  }
  // Round by round, so that the machine's drift cancels.
  const paired = (name: Variant): number =>
    summarize(samples[name].map((s, i) => s.process / samples.bare[i]!.process)).p50;
  const processRatio = paired("responses");
  const chatRatio = paired("chat");
  const sparkMain = summarize(samples.responses.map((s, i) => s.main - samples.engine[i]!.main)).p50;
  const chatMain = summarize(samples.chat.map((s, i) => s.main - samples.engine[i]!.main)).p50;
  log(
    `  server process over bare, round by round: Responses ${fmt(processRatio, 2)}×, Chat Completions ${fmt(chatRatio, 2)}×, ` +
      `engine alone ${fmt(paired("engine"), 2)}×; Spark's own main-thread CPU (server − engine in process): ` +
      `Responses ${fmt(sparkMain, 1)} µs/token, Chat Completions ${fmt(chatMain, 1)} µs/token`,
  );
  return {
    row: {
      figure: "3b. llama decode CPU per token",
      spark: `${fmt(p50("responses", "process"))} µs/token process, +${fmt(sparkMain, 1)} µs main thread`,
      reference: `bare: ${fmt(p50("bare", "process"))} µs/token`,
      comparison: `${fmt(processRatio, 2)}× bare (chat ${fmt(chatRatio, 2)}×)`,
      goal: "≤ 1.10× bare; ≤ 30 µs main thread",
      met: processRatio <= 1.1 && sparkMain <= 30,
    },
    data: {
      unit: "CPU microseconds per output token",
      tokens: options.tokens,
      rounds: options.rounds,
      threads: options.threads,
      samples,
      processRatio,
      chatProcessRatio: chatRatio,
      sparkMainMicrosPerToken: sparkMain,
      chatSparkMainMicrosPerToken: chatMain,
    },
  };
}
