/**
 * The HTTP transport: a thin adapter from node:http to the transport-free core. Routing, body
 * limits, SSE and the mapping of every error to an OpenAI-shaped body happen here and only here.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { ChatCompletionsService } from "../core/chat-completions.js";
import { AbortReason } from "../core/generation.js";
import { Metrics } from "../core/metrics.js";
import { MemoryResponseStore, type ResponseStore } from "../core/response-store.js";
import { ResponsesService } from "../core/responses.js";
import type { Engine } from "../engine/types.js";
import { SparkError } from "../protocol/errors.js";
import { readJsonBody } from "./body.js";
import { SseWriter } from "./sse.js";
import { ResponsesWebSocket, type WebSocketOptions } from "./websocket.js";

export interface SparkServerOptions {
  engine: Engine;
  host?: string;
  port?: number;
  /** Largest accepted request body in bytes. */
  maxBodyBytes?: number;
  /** The model used when a request names none. */
  defaultModel?: string;
  store?: ResponseStore;
  metrics?: Metrics;
  /** WebSocket mode on `/v1/responses` (on by default); `false` answers upgrades with 426. */
  websocket?: boolean | Omit<WebSocketOptions, "maxFrameBytes">;
}

type Handler = (context: RequestContext) => Promise<void>;

interface RequestContext {
  request: IncomingMessage;
  response: ServerResponse;
  params: string[];
  /** Aborts when the client goes away or the server shuts down (the reason says which). */
  signal: AbortSignal;
}

interface Route {
  method: string;
  pattern: RegExp;
  name: string;
  handler: Handler;
}

export const DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024;
const SHUTDOWN_GRACE_MS = 2000;

export class SparkServer {
  readonly metrics: Metrics;
  readonly #engine: Engine;
  readonly #server: Server;
  readonly #responses: ResponsesService;
  readonly #chat: ChatCompletionsService;
  readonly #routes: Route[];
  readonly #maxBodyBytes: number;
  readonly #shutdown = new AbortController();
  readonly #inFlight = new Set<Promise<void>>();
  readonly #sockets = new Set<Socket>();
  readonly #websocket: ResponsesWebSocket | undefined;
  #url: string | undefined;

  constructor(private readonly options: SparkServerOptions) {
    this.#engine = options.engine;
    this.metrics = options.metrics ?? new Metrics();
    this.#maxBodyBytes = options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    const defaultModel = options.defaultModel ?? "spark";
    this.#responses = new ResponsesService(
      this.#engine,
      this.metrics,
      options.store ?? new MemoryResponseStore(),
      defaultModel,
    );
    this.#chat = new ChatCompletionsService(this.#engine, this.metrics, defaultModel);
    if (options.websocket !== false) {
      const websocketOptions = typeof options.websocket === "object" ? options.websocket : {};
      this.#websocket = new ResponsesWebSocket(this.#responses, this.metrics, {
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
        method: "GET",
        pattern: /^\/v1\/responses\/([^/]+)$/,
        name: "/v1/responses/{id}",
        handler: (c) => this.#getResponse(c),
      },
      {
        method: "DELETE",
        pattern: /^\/v1\/responses\/([^/]+)$/,
        name: "/v1/responses/{id}",
        handler: (c) => this.#deleteResponse(c),
      },
      {
        method: "POST",
        pattern: /^\/v1\/chat\/completions$/,
        name: "/v1/chat/completions",
        handler: (c) => this.#chatCompletion(c),
      },
      { method: "GET", pattern: /^\/v1\/models$/, name: "/v1/models", handler: (c) => this.#listModels(c) },
      {
        method: "GET",
        pattern: /^\/v1\/models\/([^/]+)$/,
        name: "/v1/models/{id}",
        handler: (c) => this.#getModel(c),
      },
      { method: "GET", pattern: /^\/healthz$/, name: "/healthz", handler: (c) => this.#health(c) },
      { method: "GET", pattern: /^\/metrics$/, name: "/metrics", handler: (c) => this.#metricsText(c) },
    ];
    this.#server = createServer({ keepAliveTimeout: 65_000 }, (request, response) =>
      this.#dispatch(request, response),
    );
    this.#server.on("upgrade", (request: IncomingMessage, socket: Socket, head: Buffer) =>
      this.#upgrade(request, socket, head),
    );
    this.#server.on("clientError", (error: NodeJS.ErrnoException, socket: Socket) => {
      if (!socket.writable || error.code === "ECONNRESET") {
        socket.destroy();
        return;
      }
      const incomplete = error.code === "HPE_INVALID_EOF_STATE";
      const failure = incomplete
        ? SparkError.invalid("The request ended before its declared length.", null, "incomplete_body")
        : SparkError.invalid(
            `Malformed HTTP request (${error.code ?? "parse error"}).`,
            null,
            "malformed_request",
          );
      socket.end(rawResponse(400, "Bad Request", JSON.stringify(failure.toBody())));
    });
    this.#server.on("connection", (socket: Socket) => {
      this.#sockets.add(socket);
      socket.once("close", () => this.#sockets.delete(socket));
    });
  }

  /** Binds and resolves with the base URL, e.g. `http://127.0.0.1:8484`. */
  async listen(): Promise<string> {
    const host = this.options.host ?? "127.0.0.1";
    await new Promise<void>((resolve, reject) => {
      this.#server.once("error", reject);
      this.#server.listen(this.options.port ?? 8484, host, () => {
        this.#server.off("error", reject);
        resolve();
      });
    });
    const address = this.#server.address() as AddressInfo;
    const shownHost = address.family === "IPv6" ? `[${address.address}]` : address.address;
    this.#url = `http://${shownHost}:${address.port}`;
    return this.#url;
  }

  /** Open WebSocket connections and the bytes queued for them but not yet written to the kernel. */
  websocketStats(): { connections: number; unsentBytes: number } {
    return this.#websocket?.stats() ?? { connections: 0, unsentBytes: 0 };
  }

  get url(): string {
    if (!this.#url) throw new Error("server is not listening");
    return this.#url;
  }

  /**
   * Graceful stop: refuse new connections, end every in-flight response with its terminal event
   * (reason `server_shutdown`), wait for them to be written, then close the engine.
   */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
    this.#shutdown.abort(AbortReason.serverShutdown);
    await Promise.allSettled([...this.#inFlight, this.#websocket?.close()]);
    this.#server.closeIdleConnections();
    // Give slow readers a moment to receive their terminal events before the sockets go.
    const grace = new Promise<void>((resolve) => setTimeout(resolve, SHUTDOWN_GRACE_MS).unref());
    await Promise.race([closed, grace]);
    for (const socket of this.#sockets) socket.destroy();
    await closed;
    await this.#engine.close();
  }

  #dispatch(request: IncomingMessage, response: ServerResponse): void {
    const path = (request.url ?? "/").split("?")[0] ?? "/";
    const method = request.method ?? "GET";
    const matching = this.#routes.filter((route) => route.pattern.test(path));
    const route = matching.find((r) => r.method === method);
    const routeName = route?.name ?? matching[0]?.name ?? "unmatched";
    response.once("finish", () => {
      this.metrics.requests.inc({ route: routeName, status: String(response.statusCode) });
      // While shutting down, a connection whose response is done is closed as soon as it is idle.
      if (this.#shutdown.signal.aborted) setImmediate(() => this.#server.closeIdleConnections());
    });

    if (!route) {
      if (matching.length > 0) {
        const allow = matching.map((r) => r.method).join(", ");
        sendError(
          response,
          new SparkError(405, "invalid_request_error", "method_not_allowed", `Use ${allow} for ${path}.`),
          { allow },
        );
      } else {
        sendError(response, SparkError.notFound(`No route for ${method} ${path}.`, "unknown_route"));
      }
      return;
    }
    const client = new AbortController();
    response.once("close", () => {
      if (!response.writableFinished) client.abort(AbortReason.clientDisconnected);
    });
    const signal = AbortSignal.any([client.signal, this.#shutdown.signal]);
    const params = path.match(route.pattern)!.slice(1).map(decodeURIComponent);
    const task = route
      .handler({ request, response, params, signal })
      .catch((error: unknown) => sendError(response, SparkError.from(error)))
      .finally(() => this.#inFlight.delete(task));
    this.#inFlight.add(task);
  }

  async #createResponse({ request, response, signal }: RequestContext): Promise<void> {
    const prepared = this.#responses.prepare(await readJsonBody(request, this.#maxBodyBytes));
    if (!prepared.stream) {
      sendJson(response, 200, await this.#responses.complete(prepared, signal));
      return;
    }
    const sse = new SseWriter(response);
    sse.open();
    for await (const event of this.#responses.events(prepared, signal)) {
      const pending = sse.send(JSON.stringify(event), event.type);
      if (pending) await pending;
    }
    sse.end();
  }

  async #compactResponse({ request, response, signal }: RequestContext): Promise<void> {
    sendJson(
      response,
      200,
      await this.#responses.compact(await readJsonBody(request, this.#maxBodyBytes), signal),
    );
  }

  async #chatCompletion({ request, response, signal }: RequestContext): Promise<void> {
    const prepared = this.#chat.prepare(await readJsonBody(request, this.#maxBodyBytes));
    if (!prepared.stream) {
      sendJson(response, 200, await this.#chat.complete(prepared, signal));
      return;
    }
    const sse = new SseWriter(response);
    sse.open();
    try {
      for await (const chunk of this.#chat.chunks(prepared, signal)) {
        const pending = sse.send(JSON.stringify(chunk));
        if (pending) await pending;
      }
    } catch (error) {
      sse.send(JSON.stringify(SparkError.from(error).toBody()));
    }
    sse.send("[DONE]");
    sse.end();
  }

  async #getResponse({ response, params }: RequestContext): Promise<void> {
    sendJson(response, 200, this.#responses.get(params[0]!));
  }

  async #deleteResponse({ response, params }: RequestContext): Promise<void> {
    sendJson(response, 200, this.#responses.delete(params[0]!));
  }

  async #listModels({ response }: RequestContext): Promise<void> {
    sendJson(response, 200, { object: "list", data: this.#engine.models().map(modelObject) });
  }

  async #getModel({ response, params }: RequestContext): Promise<void> {
    const model = this.#engine.models().find((m) => m.id === params[0]);
    if (!model)
      throw SparkError.notFound(`The model '${params[0]}' does not exist.`, "model_not_found", "model");
    sendJson(response, 200, modelObject(model));
  }

  async #health({ response }: RequestContext): Promise<void> {
    const status = this.#engine.status();
    sendJson(response, status.ready ? 200 : 503, {
      status: status.ready ? "ok" : "starting",
      engine: this.#engine.kind,
      detail: status.detail,
    });
  }

  async #metricsText({ response }: RequestContext): Promise<void> {
    const text = await this.metrics.text();
    response.writeHead(200, { "content-type": this.metrics.contentType });
    response.end(text);
  }

  /**
   * WebSocket mode lives on `/v1/responses`. With it disabled the answer is 426, which tells clients
   * to fall back to HTTP at once (a 404 or 405 would look like a broken server).
   */
  #upgrade(request: IncomingMessage, socket: Socket, head: Buffer): void {
    const path = (request.url ?? "/").split("?")[0] ?? "/";
    let refusal: SparkError;
    if (path !== "/v1/responses") {
      refusal = SparkError.notFound(
        `WebSocket mode is served on /v1/responses, not ${path}.`,
        "unknown_route",
      );
    } else if (!this.#websocket || this.#shutdown.signal.aborted) {
      refusal = new SparkError(
        426,
        "invalid_request_error",
        "websocket_not_supported",
        this.#websocket
          ? "The server is shutting down."
          : "WebSocket mode is not enabled on this server; use HTTP.",
      );
    } else {
      this.#websocket.upgrade(request, socket, head);
      return;
    }
    const reason = refusal.status === 426 ? "Upgrade Required" : "Not Found";
    socket.end(rawResponse(refusal.status, reason, JSON.stringify(refusal.toBody())));
  }
}

/** A complete HTTP/1.1 response for a raw socket (upgrade refusals, unparsable requests). */
function rawResponse(status: number, reason: string, json: string): string {
  return (
    `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\n` +
    `content-length: ${Buffer.byteLength(json)}\r\nconnection: close\r\n\r\n${json}`
  );
}

function modelObject(model: { id: string; ownedBy: string }): Record<string, unknown> {
  return { id: model.id, object: "model", created: 0, owned_by: model.ownedBy };
}

function sendJson(
  response: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
): void {
  if (response.headersSent || response.destroyed) return;
  const text = JSON.stringify(body);
  response.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
    ...headers,
  });
  response.end(text);
}

function sendError(response: ServerResponse, error: SparkError, headers: Record<string, string> = {}): void {
  if (response.headersSent) {
    response.destroy();
    return;
  }
  const extra: Record<string, string> = { ...error.headers, ...headers };
  // A body we stopped reading (oversize) cannot be drained safely: close after answering.
  if (error.status === 413) extra.connection = "close";
  sendJson(response, error.status, error.toBody(), extra);
}
