/**
 * The "openai" engine: forwards generation to an OpenAI-compatible upstream (vLLM, SGLang,
 * llama-server, Cerebras, OpenAI) over streaming Chat Completions or Responses, and translates the
 * upstream's SSE stream into engine parts. This file holds the engine itself (pool, discovery,
 * errors); each wire API lives in its own module (`chat-wire.ts`, `responses-wire.ts`), and the
 * SSE parsing in `sse-lines.ts`.
 *
 * Several upstreams (`upstreams`) are replicas of one model: `replica-pool.ts` routes each request
 * (prefix affinity bounded by load and latency), checks their health and ejects failing ones. A
 * request that fails before anything was yielded (connect error, reset, timeout, 5xx, 429, a
 * malformed stream) is retried once on another replica, unseen by the client; a failure after that
 * ends the stream with a SparkError, which the core turns into `response.failed`. A malformed stream
 * (`upstream_protocol_error`: invalid JSON, an event over the size bound, a stream cut before its
 * end) is the replica's fault like a reset, and counts toward its ejection; an error the upstream
 * itself streamed (`upstream_error`) is the response's, and does not. A replica's failure count
 * restarts only when a request completes on it, so one that starts answering and then breaks is
 * ejected too. The time to a request's first part is the replica's latency (see `prefix-router.ts`).
 *
 * On abort the upstream request is destroyed at once (its connection closed) and the stream ends
 * with a `finish` part of reason "cancelled" carrying whatever usage was seen (usually zeros).
 *
 * What an upstream sends is read within bounds, so a broken or hostile one costs bounded memory and
 * linear work: an SSE line or event over 8 MiB ends the stream with `upstream_protocol_error`, an
 * error body is read up to 64 KiB and the model list up to 8 MiB, the rest cut with the connection.
 */
import type { Dispatcher } from "undici";
import type { Registry } from "prom-client";
import type {
  ChatRelay,
  EmbeddingRequest,
  EmbeddingResult,
  Engine,
  EngineModel,
  EnginePart,
  EngineRequest,
  EngineStatus,
} from "../../engine/types.js";
import { SparkError } from "../../protocol/errors.js";
import type { OpenAIErrorType } from "../../protocol/errors.js";
import { ChatRelayScanner } from "./chat-relay.js";
import { chatWire } from "./chat-wire.js";
import { completionsWire } from "./completions-wire.js";
import { EMPTY_KEY, type PrefixKey, type RouterOptions } from "./prefix-router.js";
import { ReplicaPool, type HealthOptions, type Replica, type UpstreamTarget } from "./replica-pool.js";
import { responsesWire } from "./responses-wire.js";
import { formatBytes, SseParser, SseTooLargeError } from "./sse-lines.js";
import { isRecord, protocolError } from "./wire-common.js";
import type { Json, UpstreamWire } from "./wire-common.js";

export interface OpenAIEngineOptions {
  /** Base URL of the upstream API including its version prefix, e.g. `http://host:8000/v1`. */
  baseUrl?: string;
  /** Sent as `Authorization: Bearer <apiKey>` to `baseUrl`, and to every upstream without its own key; never included in any message. */
  apiKey?: string;
  /** Replicas of the upstream (instead of `baseUrl`), each with an optional weight and key. */
  upstreams?: readonly UpstreamTarget[];
  /** Upstream wire API. Default "chat" (Chat Completions), the most widely implemented. */
  api?: "chat" | "responses";
  /**
   * Upstream model used for the alias "spark". Default: the first id listed by
   * `GET {baseUrl}/models` at start(), else "spark" is passed through unchanged.
   */
  model?: string;
  /** Maximum number of pooled keep-alive connections per upstream. Default: unlimited. */
  connections?: number;
  /**
   * Reuse connections to the upstreams (default true). False opens one per request, for an
   * upstream that closes every connection after a streamed response (llama-server does): a request
   * sent on a kept connection could meet that close and fail before the upstream read it.
   */
  keepAlive?: boolean;
  /** Maximum wait in ms for the response headers and between two streamed body chunks. Default 300000. */
  timeoutMs?: number;
  /** How requests are spread over the replicas (`prefix-router.ts`). */
  routing?: RouterOptions;
  /** Active checks and ejection of failing replicas (`replica-pool.ts`). */
  health?: HealthOptions;
  /** A Prometheus registry (the server's) for the per-replica metrics. */
  registry?: Registry;
  /** Where ejections and recoveries are reported. */
  log?: (line: string) => void;
  /**
   * The upstream's Chat Completions chunks are what Spark's clients should see (it echoes the
   * requested model name: Spark's own llama-server child): streamed chat requests are relayed as
   * bytes (`relayChat`, `chat-relay.ts`). Not for other upstreams, whose chunks name their own model.
   */
  relayChat?: boolean;
  /** The model name the upstream writes in its chunks (its alias), replaced by the client's own. */
  relayModel?: string;
}

const ALIAS = "spark";
const DEFAULT_TIMEOUT_MS = 300_000;
/** Model discovery is best effort and must not hold start() for long. */
const DISCOVERY_TIMEOUT_MS = 10_000;
const MAX_UPSTREAM_MESSAGE = 500;
/** Most of a non-2xx body read for its error message; the rest is not waited for. */
const MAX_ERROR_BODY_BYTES = 64 * 1024;
/** Largest non-streamed JSON body accepted (the model list). */
const MAX_JSON_BODY_BYTES = 8 * 1024 * 1024;

const PROTOCOL_ERROR = "upstream_protocol_error";
const TIMEOUT_CODES = new Set(["UND_ERR_HEADERS_TIMEOUT", "UND_ERR_BODY_TIMEOUT"]);
const CLOSED_CODES = new Set(["UND_ERR_DESTROYED", "UND_ERR_CLOSED"]);

/** A failed attempt on one replica: the client's error, and what it says about the replica. */
class AttemptError extends Error {
  constructor(
    readonly error: SparkError,
    /** The replica is at fault (unreachable, reset, timed out, 5xx): counts toward its ejection. */
    readonly replicaFault: boolean,
    /** Another replica may well succeed (nothing was yielded yet). */
    readonly retryable: boolean,
  ) {
    super(error.message);
  }
}

export class OpenAIEngine implements Engine {
  readonly specificationVersion = "v1";
  readonly kind = "openai";
  /** `fim`: forwarded to the upstream's `/completions` (see completions-wire.ts). */
  readonly capabilities = {
    functionTools: true,
    customTools: true,
    prefixReuse: false,
    summaries: true,
    fim: true,
    structuredOutputs: true,
    logprobs: true,
  };

  readonly #replicas: ReplicaPool;
  readonly #wire: UpstreamWire;
  readonly #configuredModel: string | undefined;
  readonly #timeoutMs: number;
  /** The upstreams, safe to show. */
  readonly #displayUrls: string;
  #upstreamModels: EngineModel[] = [];
  #status: EngineStatus;
  #closed = false;
  readonly #relay: boolean;
  readonly #relayModel: string | undefined;

  constructor(options: OpenAIEngineOptions) {
    const targets: UpstreamTarget[] = options.upstreams
      ? options.upstreams.map((target) =>
          target.apiKey === undefined && options.apiKey !== undefined
            ? { ...target, apiKey: options.apiKey }
            : target,
        )
      : [{ url: options.baseUrl ?? "", ...(options.apiKey !== undefined ? { apiKey: options.apiKey } : {}) }];
    if (targets.length === 0) {
      throw new SparkError(
        500,
        "server_error",
        "invalid_upstream_url",
        "The openai engine needs an upstream.",
      );
    }
    this.#wire = (options.api ?? "chat") === "chat" ? chatWire : responsesWire;
    this.#configuredModel = options.model;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.#relay = options.relayChat === true;
    this.#relayModel = options.relayModel;
    this.#replicas = new ReplicaPool(targets, {
      timeoutMs: this.#timeoutMs,
      ...(options.connections !== undefined ? { connections: options.connections } : {}),
      ...(options.keepAlive !== undefined ? { keepAlive: options.keepAlive } : {}),
      ...(options.routing ? { routing: options.routing } : {}),
      ...(options.health ? { health: options.health } : {}),
      ...(options.registry ? { registry: options.registry } : {}),
      ...(options.log ? { log: options.log } : {}),
    });
    const urls = this.#replicas.replicas.map((replica) => replica.displayUrl);
    this.#displayUrls =
      urls.length === 1 ? `upstream ${urls[0]}` : `${urls.length} upstreams (${urls.join(", ")})`;
    this.#status = { ready: false, detail: `discovering models at ${urls[0]}` };
  }

  async start(): Promise<void> {
    let detail: string;
    try {
      this.#upstreamModels = await this.#discoverModels();
      detail = `${this.#displayUrls}: ${this.#upstreamModels.length} model(s) discovered`;
    } catch (error) {
      const reason = error instanceof Error ? error.message : "unknown error";
      detail = `${this.#displayUrls}: model discovery failed (${reason})`;
    }
    this.#replicas.startHealthChecks();
    this.#status = { ready: true, detail: `${detail}; "${ALIAS}" -> ${this.#defaultModel()}` };
  }

  status(): EngineStatus {
    return this.#status;
  }

  models(): readonly EngineModel[] {
    const models: EngineModel[] = [{ id: ALIAS, ownedBy: ALIAS }];
    const configured = this.#configuredModel;
    if (configured !== undefined && configured !== ALIAS && !this.#isUpstreamModel(configured)) {
      models.push({ id: configured, ownedBy: "upstream" });
    }
    for (const model of this.#upstreamModels) if (model.id !== ALIAS) models.push(model);
    return models;
  }

  resolveModel(name: string): string | undefined {
    if (name === ALIAS) return this.#defaultModel();
    if (name === this.#configuredModel || this.#isUpstreamModel(name)) return name;
    return undefined;
  }

  /** An estimate (about four characters per token): the upstream's tokenizer is not reachable. */
  async countTokens(text: string): Promise<number> {
    return Math.ceil(text.length / 4);
  }

  async *stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    const wire = request.fim ? completionsWire : this.#wire;
    if (signal.aborted) {
      yield* wire.decoder(request).cancel();
      return;
    }
    const pool = this.#replicas;
    const body = JSON.stringify(wire.requestBody(request));
    // After the body: serializing it has just read every item, which the key reads again.
    const key = pool.router.key(request);
    let failed = -1;
    for (;;) {
      const replica = pool.acquire(key, failed);
      try {
        yield* this.#attempt(replica, wire, request, body, signal);
        return;
      } catch (error) {
        if (!(error instanceof AttemptError)) throw error;
        if (error.replicaFault) pool.failed(replica);
        if (!error.retryable || failed >= 0 || !pool.canRetry()) throw error.error;
        failed = replica.index;
      } finally {
        pool.release(replica);
      }
    }
  }

  relayChat(
    request: EngineRequest,
    options: { model: string; includeUsage: boolean },
    signal: AbortSignal,
  ): ChatRelay | undefined {
    // Custom tools travel as function tools Spark converts back: those chunks are not the client's.
    if (
      !this.#relay ||
      this.#wire !== chatWire ||
      request.fim ||
      request.tools.some((t) => t.kind === "custom")
    )
      return undefined;
    const scanner = new ChatRelayScanner(
      options.includeUsage,
      this.#relayModel === undefined ? undefined : { upstream: this.#relayModel, client: options.model },
    );
    const body = JSON.stringify({ ...chatWire.requestBody(request), model: options.model });
    return {
      bytes: this.#relayBytes(request, body, scanner, signal),
      result: () => ({ usage: scanner.usage, reason: scanner.reason }),
    };
  }

  /** The relayed bytes, with the same routing, retry before the first byte and errors as `stream`. */
  async *#relayBytes(
    request: EngineRequest,
    payload: string,
    scanner: ChatRelayScanner,
    signal: AbortSignal,
  ): AsyncGenerator<Uint8Array> {
    const pool = this.#replicas;
    const key = pool.router.key(request);
    let failed = -1;
    for (;;) {
      const replica = pool.acquire(key, failed);
      let started = false;
      try {
        const sent = performance.now();
        let response: Dispatcher.ResponseData;
        try {
          response = await replica.pool.request({
            method: "POST",
            path: replica.path(chatWire.path),
            headers: replica.headers("text/event-stream", true),
            body: payload,
            signal,
          });
        } catch (error) {
          if (signal.aborted) return;
          throw this.#attemptError(replica, error, false);
        }
        const body = response.body;
        try {
          if (response.statusCode < 200 || response.statusCode >= 300) {
            const status = response.statusCode;
            const error = await this.#httpError(replica, response, `POST ${chatWire.path}`);
            throw new AttemptError(error, status >= 500, status >= 500 || status === 429);
          }
          for await (const chunk of body as AsyncIterable<Uint8Array>) {
            const out = scanner.push(chunk);
            if (!out) continue;
            if (!started) {
              started = true;
              pool.observeLatency(replica, performance.now() - sent);
            }
            yield out;
          }
          scanner.end();
          pool.succeeded(replica);
          return;
        } catch (error) {
          if (signal.aborted) return;
          if (error instanceof AttemptError) throw error;
          throw this.#attemptError(replica, error, true, started);
        } finally {
          body.destroy();
        }
      } catch (error) {
        if (!(error instanceof AttemptError)) throw error;
        if (error.replicaFault) pool.failed(replica);
        if (!error.retryable || started || failed >= 0 || !pool.canRetry()) throw error.error;
        failed = replica.index;
      } finally {
        pool.release(replica);
      }
    }
  }

  /** One request to one replica. Throws an AttemptError; nothing is yielded before the first part. */
  async *#attempt(
    replica: Replica,
    wire: UpstreamWire,
    request: EngineRequest,
    payload: string,
    signal: AbortSignal,
  ): AsyncGenerator<EnginePart> {
    const decoder = wire.decoder(request);
    let response: Dispatcher.ResponseData;
    // The replica's latency runs from here to the first part (headers included).
    const sent = performance.now();
    try {
      response = await replica.pool.request({
        method: "POST",
        path: replica.path(wire.path),
        headers: replica.headers("text/event-stream", true),
        body: payload,
        signal,
      });
    } catch (error) {
      if (signal.aborted) {
        yield* decoder.cancel();
        return;
      }
      throw this.#attemptError(replica, error, false);
    }
    const body = response.body;
    let started = false;
    try {
      if (response.statusCode < 200 || response.statusCode >= 300) {
        const status = response.statusCode;
        const error = await this.#httpError(replica, response, `POST ${wire.path}`);
        throw new AttemptError(error, status >= 500, status >= 500 || status === 429);
      }
      // The body is read to its end before `finish` is yielded: a consumer that stops at `finish`
      // then leaves a complete response behind, and the connection is reused.
      const sse = new SseParser();
      for await (const chunk of body as AsyncIterable<Uint8Array>) {
        for (const event of sse.push(chunk)) {
          const parts = decoder.event(event);
          if (parts.length === 0) continue;
          if (!started) {
            started = true;
            this.#replicas.observeLatency(replica, performance.now() - sent);
          }
          yield* parts;
        }
      }
      const last: EnginePart[] = [];
      for (const event of sse.end()) last.push(...decoder.event(event));
      last.push(...decoder.end());
      // Complete and well formed: only now does the replica count as having answered.
      this.#replicas.succeeded(replica);
      yield* last;
    } catch (error) {
      if (signal.aborted) {
        yield* decoder.cancel();
        return;
      }
      if (error instanceof AttemptError) throw error;
      throw this.#attemptError(replica, error, true, started);
    } finally {
      // No-op after a complete response; otherwise closes the upstream connection, so a consumer
      // that stops iterating never leaves the upstream generating.
      body.destroy();
    }
  }

  /**
   * Counted by the upstream (`POST /responses/input_tokens`, with the body a create would send). An
   * upstream spoken to over Chat Completions has no such route: a 400 rather than an estimate.
   */
  async countInputTokens(request: EngineRequest, signal: AbortSignal): Promise<number> {
    if (this.#wire !== responsesWire)
      throw SparkError.invalid(
        "This model's upstream is spoken to over Chat Completions, which cannot count input tokens; " +
          "use a model whose upstream speaks the Responses API (--upstream-api responses).",
        "model",
        "input_tokens_unsupported",
      );
    const { stream: _stream, store: _store, ...created } = responsesWire.requestBody(request);
    const counted = ["model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text"];
    const body = Object.fromEntries(Object.entries(created).filter(([key]) => counted.includes(key)));
    const result = await this.#postJson(
      "/responses/input_tokens",
      body,
      (pool) => pool.router.key(request),
      signal,
    );
    if (typeof result.input_tokens !== "number")
      throw protocolError("the input token count has no number 'input_tokens'");
    return result.input_tokens;
  }

  /** `POST /embeddings` on the upstream, vectors as floats. */
  async embed(request: EmbeddingRequest, signal: AbortSignal): Promise<EmbeddingResult> {
    const body: Json = { model: request.model, input: request.inputs, encoding_format: "float" };
    if (request.dimensions !== undefined) body.dimensions = request.dimensions;
    const result = await this.#postJson("/embeddings", body, () => EMPTY_KEY, signal);
    const data = Array.isArray(result.data) ? result.data : [];
    const vectors: number[][] = [];
    for (const entry of data) {
      const index = isRecord(entry) && typeof entry.index === "number" ? entry.index : vectors.length;
      const embedding = isRecord(entry) ? entry.embedding : undefined;
      if (!Array.isArray(embedding) || !embedding.every((value) => typeof value === "number"))
        throw protocolError("an embedding is not an array of numbers");
      vectors[index] = embedding as number[];
    }
    if (vectors.length !== request.inputs.length || vectors.some((vector) => vector === undefined))
      throw protocolError(`expected ${request.inputs.length} embeddings, got ${data.length}`);
    const usage = isRecord(result.usage) ? result.usage : {};
    return { vectors, inputTokens: typeof usage.prompt_tokens === "number" ? usage.prompt_tokens : 0 };
  }

  /** One JSON request to one replica (retried once on another when that one failed), its JSON answer. */
  async #postJson(
    path: string,
    body: Json,
    key: (pool: ReplicaPool) => PrefixKey,
    signal: AbortSignal,
  ): Promise<Json> {
    const pool = this.#replicas;
    const payload = JSON.stringify(body);
    let failed = -1;
    for (;;) {
      const replica = pool.acquire(key(pool), failed);
      try {
        let response: Dispatcher.ResponseData;
        try {
          response = await replica.pool.request({
            method: "POST",
            path: replica.path(path),
            headers: replica.headers("application/json", true),
            body: payload,
            signal,
          });
        } catch (error) {
          throw new AttemptError(this.#transportError(replica, error, false), true, true);
        }
        if (response.statusCode < 200 || response.statusCode >= 300) {
          const status = response.statusCode;
          const error = await this.#httpError(replica, response, `POST ${path}`);
          throw new AttemptError(error, status >= 500, status >= 500 || status === 429);
        }
        let parsed: unknown;
        try {
          const text = await readAtMost(response.body, MAX_JSON_BODY_BYTES * 8);
          if (!text.complete)
            throw new Error(`the answer is larger than ${formatBytes(MAX_JSON_BODY_BYTES * 8)}`);
          parsed = JSON.parse(text.text);
        } catch (error) {
          throw new AttemptError(protocolError(`POST ${path}: ${(error as Error).message}`), true, false);
        }
        if (!isRecord(parsed))
          throw new AttemptError(protocolError(`POST ${path}: not a JSON object`), true, false);
        this.#replicas.succeeded(replica);
        return parsed;
      } catch (error) {
        if (!(error instanceof AttemptError)) throw error;
        if (signal.aborted) throw error.error;
        if (error.replicaFault) pool.failed(replica);
        if (!error.retryable || failed >= 0 || !pool.canRetry()) throw error.error;
        failed = replica.index;
      } finally {
        pool.release(replica);
      }
    }
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#replicas.close();
  }

  #defaultModel(): string {
    return this.#configuredModel ?? this.#upstreamModels[0]?.id ?? ALIAS;
  }

  #isUpstreamModel(id: string): boolean {
    return this.#upstreamModels.some((model) => model.id === id);
  }

  /** The model list of the first replica that gives one; they serve the same models. */
  async #discoverModels(): Promise<EngineModel[]> {
    let first: unknown;
    for (const replica of this.#replicas.replicas) {
      try {
        return await this.#discoverModelsAt(replica);
      } catch (error) {
        first ??= error;
      }
    }
    throw first;
  }

  async #discoverModelsAt(replica: Replica): Promise<EngineModel[]> {
    const timeout = Math.min(this.#timeoutMs, DISCOVERY_TIMEOUT_MS);
    let response: Dispatcher.ResponseData;
    try {
      response = await replica.pool.request({
        method: "GET",
        path: replica.path("/models"),
        headers: replica.headers("application/json", false),
        headersTimeout: timeout,
        bodyTimeout: timeout,
      });
    } catch (error) {
      throw this.#transportError(replica, error, false);
    }
    if (response.statusCode !== 200) throw await this.#httpError(replica, response, "GET /models");
    let list: unknown;
    try {
      const body = await readAtMost(response.body, MAX_JSON_BODY_BYTES);
      if (!body.complete)
        throw new Error(`the model list is larger than ${formatBytes(MAX_JSON_BODY_BYTES)}`);
      list = JSON.parse(body.text);
    } catch (error) {
      throw this.#transportError(replica, error, true);
    }
    const data = isRecord(list) && Array.isArray(list.data) ? list.data : [];
    const models: EngineModel[] = [];
    for (const entry of data) {
      if (!isRecord(entry) || typeof entry.id !== "string") continue;
      models.push({
        id: entry.id,
        ownedBy: typeof entry.owned_by === "string" ? entry.owned_by : "upstream",
      });
    }
    return models;
  }

  /** Upstream text shown to clients: bounded, and with the API key masked should the upstream echo it. */
  #clean(replica: Replica, text: string): string {
    const short = text.length > MAX_UPSTREAM_MESSAGE ? `${text.slice(0, MAX_UPSTREAM_MESSAGE)}...` : text;
    return replica.apiKey ? short.split(replica.apiKey).join("***") : short;
  }

  async #httpError(replica: Replica, response: Dispatcher.ResponseData, what: string): Promise<SparkError> {
    const status = response.statusCode;
    let text = "";
    try {
      text = (await readAtMost(response.body, MAX_ERROR_BODY_BYTES)).text;
    } catch {
      // The status alone still makes a useful error.
    }
    const upstream = parseUpstreamError(text);
    const message = upstream?.message ? this.#clean(replica, upstream.message) : undefined;
    const where = `Upstream ${replica.displayUrl}`;
    if (status === 401 || status === 403) {
      return new SparkError(
        502,
        "server_error",
        "upstream_auth_failed",
        `${where} rejected the credentials (HTTP ${status}${message ? `: ${message}` : ""}). ` +
          "Check --upstream-api-key-env.",
      );
    }
    if (status >= 400 && status < 500 && upstream && message) {
      const retryAfter = response.headers["retry-after"];
      return new SparkError(
        status,
        errorTypeFor(status),
        upstream.code ?? "upstream_error",
        message,
        upstream.param ?? null,
        typeof retryAfter === "string" ? { "retry-after": retryAfter } : {},
      );
    }
    const hint = status === 404 ? " Check --upstream; the base URL usually ends in /v1." : "";
    return new SparkError(
      502,
      "server_error",
      "upstream_error",
      `${where} answered HTTP ${status} to ${what}${message ? `: ${message}` : "."}${hint}`,
    );
  }

  /**
   * What a failure while talking to a replica means: SparkErrors (a malformed stream, an error the
   * upstream streamed) are the response's own and pass through; connection failures, resets and
   * timeouts are the replica's, and retryable while nothing was yielded.
   */
  #attemptError(replica: Replica, error: unknown, midStream: boolean, started = false): AttemptError {
    // A malformed stream is the replica's: counted toward its ejection, and retried elsewhere when
    // nothing was yielded yet.
    if (error instanceof SseTooLargeError || (error instanceof SparkError && error.code === PROTOCOL_ERROR)) {
      return new AttemptError(this.#transportError(replica, error, midStream), true, !started);
    }
    if (error instanceof SparkError) {
      return new AttemptError(this.#transportError(replica, error, midStream), false, false);
    }
    const code = errorCode(error);
    if (code !== undefined && CLOSED_CODES.has(code)) {
      return new AttemptError(this.#transportError(replica, error, midStream), false, false);
    }
    return new AttemptError(this.#transportError(replica, error, midStream), true, !started);
  }

  /** Maps anything thrown while talking to the upstream; SparkErrors pass through. */
  #transportError(replica: Replica, error: unknown, midStream: boolean): SparkError {
    if (error instanceof SparkError) return error;
    if (error instanceof SseTooLargeError) return protocolError(error.message);
    const code = errorCode(error);
    if (code !== undefined && TIMEOUT_CODES.has(code)) {
      return new SparkError(
        504,
        "server_error",
        "upstream_timeout",
        `Upstream ${replica.displayUrl} did not respond within ${this.#timeoutMs} ms.`,
      );
    }
    if (code !== undefined && CLOSED_CODES.has(code)) {
      return SparkError.unavailable("The openai engine is closed.", "engine_closed");
    }
    const reason = code ?? (error instanceof Error ? this.#clean(replica, error.message) : "unknown error");
    if (midStream) {
      return new SparkError(
        502,
        "server_error",
        "upstream_error",
        `The connection to upstream ${replica.displayUrl} failed mid-response (${reason}).`,
      );
    }
    return SparkError.unavailable(
      `Cannot reach the upstream at ${replica.displayUrl} (${reason}). Check --upstream.`,
      "upstream_unavailable",
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Upstream errors and bounded reads

interface UpstreamError {
  message: string | undefined;
  code: string | undefined;
  param: string | undefined;
}

/** Reads the OpenAI error shape `{error:{message,code,param}}` and the flat variants of vLLM and FastAPI. */
function parseUpstreamError(text: string): UpstreamError | undefined {
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (!isRecord(body)) return undefined;
  const error = isRecord(body.error) ? body.error : body;
  const message =
    typeof error.message === "string"
      ? error.message
      : typeof body.error === "string"
        ? body.error
        : typeof body.detail === "string"
          ? body.detail
          : undefined;
  return {
    message,
    code: typeof error.code === "string" && error.code !== "" ? error.code : undefined,
    param: typeof error.param === "string" ? error.param : undefined,
  };
}

function errorTypeFor(status: number): OpenAIErrorType {
  if (status === 404) return "not_found_error";
  if (status === 429) return "rate_limit_error";
  return "invalid_request_error";
}

/**
 * Reads a body up to `limit` bytes. A longer body is cut there and destroyed (closing its
 * connection), so an upstream sending without end costs at most `limit` bytes and never a stall.
 */
async function readAtMost(
  body: Dispatcher.ResponseData["body"],
  limit: number,
): Promise<{ text: string; complete: boolean }> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of body as AsyncIterable<Uint8Array>) {
    if (size + chunk.length > limit) {
      chunks.push(chunk.subarray(0, limit - size));
      body.destroy();
      return { text: Buffer.concat(chunks, limit).toString("utf8"), complete: false };
    }
    chunks.push(chunk);
    size += chunk.length;
  }
  return { text: Buffer.concat(chunks, size).toString("utf8"), complete: true };
}

/** The system error code of a connection failure, which Node may nest in `cause` or an AggregateError. */
function errorCode(error: unknown): string | undefined {
  if (!isRecord(error) && !(error instanceof Error)) return undefined;
  const record = error as Json;
  if (typeof record.code === "string") return record.code;
  const nested = Array.isArray(record.errors) ? record.errors[0] : record.cause;
  return nested === undefined || nested === error ? undefined : errorCode(nested);
}
