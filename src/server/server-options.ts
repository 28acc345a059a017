/**
 * What a `SparkServer` is built from: its options (engines, limits, stores, transports, the surface
 * mounted beside the API), the interfaces of what takes part in it (a mount, a shutdown participant)
 * and the defaults of its transport limits. Types and constants only: the server is `http-server.ts`.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { AdmissionOptions } from "../core/admission.js";
import type { FailureMode } from "../core/limits/gate.js";
import type { FleetStatus, SharedLimiter } from "../core/limits/shared.js";
import type { KeyRing } from "../core/keys.js";
import type { Metrics } from "../core/metrics.js";
import type { ModelRegistry } from "../core/model-registry.js";
import type { ResponseStore } from "../core/response-store.js";
import type { Engine } from "../engine/types.js";
import type { CoalesceOptions } from "./coalesce.js";
import type { WebSocketOptions } from "./websocket.js";

/** See `SparkServer.addShutdownParticipant`. */
export interface ShutdownParticipant {
  drain(): Promise<void>;
  close(reason: string): Promise<void>;
}

/** A surface served beside the API (see `SparkServerOptions.mount`). */
export interface HttpMount {
  /** Whether a path belongs to it (the API's own routes are never offered). */
  claims(path: string): boolean;
  request(request: IncomingMessage, response: ServerResponse): void;
  upgrade(request: IncomingMessage, socket: Socket, head: Buffer): void;
}

export type SparkServerOptions = (
  | {
      /** One engine behind both tiers, `spark` and `deep`. */
      engine: Engine;
      /** Responses the engine runs at once before new ones queue (default 64). */
      capacity?: number;
    }
  | { models: ModelRegistry }
) & {
  host?: string;
  port?: number;
  /** Largest accepted request body in bytes. */
  maxBodyBytes?: number;
  /** The model used when a request names none. */
  defaultModel?: string;
  /** Where `store: true` responses go (in memory by default). The server closes it on `close()`. */
  store?: ResponseStore;
  metrics?: Metrics;
  /** API keys and per-key limits; without keys every request is `anonymous`. */
  keys?: KeyRing;
  /** The engine queue's bound. */
  admission?: AdmissionOptions;
  /**
   * Limits shared by a fleet of instances (`--redis`): the store that decides them, what to do
   * while it cannot be reached, and its state for `/healthz`.
   */
  shared?: { limiter: SharedLimiter; failure: FailureMode; status: FleetStatus };
  /** WebSocket mode on `/v1/responses` (on by default); `false` answers upgrades with 426. */
  websocket?: boolean | Omit<WebSocketOptions, "maxFrameBytes">;
  /**
   * Another surface served beside the API on the same port (the web app, `spark serve --app`):
   * requests and upgrades whose path it claims go to it; it does its own checks.
   */
  mount?: HttpMount;
  /**
   * Listen on this Unix socket instead of `host`/`port` (Spark's own processes on one machine: no
   * TCP port for other local processes or an editor's port forwarding to see). Requests name
   * `localhost` as their host; the URL is `unix:PATH` (src/agent/server-address.ts).
   */
  socketPath?: string;
  /** Extra `Host` names and `Origin`s accepted (see `OriginPolicy`). */
  allowedHosts?: readonly string[];
  allowedOrigins?: readonly string[];
  /** Open connections (HTTP and WebSocket) at most; more are answered 503 and closed. */
  maxConnections?: number;
  /** Time a client has to send its request headers, then its whole request (body included). */
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  /** The server log, one line each (`spark serve` writes it to stderr). */
  log?: (line: string) => void;
  /**
   * When streamed events are written, over SSE and WebSocket (see `WriteCoalescer`): by default
   * token deltas that arrive under 1 ms apart are held and written together (with the first delta
   * arriving 0.5 ms after the oldest held, at most 8, at most 1 ms); `{ windowMs: 0, … }` writes
   * every event at the end of its tick.
   */
  coalesce?: CoalesceOptions;
  /**
   * This instance's name in the store's background-response rows (default `HOSTNAME:PORT`): a
   * restarted instance ends the unfinished background responses of its own name, so it must be
   * stable across restarts and unique among instances sharing a store.
   */
  instanceId?: string;
};

export const DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024;
export const DEFAULT_MAX_CONNECTIONS = 4096;
export const DEFAULT_HEADERS_TIMEOUT_MS = 15_000;
export const DEFAULT_REQUEST_TIMEOUT_MS = 120_000;
