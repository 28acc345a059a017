/**
 * The WebSocket transport of the Responses API (`GET /v1/responses` upgraded): a thin adapter from
 * `ws` to the transport-free `ResponsesSession`. It owns what only a socket has: frame decoding and
 * size limits, keepalive pings, the connection's lifetime limit, backpressure, and stopping every
 * generation the moment the socket closes.
 */
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer, WebSocket, type RawData } from "ws";
import { AbortReason } from "../core/generation.js";
import type { Principal } from "../core/keys.js";
import type { Metrics } from "../core/metrics.js";
import type { ResponsesService } from "../core/responses.js";
import {
  DEFAULT_SESSION_LIMITS,
  ResponsesSession,
  type SessionLimits,
  type SessionSink,
} from "../core/session.js";
import { SparkError } from "../protocol/errors.js";
import type { ResponseEvent } from "../protocol/responses.js";

export interface WebSocketOptions {
  /** Largest accepted client frame in bytes; a larger one gets an error and a close (1009). */
  maxFrameBytes?: number;
  /** A connection is closed after this long (`websocket_connection_limit_reached`). */
  maxConnectionMs?: number;
  /** Interval of keepalive pings; a client that misses one whole interval is dropped. */
  pingIntervalMs?: number;
  /** Unsent bytes per connection above which generation pauses until the client reads. */
  highWaterBytes?: number;
  limits?: Partial<SessionLimits>;
}

export const DEFAULT_MAX_CONNECTION_MS = 60 * 60 * 1000;
const DEFAULT_PING_INTERVAL_MS = 30_000;
const DEFAULT_HIGH_WATER_BYTES = 1024 * 1024;
/** Close codes of RFC 6455. */
const CLOSE_NORMAL = 1000;
const CLOSE_GOING_AWAY = 1001;
const CLOSE_TOO_BIG = 1009;

export class ResponsesWebSocket {
  readonly #server: WebSocketServer;
  readonly #connections = new Set<Connection>();
  readonly #options: Required<Omit<WebSocketOptions, "limits">> & { limits: SessionLimits };

  constructor(
    private readonly service: ResponsesService,
    private readonly metrics: Metrics,
    options: WebSocketOptions & { maxFrameBytes: number },
  ) {
    this.#options = {
      maxFrameBytes: options.maxFrameBytes,
      maxConnectionMs: options.maxConnectionMs ?? DEFAULT_MAX_CONNECTION_MS,
      pingIntervalMs: options.pingIntervalMs ?? DEFAULT_PING_INTERVAL_MS,
      highWaterBytes: options.highWaterBytes ?? DEFAULT_HIGH_WATER_BYTES,
      limits: { ...DEFAULT_SESSION_LIMITS, ...options.limits },
    };
    // Frames up to twice the limit are read so the client can be told why it is closed; beyond
    // that `ws` closes with 1009 on its own before buffering more.
    this.#server = new WebSocketServer({
      noServer: true,
      maxPayload: options.maxFrameBytes * 2,
      perMessageDeflate: false,
      clientTracking: false,
    });
  }

  /** Completes an HTTP upgrade already routed to `/v1/responses` and authenticated as `principal`. */
  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer, principal: Principal): void {
    this.#server.handleUpgrade(request, socket, head, (ws) => {
      const connection = new Connection(ws, this.service, this.metrics, this.#options, principal);
      this.#connections.add(connection);
      this.metrics.websocketConnections.inc();
      this.metrics.websocketConnectionsTotal.inc();
      ws.once("close", () => {
        this.#connections.delete(connection);
        this.metrics.websocketConnections.dec();
      });
    });
  }

  stats(): { connections: number; unsentBytes: number } {
    let unsentBytes = 0;
    for (const connection of this.#connections) unsentBytes += connection.unsentBytes;
    return { connections: this.#connections.size, unsentBytes };
  }

  /** Ends every connection's responses (reason `server_shutdown`) and closes the sockets. */
  async close(): Promise<void> {
    await Promise.allSettled([...this.#connections].map((c) => c.shutdown()));
    this.#server.close();
  }
}

class Connection implements SessionSink {
  readonly #session: ResponsesSession;
  readonly #timers: NodeJS.Timeout[] = [];
  #unsentBytes = 0;
  #drainWaiters: (() => void)[] = [];
  #alive = true;

  constructor(
    private readonly ws: WebSocket,
    service: ResponsesService,
    metrics: Metrics,
    private readonly options: Required<Omit<WebSocketOptions, "limits">> & { limits: SessionLimits },
    principal: Principal,
  ) {
    this.#session = new ResponsesSession(service, this, options.limits, metrics, principal);
    ws.on("message", (data, isBinary) => this.#onMessage(data, isBinary));
    ws.on("pong", () => (this.#alive = true));
    ws.on("error", () => ws.terminate());
    ws.once("close", () => {
      for (const timer of this.#timers) clearTimeout(timer);
      this.#releaseWaiters();
      void this.#session.close(AbortReason.clientDisconnected);
    });
    this.#timers.push(
      setTimeout(() => void this.#expire(), options.maxConnectionMs).unref(),
      setInterval(() => this.#ping(), options.pingIntervalMs).unref(),
    );
  }

  get unsentBytes(): number {
    return this.#unsentBytes;
  }

  send(event: ResponseEvent): Promise<void> | undefined {
    if (this.ws.readyState !== WebSocket.OPEN) return undefined;
    const data = JSON.stringify(event);
    const bytes = data.length;
    this.#unsentBytes += bytes;
    this.ws.send(data, () => {
      this.#unsentBytes -= bytes;
      if (this.#unsentBytes <= this.options.highWaterBytes / 2) this.#releaseWaiters();
    });
    if (this.#unsentBytes <= this.options.highWaterBytes) return undefined;
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  async shutdown(): Promise<void> {
    await this.#session.close(AbortReason.serverShutdown);
    this.ws.close(CLOSE_GOING_AWAY, "server shutting down");
  }

  #onMessage(data: RawData, isBinary: boolean): void {
    if (isBinary) {
      this.#session.error(
        SparkError.invalid("Binary frames are not supported; send JSON text frames.", null, "invalid_frame"),
      );
      return;
    }
    // Measured on the raw payload, so an oversize frame is refused before it is decoded.
    const bytes = Array.isArray(data) ? data.reduce((sum, part) => sum + part.length, 0) : data.byteLength;
    if (bytes > this.options.maxFrameBytes) {
      this.#session.error(
        SparkError.invalid(
          `A frame may be at most ${this.options.maxFrameBytes} bytes.`,
          null,
          "frame_too_large",
        ),
      );
      this.ws.close(CLOSE_TOO_BIG, "frame too large");
      return;
    }
    let frame: unknown;
    try {
      frame = JSON.parse(data.toString());
    } catch (error) {
      this.#session.error(
        SparkError.invalid(
          `The frame is not valid JSON (${(error as Error).message}).`,
          null,
          "invalid_json",
        ),
      );
      return;
    }
    this.#session.handle(frame);
  }

  #ping(): void {
    if (!this.#alive) {
      this.ws.terminate();
      return;
    }
    this.#alive = false;
    this.ws.ping();
  }

  async #expire(): Promise<void> {
    await this.#session.close(AbortReason.connectionLimit);
    this.#session.error(
      new SparkError(
        400,
        "invalid_request_error",
        "websocket_connection_limit_reached",
        `A connection may stay open at most ${formatDuration(this.options.maxConnectionMs)}; reconnect to continue (chains with store: true continue across connections).`,
      ),
    );
    this.ws.close(CLOSE_NORMAL, "connection limit reached");
  }

  #releaseWaiters(): void {
    const waiters = this.#drainWaiters;
    this.#drainWaiters = [];
    for (const resolve of waiters) resolve();
  }
}

function formatDuration(ms: number): string {
  return ms >= 60_000 ? `${Math.round(ms / 60_000)} minutes` : `${Math.round(ms / 1000)} seconds`;
}
