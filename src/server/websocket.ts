/**
 * The WebSocket transport of the Responses API (`GET /v1/responses` upgraded): a thin adapter from
 * `ws` to the transport-free `ResponsesSession`. It owns what only a socket has: frame decoding and
 * size limits, keepalive pings, the connection's lifetime limit, backpressure in both directions
 * (generation pauses while the client does not read; reading pauses while replies pile up), and
 * stopping every generation the moment the socket closes.
 *
 * Nothing a client sends can end the process: every frame is handled inside a try, and a failure is
 * an `error` event on that connection.
 */
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer, WebSocket, type RawData } from "ws";
import { ByteBudget } from "../core/byte-budget.js";
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
import {
  DEFAULT_COALESCE,
  isTerminalEvent,
  isTokenDelta,
  WriteCoalescer,
  type CoalesceOptions,
} from "./coalesce.js";
import { rawResponse } from "./raw-response.js";
import { parseClientJson } from "./json.js";

export interface WebSocketOptions {
  /** Largest accepted client frame in bytes; a larger one gets an error and a close (1009). */
  maxFrameBytes?: number;
  /** A connection is closed after this long (`websocket_connection_limit_reached`). */
  maxConnectionMs?: number;
  /** Interval of keepalive pings; a client that misses one whole interval is dropped. */
  pingIntervalMs?: number;
  /**
   * Unsent bytes per connection above which generation pauses until the client reads, and the
   * server stops reading the client's frames (a client that sends without reading replies).
   */
  highWaterBytes?: number;
  /** Estimated bytes of lane history kept over all connections (each also has `limits.historyBytes`). */
  historyBytesTotal?: number;
  limits?: Partial<SessionLimits>;
  /** When events are written (see `WriteCoalescer`); the default holds fast token deltas briefly. */
  coalesce?: CoalesceOptions;
}

export const DEFAULT_MAX_CONNECTION_MS = 60 * 60 * 1000;
const DEFAULT_PING_INTERVAL_MS = 30_000;
const DEFAULT_HIGH_WATER_BYTES = 1024 * 1024;
const DEFAULT_HISTORY_BYTES_TOTAL = 256 * 1024 * 1024;
/** Queued frames past this many bytes are written at once instead of waiting for their flush. */
const FLUSH_BYTES = 64 * 1024;
/** Close codes of RFC 6455. */
const CLOSE_NORMAL = 1000;
const CLOSE_GOING_AWAY = 1001;
const CLOSE_TOO_BIG = 1009;
/** RFC 6455's "service restart": the client should reconnect (to another instance). */
const CLOSE_SERVICE_RESTART = 1012;

export class ResponsesWebSocket {
  readonly #server: WebSocketServer;
  readonly #connections = new Set<Connection>();
  readonly #options: ConnectionOptions;
  #draining = false;

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
      history: new ByteBudget(options.historyBytesTotal ?? DEFAULT_HISTORY_BYTES_TOTAL),
      coalesce: options.coalesce ?? DEFAULT_COALESCE,
    };
    // Frames up to twice the limit are read so the client can be told why it is closed; beyond
    // that `ws` closes with 1009 on its own before buffering more.
    this.#server = new WebSocketServer({
      noServer: true,
      maxPayload: options.maxFrameBytes * 2,
      perMessageDeflate: false,
      clientTracking: false,
    });
    // A handshake `ws` refuses (bad key, version, method) is answered in the API's error shape.
    this.#server.on("wsClientError", (error: Error, socket: Duplex) => {
      const refusal = SparkError.invalid(
        `WebSocket handshake refused: ${error.message}.`,
        null,
        "invalid_websocket_handshake",
      );
      const version = /Version/.test(error.message) ? { "sec-websocket-version": "13" } : {};
      socket.on("error", () => socket.destroy());
      socket.end(
        rawResponse(new SparkError(400, refusal.type, refusal.code, refusal.message, null, version)),
      );
    });
  }

  /** Completes an HTTP upgrade already routed to `/v1/responses` and authenticated as `principal`. */
  upgrade(request: IncomingMessage, socket: Duplex, head: Buffer, principal: Principal): void {
    this.#server.handleUpgrade(request, socket, head, (ws) => {
      const connection = new Connection(ws, socket, this.service, this.metrics, this.#options, principal);
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

  /**
   * Rolling restart: every connection refuses new turns, finishes what it runs or has queued, and
   * is then closed with 1012 (its client reconnects, to another instance). Resolves when all are.
   */
  async drain(): Promise<void> {
    this.#draining = true;
    await Promise.allSettled([...this.#connections].map((c) => c.drain()));
  }

  /**
   * Ends every connection's responses (reason `server_shutdown`) and closes the sockets (1001, or
   * 1012 when a drain ran out of time).
   */
  async close(): Promise<void> {
    const code = this.#draining ? CLOSE_SERVICE_RESTART : CLOSE_GOING_AWAY;
    await Promise.allSettled([...this.#connections].map((c) => c.shutdown(code)));
    this.#server.close();
  }
}

type ConnectionOptions = Required<Omit<WebSocketOptions, "limits" | "historyBytesTotal">> & {
  limits: SessionLimits;
  /** The lane-history budget all connections share. */
  history: ByteBudget;
};

class Connection implements SessionSink {
  readonly #session: ResponsesSession;
  readonly #timers: NodeJS.Timeout[] = [];
  /** Events serialized and waiting for their flush, in order, and their size. */
  #frames: string[] = [];
  #framesBytes = 0;
  readonly #coalescer: WriteCoalescer;
  /** Queued or handed to `ws` and not yet written to the kernel. */
  #unsentBytes = 0;
  #drainWaiters: (() => void)[] = [];
  #alive = true;
  /** Whether a write completed since the last ping (a paused reader that still drains is alive). */
  #progress = false;

  constructor(
    private readonly ws: WebSocket,
    /** The upgraded socket under `ws`: corked around a flush, so its frames leave in one write. */
    private readonly socket: Duplex,
    service: ResponsesService,
    private readonly metrics: Metrics,
    private readonly options: ConnectionOptions,
    principal: Principal,
  ) {
    this.#session = new ResponsesSession(service, this, options.limits, metrics, principal, options.history);
    this.#coalescer = new WriteCoalescer(() => this.#write(), options.coalesce);
    ws.on("message", (data, isBinary) => {
      try {
        this.#onMessage(data, isBinary);
      } catch (error) {
        this.#session.error(SparkError.from(error));
      }
    });
    ws.on("pong", () => (this.#alive = true));
    ws.on("error", () => ws.terminate());
    ws.once("close", () => {
      for (const timer of this.#timers) clearTimeout(timer);
      this.#coalescer.stop();
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

  /** Queues one event as its own frame; frames go out per flush (see `WriteCoalescer`), in order. */
  send(event: ResponseEvent): Promise<void> | undefined {
    if (this.ws.readyState !== WebSocket.OPEN) return undefined;
    const data = JSON.stringify(event);
    this.#frames.push(data);
    this.#framesBytes += data.length;
    this.#unsentBytes += data.length;
    if (this.#framesBytes >= FLUSH_BYTES || isTerminalEvent(event.type)) this.#coalescer.flushNow();
    else this.#coalescer.queued(isTokenDelta(event.type));
    if (this.#unsentBytes <= this.options.highWaterBytes) return undefined;
    // Replies pile up: stop reading this client's frames until it reads what it has been sent,
    // so a client that only writes gets TCP backpressure instead of an ever-growing reply queue.
    if (!this.ws.isPaused) {
      this.ws.pause();
      this.metrics.limitsHit.inc({ limit: "reading_paused" });
    }
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  async shutdown(code = CLOSE_GOING_AWAY): Promise<void> {
    await this.#session.close(AbortReason.serverShutdown);
    this.#close(code, code === CLOSE_SERVICE_RESTART ? "service restart" : "server shutting down");
  }

  /** Finishes the connection's responses (taking no new turns), then closes it with 1012. */
  async drain(): Promise<void> {
    await this.#session.drain();
    if (this.ws.readyState === WebSocket.OPEN) this.#close(CLOSE_SERVICE_RESTART, "service restart");
  }

  /**
   * Writes the queued frames: one frame per event, as the protocol requires, in one socket write
   * (the socket is corked around them); one completion callback accounts for all of them.
   */
  #write(): void {
    const frames = this.#frames;
    const bytes = this.#framesBytes;
    if (frames.length === 0) return;
    this.#frames = [];
    this.#framesBytes = 0;
    if (this.ws.readyState !== WebSocket.OPEN) {
      this.#unsentBytes -= bytes;
      return;
    }
    const written = (): void => {
      this.#unsentBytes -= bytes;
      this.#progress = true;
      if (this.#unsentBytes <= this.options.highWaterBytes / 2) {
        this.#releaseWaiters();
        if (this.ws.isPaused) this.ws.resume();
      }
    };
    this.socket.cork();
    try {
      for (let i = 0; i < frames.length - 1; i++) this.ws.send(frames[i]!);
      this.ws.send(frames[frames.length - 1]!, written);
    } finally {
      this.socket.uncork();
    }
  }

  /** Closes the connection after writing what is queued (an error event must precede its close). */
  #close(code: number, reason: string): void {
    this.#coalescer.flushNow();
    this.ws.close(code, reason);
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
      this.#close(CLOSE_TOO_BIG, "frame too large");
      return;
    }
    let frame: unknown;
    try {
      frame = parseClientJson(data.toString(), "frame");
    } catch (error) {
      this.#session.error(SparkError.from(error));
      return;
    }
    this.#session.handle(frame, bytes);
  }

  /**
   * Keepalive: a peer that answered no ping for a whole interval is gone. While reading is paused
   * its pong cannot be read, so a paused peer counts as alive as long as it drains what it is sent.
   */
  #ping(): void {
    const alive = this.ws.isPaused ? this.#progress : this.#alive;
    if (!alive) {
      this.ws.terminate();
      return;
    }
    this.#alive = false;
    this.#progress = false;
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
    this.#close(CLOSE_NORMAL, "connection limit reached");
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
