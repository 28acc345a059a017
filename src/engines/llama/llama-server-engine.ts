/**
 * The llama engine out of process: Spark supervises a `llama-server` child (llama.cpp's own server:
 * the user's own build, from brew, apt, winget or a CUDA/Metal release, or the one
 * `bench/peer/build-llama-server.sh` builds from the sources node-llama-cpp ships) and talks to it
 * with the openai engine, behind the same seam.
 *
 * Why: in process, node-llama-cpp returns to JavaScript twice per token (a decode and a sampling
 * step, each a libuv thread-pool job), which costs a model that decodes a token in 0.3 ms about a
 * third of its speed, and ggml's second thread fights the JavaScript thread on a small machine.
 * llama-server's loop stays in C++; Spark's own per-token work runs beside the decode in another
 * process (figure 26 in BENCHMARKS.md measures both designs against a bare llama-server).
 *
 * Contract:
 * - `start()` resolves the model, picks the decode threads (given, else the fastest of 1, half and
 *   all cores, each timed on a short decode in a child of its own, as the in-process engine times
 *   them; a GPU build that offloads the model skips this), starts the child (`llama-server-child.ts`:
 *   a private Unix socket where the binary has them, else a port it binds itself; a random API key;
 *   dies with Spark; restarted after a crash with the engine not ready meanwhile) with the model,
 *   threads, context per sequence, sequences, and the speculative and vision options below, then
 *   serves through an `OpenAIEngine` on its `/v1`, a new connection per request (the child closes
 *   each after a stream).
 * - Token counts are the model's own (`/tokenize`).
 * - Speculation uses llama-server's own options, set per server: `inputLookup` starts it with its
 *   prompt-lookup decoding (`--spec-type ngram-simple`), `draftModelPath` with a draft model. A
 *   request's `speculation.input_lookup` that asks for the other setting, and a `prediction`
 *   (llama-server has no Predicted Outputs), are refused with a 400 naming the parameter.
 * - Images: with a projector (`mmproj`) the model sees (`capabilities.vision`), and images go to it
 *   as Chat Completions `image_url` parts; without one, a request with images is refused (400
 *   `image_unsupported`), as the in-process engine does.
 * - Streamed Chat Completions relay llama-server's own bytes to the client (`relayChat`): the same
 *   wire, with the client's model name echoed, so Spark reads only the events that end the stream.
 * - `close()` stops the child and its restarts.
 */
import { availableParallelism } from "node:os";
import { basename } from "node:path";
import {
  carriesImage,
  type ChatRelay,
  type Engine,
  type EngineModel,
  type EnginePart,
  type EngineRequest,
  type EngineStatus,
} from "../../engine/types.js";
import { SparkError } from "../../protocol/errors.js";
import { OpenAIEngine } from "../openai/openai-engine.js";
import {
  describeAddress,
  LlamaServerChild,
  supportsUnixSocket,
  type ChildAddress,
  type LlamaServerChildOptions,
} from "./llama-server-child.js";
import {
  failedStatus,
  fastestThreads,
  modelAliases,
  resolveServedName,
  servedModels,
  threadCandidates,
} from "./model-setup.js";

export interface LlamaServerEngineOptions {
  /** The `llama-server` executable. */
  binary: string;
  /** Resolves the GGUF file to load (may download); called once by `start()`. */
  modelPath: () => Promise<string>;
  /** Model ids clients may use; the first is the default. Defaults to `spark` and the file's name. */
  aliases?: readonly string[];
  /** Decode threads; when absent, the fastest of the candidates is measured at start. */
  threads?: number;
  /** Context per sequence, in tokens (llama-server's `-c` is for all sequences together). */
  contextSize?: number;
  sequences?: number;
  /** A multimodal projector (llama-server's `--mmproj`): the model sees images. */
  mmproj?: string;
  /** llama-server's prompt-lookup decoding for every request (`--spec-type ngram-simple`). */
  inputLookup?: boolean;
  /** A draft model of the same vocabulary for speculative decoding (`--spec-draft-model`). */
  draftModelPath?: string;
  /** Longest wait for the child's `/health` (loading a large model takes a while). Default 10 minutes. */
  startTimeoutMs?: number;
  /**
   * How the child is tied to Spark's life and restarted, and whether it listens on a Unix socket
   * (default: where the binary supports it).
   */
  child?: Pick<LlamaServerChildOptions, "watchdog" | "restartDelayMs" | "maxRestartDelayMs" | "socket">;
  log?: (line: string) => void;
}

const DEFAULT_SEQUENCES = 4;
const UPSTREAM_ALIAS = "spark";
const DEFAULT_CONTEXT = 8192;
/** Tokens decoded per thread-count candidate. */
const CALIBRATION_TOKENS = 25;

export class LlamaServerEngine implements Engine {
  readonly specificationVersion = "v1";
  readonly kind = "llama";
  readonly capabilities: Engine["capabilities"];
  #status: EngineStatus = { ready: false, detail: "not started" };
  #child: LlamaServerChild | undefined;
  /** Every child started and not yet closed (calibration's too): `close()` stops them all, even mid-start. */
  readonly #live = new Set<LlamaServerChild>();
  #inner: OpenAIEngine | undefined;
  #models: EngineModel[] = [];
  #closing = false;
  #threads: number | undefined;
  /** Whether children listen on a Unix socket (probed once at start). */
  #socket = false;

  constructor(private readonly options: LlamaServerEngineOptions) {
    this.capabilities = {
      functionTools: true,
      customTools: true,
      prefixReuse: true,
      summaries: true,
      fim: true,
      vision: options.mmproj !== undefined,
    };
  }

  /** The thread count in use (after calibration). */
  get threads(): number | undefined {
    return this.#threads;
  }

  /** Where the child listens, while it runs (its API needs the key Spark holds). */
  get childAddress(): ChildAddress | undefined {
    return this.#child?.address;
  }

  /** The child's process id, while it runs. */
  get pid(): number | undefined {
    return this.#child?.pid;
  }

  async start(): Promise<void> {
    const log = this.options.log ?? (() => {});
    try {
      this.#status = { ready: false, detail: "resolving model" };
      const [path, socket] = await Promise.all([
        this.options.modelPath(),
        this.options.child?.socket ?? supportsUnixSocket(this.options.binary),
      ]);
      this.#socket = socket;
      const sequences = this.options.sequences ?? DEFAULT_SEQUENCES;
      const context = this.options.contextSize ?? DEFAULT_CONTEXT;
      this.#status = { ready: false, detail: `measuring decode threads for ${basename(path)}` };
      const threads = this.options.threads ?? (await this.#calibrateThreads(path, log));
      this.#threads = threads;
      const child = this.#newChild([
        ...this.#modelArgs(path, threads),
        ...["-c", String(context * sequences), "-np", String(sequences)],
        // The name in its chunks (and /v1/models): the usual request's own, so the relay renames nothing.
        ...["--alias", UPSTREAM_ALIAS],
        ...(this.options.mmproj !== undefined ? ["--mmproj", this.options.mmproj] : []),
        ...(this.options.inputLookup ? ["--spec-type", "ngram-simple"] : []),
        ...(this.options.draftModelPath !== undefined
          ? ["--spec-draft-model", this.options.draftModelPath]
          : []),
      ]);
      this.#status = { ready: false, detail: `starting ${basename(this.options.binary)} with ${path}` };
      this.#child = child;
      const address = await child.start();
      child.onExit((why) => {
        this.#status = { ready: false, detail: `${why}; restarting` };
        log(`llama: ${why}`);
        const inner = this.#inner;
        this.#inner = undefined;
        void inner?.close();
      });
      child.onReady((restarted) => {
        void this.#serve(restarted).then(
          () => log(`llama: llama-server is back (pid ${child.pid}, restart ${child.restarts})`),
          (error: unknown) => log(`llama: llama-server restarted but does not serve: ${String(error)}`),
        );
      });
      await this.#serve(address);
      this.#models = servedModels(modelAliases(this.options.aliases, path), context);
      log(
        `llama: ${basename(path)} in llama-server (${this.options.binary}, pid ${child.pid}, ${describeAddress(address)}), ` +
          `${threads} thread(s), context ${context} × ${sequences} sequences` +
          (this.options.mmproj !== undefined ? `, sees images (${basename(this.options.mmproj)})` : "") +
          (this.options.inputLookup ? ", input lookup on" : "") +
          (this.options.draftModelPath !== undefined
            ? `, draft model ${basename(this.options.draftModelPath)}`
            : ""),
      );
    } catch (error) {
      this.#status = failedStatus(error);
      if (this.#child) await this.#closeChild(this.#child);
      throw error;
    }
  }

  #newChild(args: string[]): LlamaServerChild {
    if (this.#closing) throw SparkError.unavailable("The llama engine is closed.", "engine_closed");
    const child = new LlamaServerChild({
      binary: this.options.binary,
      args,
      startTimeoutMs: this.options.startTimeoutMs ?? 600_000,
      ...this.options.child,
      socket: this.#socket,
      ...(this.options.log ? { log: this.options.log } : {}),
    });
    this.#live.add(child);
    return child;
  }

  async #closeChild(child: LlamaServerChild): Promise<void> {
    this.#live.delete(child);
    await child.close();
  }

  #modelArgs(path: string, threads: number): string[] {
    return [
      ...["-m", path, "-t", String(threads), "-tb", String(threads)],
      // node-llama-cpp's default, so that both designs compute the same thing.
      ...["-fa", "off", "--no-webui"],
    ];
  }

  /** Serves through the child at `address` (its first start, or a restart at a new address). */
  async #serve(address: ChildAddress): Promise<void> {
    const inner = new OpenAIEngine({
      upstreams: [
        {
          url: `${address.origin}/v1`,
          ...(address.socketPath !== undefined ? { socketPath: address.socketPath } : {}),
        },
      ],
      // The child closes every connection after a stream: a kept one could meet that close.
      keepAlive: false,
      apiKey: this.#child?.key ?? "",
      api: "chat",
      // Its chunks are what the client should see, once they carry the client's model name.
      relayChat: true,
      relayModel: UPSTREAM_ALIAS,
      ...(this.options.log ? { log: this.options.log } : {}),
    });
    await inner.start();
    if (this.#closing) {
      await inner.close();
      return;
    }
    this.#inner = inner;
    this.#status = { ready: true, detail: "ready" };
  }

  /**
   * Times a short decode for each candidate thread count (1, half the cores, all), each in a child
   * of its own with a small context, and returns the fastest. A GPU build that offloads the model
   * decodes there, where the CPU threads barely matter: the core count, without measuring.
   */
  async #calibrateThreads(path: string, log: (line: string) => void): Promise<number> {
    const cores = Math.max(1, availableParallelism());
    const measure = async (threads: number): Promise<number | { use: number }> => {
      const child = this.#newChild([...this.#modelArgs(path, threads), "-c", "512", "-np", "1"]);
      try {
        await child.start();
        if (child.offloaded) {
          log(`llama: llama-server runs the model on a GPU; using ${cores} CPU thread(s)`);
          return { use: cores };
        }
        return await decodeRate(child);
      } finally {
        await this.#closeChild(child);
      }
    };
    return fastestThreads(threadCandidates(cores), measure, log, "llama-server's decode speed");
  }

  status(): EngineStatus {
    return this.#status;
  }

  models(): readonly EngineModel[] {
    return this.#models;
  }

  resolveModel(name: string): string | undefined {
    const listed = this.#status.ready || this.#models.length > 0;
    return resolveServedName(name, listed, this.#models, this.options.aliases);
  }

  /** The model's own count, from llama-server's `/tokenize`. */
  async countTokens(text: string): Promise<number> {
    this.#ready();
    const response = await this.#child!.request("/tokenize", {
      method: "POST",
      body: JSON.stringify({ content: text, add_special: false }),
    });
    if (response.statusCode !== 200) {
      await response.body.dump();
      throw SparkError.unavailable(`llama-server's /tokenize answered ${response.statusCode}.`);
    }
    const body = (await response.body.json()) as { tokens?: unknown[] };
    return Array.isArray(body.tokens) ? body.tokens.length : 0;
  }

  validateRequest(request: EngineRequest): void {
    if (request.prediction !== undefined) {
      throw new SparkError(
        400,
        "invalid_request_error",
        "prediction_unsupported",
        "The llama engine in llama-server does not take Predicted Outputs (llama-server has none): " +
          "send the request without `prediction`, or start Spark with --input-lookup on, which drafts from the conversation's own text.",
        "prediction",
      );
    }
    const lookup = request.speculation?.inputLookup;
    if (lookup !== undefined && lookup !== (this.options.inputLookup ?? false)) {
      throw new SparkError(
        400,
        "invalid_request_error",
        "speculation_unsupported",
        `llama-server sets input lookup for the whole server, and this one runs with it ${this.options.inputLookup ? "on" : "off"}: ` +
          `send the request without speculation.input_lookup, or start Spark with --input-lookup ${lookup ? "on" : "off"}.`,
        "speculation.input_lookup",
      );
    }
    if (this.options.mmproj === undefined && carriesImage(request.items)) {
      throw new SparkError(
        400,
        "invalid_request_error",
        "image_unsupported",
        "This llama-server has no projector and cannot see images: start Spark with --mmproj FILE (the model's " +
          'multimodal projector), or send the image to a model configured with "vision": true.',
        "input",
      );
    }
  }

  async *stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    this.validateRequest(request);
    // llama-server serves one model: every alias is it.
    yield* this.#ready().stream({ ...request, model: "spark" }, signal);
  }

  /** Chat Completions streams relay llama-server's own bytes (`chat-relay.ts`). */
  relayChat(
    request: EngineRequest,
    options: { model: string; includeUsage: boolean },
    signal: AbortSignal,
  ): ChatRelay | undefined {
    // Not ready: the parts path says so (503) the usual way.
    if (!this.#status.ready || !this.#inner) return undefined;
    this.validateRequest(request);
    return this.#inner.relayChat(request, options, signal);
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
    await Promise.all([...this.#live].map((child) => this.#closeChild(child)));
  }
}

/** llama-server's own measure of a short greedy decode, in tokens per second. */
async function decodeRate(child: LlamaServerChild): Promise<number> {
  const response = await child.request("/completion", {
    method: "POST",
    body: JSON.stringify({
      prompt: "function add(a, b) {\n  return",
      n_predict: CALIBRATION_TOKENS,
      temperature: 0,
      ignore_eos: true,
      cache_prompt: false,
    }),
  });
  if (response.statusCode !== 200) {
    await response.body.dump();
    throw new Error(`llama-server's /completion answered ${response.statusCode}`);
  }
  const body = (await response.body.json()) as { timings?: { predicted_per_second?: unknown } };
  const rate = body.timings?.predicted_per_second;
  return typeof rate === "number" && Number.isFinite(rate) ? rate : 0;
}
