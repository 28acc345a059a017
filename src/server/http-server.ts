/**
 * The HTTP transport: a thin adapter from node:http to the transport-free core. Routing, body
 * limits, SSE and the mapping of every error to an OpenAI-shaped body happen in src/server and only
 * there. This file is the server's life (connections, listen, drain, close), the route table and
 * dispatch, the generation routes and the WebSocket upgrade; its options are `server-options.ts`,
 * the routes' shape and answers `http-routing.ts`, the transport's own errors `http-errors.ts`, the
 * models/health/metrics routes `info-routes.ts`, the stored and background ones `stateful-routes.ts`.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { hostname } from "node:os";
import { Admission, DEFAULT_ADMISSION, rateLimitHeaders, type RateLimitSnapshot } from "../core/admission.js";
import { ChatCompletionsService } from "../core/chat-completions.js";
import { CompletionsService } from "../core/completions.js";
import { AbortReason } from "../core/generation.js";
import { SharedAdmission, type LimitGate } from "../core/limits/gate.js";
import type { TierCounts } from "../core/limits/shared.js";
import { anonymousPrincipal, KeyRing, type Principal } from "../core/keys.js";
import { Metrics } from "../core/metrics.js";
import { ModelRegistry, type ResolvedModel } from "../core/model-registry.js";
import { MemoryResponseStore, type ResponseStore } from "../core/response-store.js";
import { EmbeddingsService } from "../core/embeddings.js";
import { countInputTokens } from "../core/input-tokens.js";
import { ResponsesService } from "../core/responses.js";
import { BackgroundResponses } from "../core/background.js";
import { ConversationsService } from "../core/conversations.js";
import { EventLog } from "../core/event-log.js";
import { SparkError } from "../protocol/errors.js";
import { readJsonBody } from "./body.js";
import {
  clientErrorOf,
  decodePathSegment,
  methodNotAllowed,
  noRoute,
  notAProxy,
  noWebSocket,
  shuttingDown,
  tooManyConnections,
} from "./http-errors.js";
import { OriginPolicy } from "./origin-policy.js";
import { rawResponse } from "./raw-response.js";
import { infoRoutes } from "./info-routes.js";
import { sendRelayedStream } from "./relay-stream.js";
import { expectationFailed, originForm } from "./request-target.js";
import { DEFAULT_COALESCE, type CoalesceOptions } from "./coalesce.js";
import { sendError, sendEventStream, sendJson, type RequestContext, type Route } from "./http-routing.js";
import { SseWriter } from "./sse.js";
import { refuseStoredChat, StatefulRoutes } from "./stateful-routes.js";
import {
  DEFAULT_HEADERS_TIMEOUT_MS,
  DEFAULT_MAX_BODY_BYTES,
  DEFAULT_MAX_CONNECTIONS,
  DEFAULT_REQUEST_TIMEOUT_MS,
  type ShutdownParticipant,
  type SparkServerOptions,
} from "./server-options.js";
import { ResponsesWebSocket } from "./websocket.js";

export type { HttpMount, ShutdownParticipant, SparkServerOptions } from "./server-options.js";

/** Longest a connection refused past --max-connections is kept if its 503 cannot be written. */
const REFUSED_LINGER_MS = 1000;
const DEFAULT_CAPACITY = 64;
const SHUTDOWN_GRACE_MS = 2000;

export class SparkServer {
  readonly metrics: Metrics;
  readonly models: ModelRegistry;
  readonly admission: Admission;
  /** What admits requests: `admission`, or the fleet's limits in front of it. */
  readonly #gate: LimitGate;
  readonly #keys: KeyRing;
  readonly #store: ResponseStore;
  readonly #server: Server;
  readonly #responses: ResponsesService;
  readonly #background: BackgroundResponses;
  readonly #stateful: StatefulRoutes;
  readonly #chat: ChatCompletionsService;
  readonly #completions: CompletionsService;
  readonly #embeddings: EmbeddingsService;
  readonly #routes: Route[];
  readonly #maxBodyBytes: number;
  readonly #shutdown = new AbortController();
  /** Requests being handled, with their responses. */
  readonly #inFlight = new Map<Promise<void>, ServerResponse>();
  readonly #sockets = new Set<Socket>();
  readonly #websocket: ResponsesWebSocket | undefined;
  readonly #origins: OriginPolicy;
  readonly #maxConnections: number;
  readonly #coalesce: CoalesceOptions;
  #url: string | undefined;
  /** Set by `drain`: no new connections, requests or turns; what runs finishes. */
  #draining = false;
  /** Resolves once the listening socket is closed and every connection has ended. */
  #closed: Promise<void> | undefined;
  #whenIdle: (() => void)[] = [];
  #closing: Promise<void> | undefined;
  readonly #participants = new Set<ShutdownParticipant>();

  constructor(private readonly options: SparkServerOptions) {
    this.models =
      "models" in options
        ? options.models
        : ModelRegistry.single(options.engine, options.capacity ?? DEFAULT_CAPACITY);
    this.metrics = options.metrics ?? new Metrics();
    this.#keys = options.keys ?? new KeyRing([]);
    this.#store = options.store ?? new MemoryResponseStore();
    this.admission = new Admission(options.admission ?? DEFAULT_ADMISSION, this.metrics);
    this.#gate = options.shared
      ? new SharedAdmission(this.admission, options.shared.limiter, {
          failure: options.shared.failure,
          metrics: this.metrics,
        })
      : this.admission;
    this.#maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    this.#coalesce = options.coalesce ?? DEFAULT_COALESCE;
    const defaultModel = options.defaultModel ?? "spark";
    this.#responses = new ResponsesService({
      models: this.models,
      metrics: this.metrics,
      store: this.#store,
      admission: this.#gate,
      verifyKey: (principal) => this.#keys.verify(principal),
      defaultModel,
      ...(options.log ? { log: options.log } : {}),
    });
    this.#background = new BackgroundResponses({
      responses: this.#responses,
      store: this.#store,
      shutdown: this.#shutdown.signal,
      ...(options.log ? { log: options.log } : {}),
    });
    // Background responses outlive their requests: at the server's end they are handed back.
    this.addShutdownParticipant({
      drain: () => this.#background.idle(),
      close: async (reason) => void (await this.#background.handBack(reason)),
    });
    this.#stateful = new StatefulRoutes({
      responses: this.#responses,
      background: this.#background,
      conversations: new ConversationsService(this.#store),
      maxBodyBytes: this.#maxBodyBytes,
      coalesce: this.#coalesce,
    });
    this.#chat = new ChatCompletionsService(this.models, this.metrics, this.#gate, defaultModel);
    this.#completions = new CompletionsService(this.models, this.metrics, this.#gate, defaultModel);
    this.#embeddings = new EmbeddingsService(this.models, this.#gate);
    if (options.websocket !== false) {
      const websocketOptions = typeof options.websocket === "object" ? options.websocket : {};
      this.#websocket = new ResponsesWebSocket(this.#responses, this.metrics, {
        coalesce: this.#coalesce,
        ...websocketOptions,
        maxFrameBytes: this.#maxBodyBytes,
      });
    }
    this.#routes = [
      {
        method: "POST",
        pattern: /^\/v1\/responses$/,
        name: "/v1/responses",
        handler: (c) => this.#createResponse(c),
      },
      {
        method: "POST",
        pattern: /^\/v1\/responses\/compact$/,
        name: "/v1/responses/compact",
        handler: (c) => this.#compactResponse(c),
      },
      {
        method: "POST",
        pattern: /^\/v1\/responses\/input_tokens$/,
        name: "/v1/responses/input_tokens",
        handler: async ({ request, response, signal, principal }) => {
          const body = await readJsonBody(request, this.#maxBodyBytes);
          sendJson(response, 200, await countInputTokens(this.#responses, body, principal, signal));
        },
      },
      ...this.#stateful.routes(),
      {
        method: "POST",
        pattern: /^\/v1\/chat\/completions$/,
        name: "/v1/chat/completions",
        handler: (c) => this.#chatCompletion(c),
      },
      {
        method: "POST",
        pattern: /^\/v1\/completions$/,
        name: "/v1/completions",
        handler: (c) => this.#completion(c),
      },
      {
        method: "POST",
        pattern: /^\/v1\/embeddings$/,
        name: "/v1/embeddings",
        handler: async ({ request, response, signal, principal }) => {
          const body = await readJsonBody(request, this.#maxBodyBytes);
          sendJson(response, 200, await this.#embeddings.create(body, signal, principal));
        },
      },
      ...infoRoutes({
        models: this.models,
        metrics: this.metrics,
        health: async () => ({
          engines: this.models.engines().map((engine) => ({ engine, status: engine.status() })),
          store: await this.#store.health?.(),
          shared: this.options.shared,
          draining: this.#draining,
          queued: this.admission.queued,
        }),
      }),
    ];
    this.#origins = new OriginPolicy({
      keysRequired: this.#keys.required,
      ...(options.allowedHosts ? { allowedHosts: options.allowedHosts } : {}),
      ...(options.allowedOrigins ? { allowedOrigins: options.allowedOrigins } : {}),
    });
    this.#maxConnections = options.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
    const headersTimeout = options.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS;
    this.#server = createServer(
      {
        keepAliveTimeout: 65_000,
        headersTimeout,
        requestTimeout: Math.max(options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS, headersTimeout),
        // Node checks both timeouts on this interval (default 30 s): check often enough that a
        // short timeout means what it says.
        connectionsCheckingInterval: Math.min(1000, headersTimeout),
        // Node would answer a request without Host with a bare 400; the dispatcher says why instead.
        requireHostHeader: false,
      },
      (request, response) => this.#dispatch(request, response),
    );
    this.#server.on("upgrade", (request: IncomingMessage, socket: Socket, head: Buffer) =>
      this.#upgrade(request, socket, head),
    );
    this.#server.on("connect", (request: IncomingMessage, socket: Socket) => {
      socket.on("error", () => socket.destroy());
      socket.end(rawResponse(notAProxy(request.method)));
    });
    // An `Expect` other than 100-continue: node:http would answer a bare 417; this one says why.
    this.#server.on("checkExpectation", (request: IncomingMessage, response: ServerResponse) =>
      sendError(response, expectationFailed(request.headers.expect)),
    );
    this.#server.on("clientError", (error: NodeJS.ErrnoException, socket: Socket) => {
      if (!socket.writable || error.code === "ECONNRESET") {
        socket.destroy();
        return;
      }
      socket.end(rawResponse(clientErrorOf(error)));
    });
    this.#server.on("connection", (socket: Socket) => {
      if (this.#sockets.size >= this.#maxConnections) {
        // Answered before the request is read, whether or not the client ever sends one, and closed
        // at once: ending only half-closes, and a client that sends nothing, never reads nor closes
        // would hold the connection (and its descriptor) past the limit. It is destroyed as soon as
        // the answer is in the kernel's hands (one loop turn later, so bytes the client already sent
        // are read first: closing over unread bytes would reset the connection and could lose the
        // answer). The linger is only a backstop for a write that never completes.
        socket.on("error", () => socket.destroy());
        socket.end(rawResponse(tooManyConnections(this.#maxConnections)), () =>
          setImmediate(() => socket.destroy()),
        );
        const linger = setTimeout(() => socket.destroy(), REFUSED_LINGER_MS).unref();
        socket.once("close", () => clearTimeout(linger));
        this.metrics.connectionsRefused.inc();
        return;
      }
      this.#sockets.add(socket);
      socket.once("close", () => this.#sockets.delete(socket));
    });
  }

  /** Binds and resolves with the base URL, e.g. `http://127.0.0.1:8484` (or `unix:PATH`). */
  async listen(): Promise<string> {
    const host = this.options.host ?? "127.0.0.1";
    const socketPath = this.options.socketPath;
    await new Promise<void>((resolve, reject) => {
      this.#server.once("error", reject);
      const listening = (): void => {
        this.#server.off("error", reject);
        resolve();
      };
      if (socketPath !== undefined) this.#server.listen(socketPath, listening);
      else this.#server.listen(this.options.port ?? 8484, host, listening);
    });
    let instance: string;
    if (socketPath !== undefined) {
      this.#origins.listeningOn("localhost");
      this.#url = `unix:${socketPath}`;
      instance = `${hostname()}:${socketPath}`;
    } else {
      const address = this.#server.address() as AddressInfo;
      this.#origins.listeningOn(host);
      this.#origins.listeningOn(address.address);
      const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
      this.#url = `http://${shownHost}:${address.port}`;
      instance = `${hostname()}:${address.port}`;
    }
    // Background responses this instance left unfinished (a crash, kill -9) are ended now.
    await this.#background
      .open(this.options.instanceId ?? instance)
      .catch((error: unknown) =>
        this.options.log?.(
          `could not end unfinished background responses: ${SparkError.from(error).message}`,
        ),
      );
    return this.#url;
  }

  /** Open WebSocket connections and the bytes queued for them but not yet written to the kernel. */
  websocketStats(): { connections: number; unsentBytes: number } {
    return this.#websocket?.stats() ?? { connections: 0, unsentBytes: 0 };
  }

  /** This instance's queued and generating responses per tier (counted with shared limits only). */
  tierCounts(): TierCounts {
    if (this.#gate instanceof SharedAdmission) return this.#gate.counts();
    return { spark: { queued: 0, inFlight: 0 }, deep: { queued: 0, inFlight: 0 } };
  }

  /**
   * Stops the background responses running on this instance now: each ends `incomplete`
   * (`server_shutdown`) and is stored before this resolves, so any instance can answer for it. For
   * the end of a drain; `close()` does it too. Answers how many were running.
   */
  handBackBackground(): Promise<number> {
    return this.#background.handBack();
  }

  get url(): string {
    if (!this.#url) throw new Error("server is not listening");
    return this.#url;
  }

  /**
   * Graceful stop: refuse new connections, end every in-flight response with its terminal event
   * (reason `server_shutdown`), wait for them to be written, then close the engine. Idempotent.
   */
  close(): Promise<void> {
    this.#closing ??= this.#close();
    return this.#closing;
  }

  async #close(): Promise<void> {
    const closed = this.#stopListening();
    this.#shutdown.abort(AbortReason.serverShutdown);
    await Promise.allSettled([
      ...this.#inFlight.keys(),
      this.#websocket?.close(),
      ...[...this.#participants].map((participant) => participant.close(AbortReason.serverShutdown)),
    ]);
    this.#server.closeIdleConnections();
    // Give slow readers a moment to receive their terminal events before the sockets go.
    const grace = new Promise<void>((resolve) => setTimeout(resolve, SHUTDOWN_GRACE_MS).unref());
    await Promise.race([closed, grace]);
    for (const socket of this.#sockets) socket.destroy();
    await closed;
    await Promise.all(this.models.engines().map((engine) => engine.close()));
    await this.#store.close();
  }

  /**
   * Rolling restart: stop accepting connections, requests and WebSocket turns, let every response
   * already started finish (a WebSocket connection is closed with 1012 "service restart" once its
   * own responses have ended, so its client reconnects elsewhere), then `close()`. After
   * `timeoutMs`, or when `close()` is called meanwhile (a second signal), what is left ends with
   * `server_shutdown` as `close()` does.
   */
  async drain(timeoutMs: number): Promise<void> {
    if (this.#draining || this.#shutdown.signal.aborted) return;
    this.#draining = true;
    void this.#stopListening();
    this.#server.closeIdleConnections();
    // Connections busy now close once their response is sent (a client must not send more on them).
    for (const response of this.#inFlight.values())
      if (!response.headersSent) response.setHeader("connection", "close");
    let timer: NodeJS.Timeout | undefined;
    const finished = Promise.all([
      this.#idle(),
      this.#websocket?.drain(),
      ...[...this.#participants].map((participant) => participant.drain()),
    ]);
    const expired = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    const interrupted = new Promise<void>((resolve) =>
      this.#shutdown.signal.addEventListener("abort", () => resolve(), { once: true }),
    );
    await Promise.race([finished, expired, interrupted]);
    clearTimeout(timer);
    await this.close();
  }

  get draining(): boolean {
    return this.#draining;
  }

  /**
   * Work that outlives the request that started it (background responses) takes part in stopping:
   * `drain()` lets it run to its end (bounded by the drain timeout); `close(reason)` ends what is
   * left, each piece handed back as `incomplete` with `reason` (`server_shutdown`), where a client
   * that polls it will see it.
   */
  addShutdownParticipant(participant: ShutdownParticipant): void {
    this.#participants.add(participant);
  }

  /** Closes the listening socket (once); resolves when every connection has ended too. */
  #stopListening(): Promise<void> {
    this.#closed ??= new Promise<void>((resolve) => this.#server.close(() => resolve()));
    return this.#closed;
  }

  /** Resolves once no HTTP request is being handled. */
  #idle(): Promise<void> {
    if (this.#inFlight.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.#whenIdle.push(resolve));
  }

  /**
   * Every request enters here. Nothing a client sends may throw out of it: an error while routing
   * is that request's 400 or 500, never the process's end.
   */
  #dispatch(request: IncomingMessage, response: ServerResponse): void {
    try {
      request.url = originForm(request.url);
    } catch (error) {
      sendError(response, SparkError.from(error));
      return;
    }
    const mount = this.options.mount;
    if (mount && !(request.url ?? "/").startsWith("/v1/")) {
      const path = (request.url ?? "/").split("?")[0] ?? "/";
      if (mount.claims(path)) {
        mount.request(request, response);
        return;
      }
    }
    try {
      this.#route(request, response);
    } catch (error) {
      sendError(response, SparkError.from(error));
    }
  }

  #route(request: IncomingMessage, response: ServerResponse): void {
    const [path = "/", search = ""] = (request.url ?? "/").split("?", 2);
    // HEAD is GET without the body (node:http drops the body of a HEAD response).
    const method = request.method === "HEAD" ? "GET" : (request.method ?? "GET");
    const matching = this.#routes.filter((route) => route.pattern.test(path));
    const route = matching.find((r) => r.method === method);
    const routeName = route?.name ?? matching[0]?.name ?? "unmatched";
    response.once("finish", () => {
      this.metrics.requests.inc({ route: routeName, status: String(response.statusCode) });
      // While shutting down, a connection whose response is done is closed as soon as it is idle.
      if (this.#draining || this.#shutdown.signal.aborted)
        setImmediate(() => this.#server.closeIdleConnections());
    });

    const refusal = this.#origins.check(request.headers.host, request.headers.origin);
    if (refusal) {
      sendError(response, refusal);
      return;
    }
    if (this.#draining && route && !route.public) {
      // A request on a connection kept alive into the drain: nothing was done, so a proxy may send
      // it to another instance (nginx: proxy_next_upstream http_503 non_idempotent).
      sendError(response, shuttingDown(), { connection: "close" });
      return;
    }
    if (!route) {
      if (matching.length > 0) {
        const allow = matching.map((r) => r.method).join(", ");
        sendError(response, methodNotAllowed(allow, path), { allow });
      } else {
        sendError(response, noRoute(method, path));
      }
      return;
    }
    let principal: Principal;
    try {
      principal = route.public ? anonymousPrincipal : this.#keys.authenticate(request.headers.authorization);
    } catch (error) {
      // The body is not read; closing keeps an unread upload from being parsed as the next request.
      sendError(response, SparkError.from(error), { connection: "close" });
      return;
    }
    const client = new AbortController();
    response.once("close", () => {
      if (!response.writableFinished) client.abort(AbortReason.clientDisconnected);
    });
    const signal = AbortSignal.any([client.signal, this.#shutdown.signal]);
    const params = path.match(route.pattern)!.slice(1).map(decodePathSegment);
    const task = route
      .handler({ request, response, params, query: new URLSearchParams(search), principal, signal })
      .catch((error: unknown) => sendError(response, SparkError.from(error)))
      .finally(() => {
        this.#inFlight.delete(task);
        if (this.#inFlight.size === 0) for (const resolve of this.#whenIdle.splice(0)) resolve();
      });
    this.#inFlight.set(task, response);
  }

  async #createResponse(context: RequestContext): Promise<void> {
    const { request, response, signal, principal } = context;
    const body = await readJsonBody(request, this.#maxBodyBytes);
    const background = isBackground(body);
    if (background) this.#background.check(body as Record<string, unknown>);
    const prepared = await this.#responses.prepare(body, { principal });
    setRouteHeaders(response, prepared.model);
    setRateLimitHeaders(response, prepared.rateLimits);
    if (background) return this.#stateful.createBackground(context, prepared);
    // A stored stream keeps its events, so it can be streamed again (`GET …?stream=true`).
    if (prepared.stream && prepared.response.store && this.#store.runs) prepared.log = new EventLog();
    if (!prepared.stream) {
      sendJson(response, 200, await this.#responses.complete(prepared, signal));
      return;
    }
    await sendEventStream(response, this.#responses.events(prepared, signal), this.#coalesce, prepared.log);
  }

  async #compactResponse({ request, response, signal, principal }: RequestContext): Promise<void> {
    const body = await readJsonBody(request, this.#maxBodyBytes);
    const prepared = await this.#responses.prepareCompaction(body, principal);
    setRateLimitHeaders(response, prepared.rateLimits);
    sendJson(response, 200, await this.#responses.compact(prepared, signal));
  }

  async #chatCompletion({ request, response, signal, principal }: RequestContext): Promise<void> {
    const body = await readJsonBody(request, this.#maxBodyBytes);
    refuseStoredChat(body);
    const prepared = await this.#chat.prepare(body, principal);
    setRouteHeaders(response, prepared.resolved);
    setRateLimitHeaders(response, prepared.ticket.rateLimits);
    if (!prepared.stream) {
      sendJson(response, 200, await this.#chat.complete(prepared, signal));
      return;
    }
    const relayed = this.#chat.relay(prepared, signal);
    if (relayed) await sendRelayedStream(response, relayed, this.#coalesce);
    else await sendChunkStream(response, this.#chat.chunks(prepared, signal), this.#coalesce);
  }

  async #completion({ request, response, signal, principal }: RequestContext): Promise<void> {
    const prepared = await this.#completions.prepare(
      await readJsonBody(request, this.#maxBodyBytes),
      principal,
    );
    setRouteHeaders(response, prepared.resolved);
    setRateLimitHeaders(response, prepared.ticket.rateLimits);
    if (!prepared.stream) {
      sendJson(response, 200, await this.#completions.complete(prepared, signal));
      return;
    }
    await sendChunkStream(response, this.#completions.chunks(prepared, signal), this.#coalesce);
  }

  /**
   * WebSocket mode lives on `/v1/responses`. With it disabled the answer is 426, which tells clients
   * to fall back to HTTP at once (a 404 or 405 would look like a broken server).
   */
  #upgrade(request: IncomingMessage, socket: Socket, head: Buffer): void {
    try {
      request.url = originForm(request.url);
    } catch (error) {
      socket.on("error", () => socket.destroy());
      socket.end(rawResponse(SparkError.from(error)));
      return;
    }
    const mount = this.options.mount;
    if (mount && mount.claims((request.url ?? "/").split("?")[0] ?? "/")) {
      mount.upgrade(request, socket, head);
      return;
    }
    try {
      const refusal = this.#origins.check(request.headers.host, request.headers.origin);
      if (refusal) throw refusal;
      const principal = this.#keys.authenticate(request.headers.authorization);
      const path = (request.url ?? "/").split("?")[0] ?? "/";
      if (path !== "/v1/responses") {
        throw SparkError.notFound(`WebSocket mode is served on /v1/responses, not ${path}.`, "unknown_route");
      }
      if (this.#draining) throw shuttingDown();
      if (!this.#websocket || this.#shutdown.signal.aborted) {
        throw noWebSocket(
          this.#websocket
            ? "The server is shutting down."
            : "WebSocket mode is not enabled on this server; use HTTP.",
        );
      }
      this.#websocket.upgrade(request, socket, head, principal);
    } catch (error) {
      socket.on("error", () => socket.destroy());
      socket.end(rawResponse(SparkError.from(error)));
    }
  }
}

/** For `model: "auto"`: which tier the router chose and why, before any body is sent. */
function setRouteHeaders(response: ServerResponse, model: ResolvedModel): void {
  if (!model.route) return;
  response.setHeader("x-spark-route", model.route.tier);
  response.setHeader("x-spark-route-rule", model.route.rule);
  response.setHeader("x-spark-route-reason", model.route.reason);
}

/**
 * OpenAI's `x-ratelimit-*` headers, for the per-minute limits that apply to the key and tier, as
 * they stood when the request was admitted (429s carry them in the error's own headers).
 */
function setRateLimitHeaders(response: ServerResponse, snapshot: RateLimitSnapshot): void {
  for (const [name, value] of Object.entries(rateLimitHeaders(snapshot))) response.setHeader(name, value);
}

/** Whether a create body asks to run in the background (checked in full by `prepare`). */
function isBackground(body: unknown): boolean {
  return (body as { background?: unknown } | null)?.background === true;
}

/**
 * The streaming shape shared by Chat Completions and Completions: one `data:` line per chunk, an
 * error object if the stream fails once started, then `data: [DONE]`.
 */
async function sendChunkStream(
  response: ServerResponse,
  chunks: AsyncIterable<unknown>,
  coalesce: CoalesceOptions,
): Promise<void> {
  const sse = new SseWriter(response, coalesce);
  sse.open();
  try {
    for await (const chunk of chunks) {
      // Every chunk but the last few is a delta; those go out at the end of their tick anyway.
      const pending = sse.send(JSON.stringify(chunk), undefined, true);
      if (pending) await pending;
    }
  } catch (error) {
    sse.send(JSON.stringify(SparkError.from(error).toBody()));
  }
  sse.send("[DONE]");
  sse.end();
}
