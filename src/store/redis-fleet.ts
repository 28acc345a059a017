/**
 * The fleet's queue view through Redis: every instance reports its own queued and generating
 * responses per tier once a second and reads back the sum over the instances that reported
 * recently. `/metrics` and `/healthz` answer from the last reading (no Redis round trip on their
 * path), so the view is at most about a second old while Redis answers; `ageMs` says how old.
 *
 * Only the view is shared: each instance still orders its own queue (spark before deep, keys
 * taking turns; see `src/core/admission.ts`).
 *
 * Keys: `spark:{fleet}:instances` (sorted set: instance → time of its last report, Redis clock)
 * and `spark:{fleet}:counts` (hash: instance → "sparkQueued sparkInFlight deepQueued
 * deepInFlight"); an instance silent for `staleMs` (killed, or cut off from Redis) is dropped by the
 * next report of any other.
 */
import { Gauge, type Registry } from "prom-client";
import type { FleetView, TierCounts } from "../core/limits/shared.js";
import { redisScript, type RedisLink } from "./redis-link.js";

const INSTANCES = "spark:{fleet}:instances";
const COUNTS = "spark:{fleet}:counts";

/** KEYS: instances, counts. ARGV: instance, its counts, stale ms. Returns the live counts (HGETALL). */
const REPORT = redisScript(
  `
local now = redis.call('TIME')
local nowMs = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('ZADD', KEYS[1], nowMs, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nowMs - tonumber(ARGV[3]))
if #stale > 0 then
  redis.call('ZREM', KEYS[1], unpack(stale))
  redis.call('HDEL', KEYS[2], unpack(stale))
end
return redis.call('HGETALL', KEYS[2])
`,
  2,
);

export const FLEET_REPORT_MS = 1000;

export class RedisFleet {
  #view: { instances: number; tiers: TierCounts; at: number } | undefined;
  readonly #timer: NodeJS.Timeout;
  readonly #staleMs: number;

  constructor(
    private readonly link: RedisLink,
    private readonly instance: string,
    private readonly local: () => TierCounts,
    options: { intervalMs?: number } = {},
  ) {
    const interval = options.intervalMs ?? FLEET_REPORT_MS;
    this.#staleMs = interval * 3;
    this.#timer = setInterval(() => void this.report(), interval).unref();
  }

  /** The last reading, or undefined before the first. */
  view(): FleetView | undefined {
    if (!this.#view) return undefined;
    const { instances, tiers, at } = this.#view;
    return { instances, tiers, ageMs: Math.round(performance.now() - at) };
  }

  /** Reports this instance's counts and reads the fleet's (also run by the timer). */
  async report(): Promise<void> {
    if (!this.link.up) return;
    const own = this.local();
    const encoded = [own.spark.queued, own.spark.inFlight, own.deep.queued, own.deep.inFlight].join(" ");
    let reply: string[];
    try {
      reply = (await this.link.run(
        REPORT,
        [INSTANCES, COUNTS],
        [this.instance, encoded, this.#staleMs],
      )) as string[];
    } catch {
      return;
    }
    const tiers: TierCounts = { spark: { queued: 0, inFlight: 0 }, deep: { queued: 0, inFlight: 0 } };
    let instances = 0;
    for (let i = 1; i < reply.length; i += 2) {
      const [sq = 0, sf = 0, dq = 0, df = 0] = reply[i]!.split(" ").map(Number);
      tiers.spark.queued += sq;
      tiers.spark.inFlight += sf;
      tiers.deep.queued += dq;
      tiers.deep.inFlight += df;
      instances++;
    }
    this.#view = { instances, tiers, at: performance.now() };
  }

  /** Stops reporting and takes this instance out of the view at once. */
  async close(): Promise<void> {
    clearInterval(this.#timer);
    await Promise.all([
      this.link.call("ZREM", INSTANCES, this.instance).catch(() => {}),
      this.link.call("HDEL", COUNTS, this.instance).catch(() => {}),
    ]);
  }

  /**
   * `spark_redis_up`, `spark_fleet_instances`, `spark_fleet_queue_length{tier}` and
   * `spark_fleet_in_flight{tier}` on `registry`, read when scraped.
   */
  registerMetrics(registry: Registry): void {
    const link = this.link;
    const view = (): FleetView | undefined => this.view();
    new Gauge({
      name: "spark_redis_up",
      help: "1 while the Redis the fleet shares (--redis) answers, else 0 (limits are then per instance or refused, see --redis-failure).",
      registers: [registry],
      collect() {
        this.set(link.up ? 1 : 0);
      },
    });
    new Gauge({
      name: "spark_fleet_instances",
      help: "Instances that reported to Redis in the last few seconds (this one included).",
      registers: [registry],
      collect() {
        this.set(view()?.instances ?? 0);
      },
    });
    new Gauge({
      name: "spark_fleet_queue_length",
      help: "Responses waiting for an engine slot over all instances, by tier (from Redis, refreshed every second).",
      labelNames: ["tier"] as const,
      registers: [registry],
      collect() {
        const now = view();
        for (const tier of ["spark", "deep"] as const) this.set({ tier }, now?.tiers[tier].queued ?? 0);
      },
    });
    new Gauge({
      name: "spark_fleet_in_flight",
      help: "Responses holding an engine slot over all instances, by tier (from Redis, refreshed every second).",
      labelNames: ["tier"] as const,
      registers: [registry],
      collect() {
        const now = view();
        for (const tier of ["spark", "deep"] as const) this.set({ tier }, now?.tiers[tier].inFlight ?? 0);
      },
    });
  }
}
