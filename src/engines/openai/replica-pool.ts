/**
 * The upstream replicas of one openai engine: a keep-alive connection pool per replica, routing
 * (`prefix-router.ts`), health and per-replica Prometheus metrics.
 *
 * Health. A replica is ejected (taken out of routing) after `failuresToEject` consecutive failures:
 * requests that could not connect, were reset, timed out, got a 5xx or a malformed stream, and
 * active checks that failed. Active checks (`GET {url}/models`, else `/health` at the origin when
 * that is a 404) run every `intervalMs` while there are two replicas or more; an ejected replica
 * rejoins after one check (or one request) that succeeds. A request that succeeds resets its
 * replica's count; a check that succeeds does not, since a replica can list its models and still
 * fail every generation: a replica a check brings back is on probation, ejected again by its next
 * failure.
 *
 * Latency. The time to each request's first part is the replica's latency (`observeLatency`); the
 * router weighs a replica much slower than the fastest as busier than its requests in flight.
 */
import { Pool } from "undici";
import { Counter, Gauge, type Registry } from "prom-client";
import { SparkError } from "../../protocol/errors.js";
import { PrefixRouter, type PrefixKey, type Route, type RouterOptions } from "./prefix-router.js";

export interface UpstreamTarget {
  /** Base URL including the version prefix, e.g. `http://host:8000/v1`. */
  url: string;
  /** Share of new conversations and of concurrent load, relative to the others. Default 1. */
  weight?: number;
  /** Sent as `Authorization: Bearer <apiKey>`; never included in any message or label. */
  apiKey?: string;
  /** A Unix socket that reaches it (then `url` names only the path and the Host header). */
  socketPath?: string;
}

export interface HealthOptions {
  /** Time between active checks, in ms. Default 5000. */
  intervalMs?: number;
  /** Consecutive failures that eject a replica. Default 3. */
  failuresToEject?: number;
}

/** One upstream replica: where it is, how to call it, and its health. */
export class Replica {
  readonly index: number;
  readonly weight: number;
  readonly pool: Pool;
  /** The base URL without credentials or query, safe to show and to use as a label. */
  readonly displayUrl: string;
  readonly apiKey: string | undefined;
  readonly #basePath: string;
  readonly #baseQuery: string;
  failures = 0;
  probing = false;

  constructor(
    index: number,
    target: UpstreamTarget,
    options: { connections?: number; timeoutMs: number; keepAlive?: boolean },
  ) {
    let url: URL;
    try {
      url = new URL(target.url);
    } catch {
      throw new SparkError(
        500,
        "server_error",
        "invalid_upstream_url",
        "The --upstream URL is not a valid URL.",
      );
    }
    if (url.protocol !== "http:" && url.protocol !== "https:") {
      throw new SparkError(
        500,
        "server_error",
        "invalid_upstream_url",
        `The --upstream URL must use http or https, not ${url.protocol}`,
      );
    }
    this.index = index;
    this.weight = target.weight ?? 1;
    this.apiKey = target.apiKey;
    this.#basePath = url.pathname.replace(/\/+$/, "");
    this.#baseQuery = url.search;
    this.displayUrl =
      target.socketPath !== undefined
        ? `unix:${target.socketPath}${this.#basePath}`
        : `${url.protocol}//${url.host}${this.#basePath}`;
    this.pool = new Pool(url.origin, {
      connections: options.connections ?? null,
      headersTimeout: options.timeoutMs,
      bodyTimeout: options.timeoutMs,
      // undici's "no keep-alive": a new connection per request.
      ...(options.keepAlive === false ? { pipelining: 0 } : {}),
      ...(target.socketPath !== undefined ? { connect: { socketPath: target.socketPath } } : {}),
    });
  }

  /** A request path under the base URL, with the base URL's query. */
  path(suffix: string): string {
    return `${this.#basePath}${suffix}${this.#baseQuery}`;
  }

  headers(accept: string, json: boolean): Record<string, string> {
    const headers: Record<string, string> = { accept };
    if (json) headers["content-type"] = "application/json";
    if (this.apiKey) headers.authorization = `Bearer ${this.apiKey}`;
    return headers;
  }

  /** Whether the replica answers: `GET {url}/models`, or `/health` where that is a 404. */
  async check(timeoutMs: number): Promise<boolean> {
    const get = async (path: string): Promise<number> => {
      const response = await this.pool.request({
        method: "GET",
        path,
        headers: this.headers("application/json", false),
        headersTimeout: timeoutMs,
        bodyTimeout: timeoutMs,
      });
      await response.body.dump({ limit: 64 * 1024 }).catch(() => {});
      return response.statusCode;
    };
    try {
      let status = await get(this.path("/models"));
      if (status === 404) status = await get("/health");
      return status >= 200 && status < 300;
    } catch {
      return false;
    }
  }
}

/** Per-replica metrics, labelled `replica` (the display URL); one set per registry, shared by engines. */
class UpstreamMetrics {
  readonly inFlight: Gauge<"replica">;
  readonly requests: Counter<"replica">;
  readonly failures: Counter<"replica">;
  readonly retries: Counter<"replica">;
  readonly ejections: Counter<"replica">;
  readonly healthy: Gauge<"replica">;
  readonly affinityHits: Counter<"replica">;
  readonly affinityMisses: Counter<"replica" | "reason">;

  constructor(registry: Registry) {
    const registers = [registry];
    this.inFlight = new Gauge({
      name: "spark_upstream_in_flight",
      help: "Requests in flight to each upstream replica.",
      labelNames: ["replica"],
      registers,
    });
    this.requests = new Counter({
      name: "spark_upstream_requests_total",
      help: "Requests sent to each upstream replica (a retry counts on the replica it went to).",
      labelNames: ["replica"],
      registers,
    });
    this.failures = new Counter({
      name: "spark_upstream_failures_total",
      help: "Requests and health checks that failed on each replica (connect error, reset, timeout, 5xx).",
      labelNames: ["replica"],
      registers,
    });
    this.retries = new Counter({
      name: "spark_upstream_retries_total",
      help: "Requests that failed before their first token on another replica and were retried on this one.",
      labelNames: ["replica"],
      registers,
    });
    this.ejections = new Counter({
      name: "spark_upstream_ejections_total",
      help: "Times each replica was taken out of routing after consecutive failures.",
      labelNames: ["replica"],
      registers,
    });
    this.healthy = new Gauge({
      name: "spark_upstream_healthy",
      help: "1 while the replica is in routing, 0 while it is ejected.",
      labelNames: ["replica"],
      registers,
    });
    this.affinityHits = new Counter({
      name: "spark_upstream_affinity_hits_total",
      help: "Requests routed to a replica that had served their prefix.",
      labelNames: ["replica"],
      registers,
    });
    this.affinityMisses = new Counter({
      name: "spark_upstream_affinity_misses_total",
      help: "Requests routed to a replica that had not served their prefix: no replica held enough of it (cold), the holder was much busier (load), or ejected (down).",
      labelNames: ["replica", "reason"],
      registers,
    });
  }
}

const metricsByRegistry = new WeakMap<Registry, UpstreamMetrics>();

function upstreamMetrics(registry: Registry): UpstreamMetrics {
  let metrics = metricsByRegistry.get(registry);
  if (!metrics) {
    metrics = new UpstreamMetrics(registry);
    metricsByRegistry.set(registry, metrics);
  }
  return metrics;
}

export interface ReplicaPoolOptions {
  connections?: number;
  timeoutMs: number;
  /** Reuse connections (default); false opens one per request (see `OpenAIEngineOptions.keepAlive`). */
  keepAlive?: boolean;
  routing?: RouterOptions;
  health?: HealthOptions;
  /** Where the per-replica metrics go (the server's registry); none when absent. */
  registry?: Registry;
  log?: (line: string) => void;
}

export class ReplicaPool {
  readonly replicas: readonly Replica[];
  readonly router: PrefixRouter;
  readonly #metrics: UpstreamMetrics | undefined;
  readonly #intervalMs: number;
  readonly #failuresToEject: number;
  readonly #log: (line: string) => void;
  #timer: NodeJS.Timeout | undefined;

  constructor(targets: readonly UpstreamTarget[], options: ReplicaPoolOptions) {
    const poolOptions = {
      timeoutMs: options.timeoutMs,
      ...(options.connections !== undefined ? { connections: options.connections } : {}),
      ...(options.keepAlive !== undefined ? { keepAlive: options.keepAlive } : {}),
    };
    this.replicas = targets.map((target, index) => new Replica(index, target, poolOptions));
    const seen = new Set<string>();
    for (const replica of this.replicas) {
      if (seen.has(replica.displayUrl)) {
        throw new SparkError(
          500,
          "server_error",
          "invalid_upstream_url",
          `The upstream ${replica.displayUrl} is listed twice.`,
        );
      }
      seen.add(replica.displayUrl);
    }
    this.router = new PrefixRouter(
      this.replicas.map((r) => r.weight),
      options.routing,
    );
    this.#intervalMs = options.health?.intervalMs ?? 5000;
    this.#failuresToEject = Math.max(1, options.health?.failuresToEject ?? 3);
    this.#log = options.log ?? (() => {});
    this.#metrics = options.registry ? upstreamMetrics(options.registry) : undefined;
    for (const replica of this.replicas) this.#metrics?.healthy.set({ replica: replica.displayUrl }, 1);
  }

  /** Active checks on an interval, while there is a choice of replicas. */
  startHealthChecks(): void {
    if (this.replicas.length < 2 || this.#timer) return;
    this.#timer = setInterval(() => {
      for (const replica of this.replicas) void this.#check(replica);
    }, this.#intervalMs);
    this.#timer.unref();
  }

  /** Picks a replica for a request (not `exclude`, which just failed it) and counts it in flight. */
  acquire(key: PrefixKey, exclude = -1): Replica {
    const route: Route = this.router.pick(key, exclude);
    const replica = this.replicas[route.replica]!;
    this.router.acquire(route.replica);
    const metrics = this.#metrics;
    if (metrics) {
      const label = { replica: replica.displayUrl };
      metrics.inFlight.inc(label);
      metrics.requests.inc(label);
      if (exclude >= 0) metrics.retries.inc(label);
      if (this.router.policy === "prefix-affinity" && this.replicas.length > 1) {
        if (route.hit) metrics.affinityHits.inc(label);
        else metrics.affinityMisses.inc({ ...label, reason: route.miss ?? "cold" });
      }
    }
    return replica;
  }

  release(replica: Replica): void {
    this.router.release(replica.index);
    this.#metrics?.inFlight.dec({ replica: replica.displayUrl });
  }

  /** The replica answered a request: its failure count restarts, and an ejected one rejoins. */
  succeeded(replica: Replica): void {
    replica.failures = 0;
    this.#rejoin(replica, 0);
  }

  /** The replica took `ms` to a request's first part. */
  observeLatency(replica: Replica, ms: number): void {
    this.router.observe(replica.index, ms);
  }

  /** The replica failed a request or a check. */
  failed(replica: Replica): void {
    this.#metrics?.failures.inc({ replica: replica.displayUrl });
    replica.failures++;
    if (replica.failures >= this.#failuresToEject && this.router.healthy(replica.index)) {
      this.router.setHealthy(replica.index, false);
      this.#metrics?.ejections.inc({ replica: replica.displayUrl });
      this.#metrics?.healthy.set({ replica: replica.displayUrl }, 0);
      this.#log(
        `upstream ${replica.displayUrl} ejected after ${replica.failures} consecutive failures; checking it every ${this.#intervalMs} ms`,
      );
    }
  }

  /** Whether another replica could take a request that failed on `replica`. */
  canRetry(): boolean {
    return this.replicas.length > 1;
  }

  async close(): Promise<void> {
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = undefined;
    await Promise.all(this.replicas.map((replica) => replica.pool.destroy()));
  }

  async #check(replica: Replica): Promise<void> {
    if (replica.probing) return;
    replica.probing = true;
    try {
      const ok = await replica.check(Math.min(this.#intervalMs, 5000));
      if (!this.#timer) return;
      if (ok) this.#rejoin(replica, this.#failuresToEject - 1);
      else this.failed(replica);
    } finally {
      replica.probing = false;
    }
  }

  /** Puts an ejected replica back in routing with `failures` counted (one short of ejection: on probation). */
  #rejoin(replica: Replica, failures: number): void {
    if (this.router.healthy(replica.index)) return;
    replica.failures = failures;
    this.router.setHealthy(replica.index, true);
    this.#metrics?.healthy.set({ replica: replica.displayUrl }, 1);
    this.#log(`upstream ${replica.displayUrl} is healthy again; it rejoins routing`);
  }
}
