/**
 * The llama engine out of process: Spark supervises a `llama-server` child (llama.cpp's own server,
 * built from the same sources node-llama-cpp ships: `bench/peer/build-llama-server.sh`) and talks to
 * it with the openai engine, behind the same seam.
 *
 * Why: in process, node-llama-cpp returns to JavaScript twice per token (a decode and a sampling
 * step, each a libuv thread-pool job), which costs a model that decodes a token in 0.3 ms about a
 * third of its speed, and ggml's second thread fights the JavaScript thread on a small machine.
 * llama-server's loop stays in C++; Spark's own per-token work (parsing its stream, events, SSE)
 * then runs beside the decode in another process instead of between two decodes (figure 26 in
 * BENCHMARKS.md measures both designs against a bare llama-server).
 *
 * Contract: `start()` spawns the child on a free loopback port with the model, thread count,
 * context per sequence and sequences of the in-process engine's settings, waits until its `/health`
 * answers, then serves through an `OpenAIEngine` on its `/v1`. The child exiting makes the engine not
 * ready (`status().detail` says so; requests get 503 from the core). `close()` stops the child.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createServer } from "node:net";
import { basename } from "node:path";
import type { Engine, EngineModel, EnginePart, EngineRequest, EngineStatus } from "../../engine/types.js";
import { SparkError } from "../../protocol/errors.js";
import { OpenAIEngine } from "../openai/openai-engine.js";

export interface LlamaServerEngineOptions {
  /** The `llama-server` executable. */
  binary: string;
  /** Resolves the GGUF file to load (may download); called once by `start()`. */
  modelPath: () => Promise<string>;
  /** Model ids clients may use; the first is the default. Defaults to `spark` and the file's name. */
  aliases?: readonly string[];
  threads?: number;
  /** Context per sequence, in tokens (llama-server's `-c` is for all sequences together). */
  contextSize?: number;
  sequences?: number;
  /** Longest wait for the child's `/health` (loading a large model takes a while). Default 10 minutes. */
  startTimeoutMs?: number;
  log?: (line: string) => void;
}

const DEFAULT_SEQUENCES = 4;
const DEFAULT_CONTEXT = 8192;

export class LlamaServerEngine implements Engine {
  readonly specificationVersion = "v1";
  readonly kind = "llama";
  readonly capabilities = {
    functionTools: true,
    customTools: true,
    prefixReuse: true,
    summaries: true,
    fim: true,
  };
  #status: EngineStatus = { ready: false, detail: "not started" };
  #child: ChildProcess | undefined;
  #inner: OpenAIEngine | undefined;
  #models: EngineModel[] = [];
  #closing = false;

  constructor(private readonly options: LlamaServerEngineOptions) {}

  async start(): Promise<void> {
    const log = this.options.log ?? (() => {});
    try {
      this.#status = { ready: false, detail: "resolving model" };
      const path = await this.options.modelPath();
      const port = await freePort();
      const sequences = this.options.sequences ?? DEFAULT_SEQUENCES;
      const context = this.options.contextSize ?? DEFAULT_CONTEXT;
      const args = [
        ...["-m", path, "--host", "127.0.0.1", "--port", String(port)],
        ...["-c", String(context * sequences), "-np", String(sequences)],
        // node-llama-cpp's default, so that both designs compute the same thing.
        ...["-fa", "off", "--no-webui"],
        ...(this.options.threads !== undefined
          ? ["-t", String(this.options.threads), "-tb", String(this.options.threads)]
          : []),
      ];
      this.#status = { ready: false, detail: `starting ${basename(this.options.binary)} with ${path}` };
      const child = spawn(this.options.binary, args, { stdio: ["ignore", "ignore", "pipe"] });
      this.#child = child;
      let tail = "";
      child.stderr!.setEncoding("utf8");
      child.stderr!.on("data", (chunk: string) => {
        tail = (tail + chunk).slice(-2000);
      });
      const exited = new Promise<never>((_, reject) => {
        child.once("error", reject);
        child.once("exit", (code, signal) => {
          const why = `llama-server exited (${signal ?? code})${tail ? `: ${lastLines(tail)}` : ""}`;
          if (!this.#closing) {
            this.#status = { ready: false, detail: why };
            log(`llama: ${why}`);
          }
          reject(new Error(why));
        });
      });
      exited.catch(() => {});
      const url = `http://127.0.0.1:${port}`;
      await Promise.race([exited, waitHealthy(url, this.options.startTimeoutMs ?? 600_000)]);
      const inner = new OpenAIEngine({ baseUrl: `${url}/v1`, api: "chat", log });
      await inner.start();
      this.#inner = inner;
      const aliases = this.options.aliases ?? ["spark", basename(path).replace(/\.gguf$/i, "")];
      this.#models = aliases.map((id) => ({ id, ownedBy: "spark-llama", contextSize: context }));
      log(
        `llama: ${basename(path)} in llama-server (${this.options.binary}, pid ${child.pid}), ` +
          `${this.options.threads ?? "llama-server's default"} thread(s), context ${context} × ${sequences} sequences`,
      );
      if (child.exitCode === null) this.#status = { ready: true, detail: "ready" };
    } catch (error) {
      this.#status = {
        ready: false,
        detail: `failed: ${error instanceof Error ? error.message : String(error)}`,
      };
      this.#child?.kill("SIGKILL");
      throw error;
    }
  }

  status(): EngineStatus {
    return this.#status;
  }

  models(): readonly EngineModel[] {
    return this.#models;
  }

  resolveModel(name: string): string | undefined {
    if (!this.#status.ready)
      return name === "spark" || this.options.aliases?.includes(name) ? name : undefined;
    return this.#models.some((model) => model.id === name) ? name : undefined;
  }

  async countTokens(text: string): Promise<number> {
    return this.#ready().countTokens(text);
  }

  async *stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    // llama-server serves one model: every alias is it.
    yield* this.#ready().stream({ ...request, model: "spark" }, signal);
  }

  #ready(): OpenAIEngine {
    if (!this.#status.ready || !this.#inner)
      throw SparkError.unavailable(`The llama engine is not ready: ${this.#status.detail}.`);
    return this.#inner;
  }

  async close(): Promise<void> {
    this.#closing = true;
    this.#status = { ready: false, detail: "closed" };
    await this.#inner?.close();
    const child = this.#child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

function lastLines(text: string): string {
  return text.trim().split("\n").slice(-3).join(" | ");
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Polls `/health` until it answers 200 (llama-server answers 503 while it loads the model). */
async function waitHealthy(url: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      const response = await fetch(`${url}/health`, { signal: AbortSignal.timeout(5000) });
      await response.body?.cancel();
      if (response.ok) return;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline)
      throw new Error(`llama-server did not become healthy in ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
