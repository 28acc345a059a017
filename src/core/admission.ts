/**
 * Admission control: per-key rate limits and the fair queue in front of the engines.
 *
 * Contracts:
 * - `admit` is synchronous and runs before a transport has sent anything, so a refusal is a plain
 *   429 (`retry-after` header; over WebSocket an `error` event with the same fields and status).
 * - Limits are per key and per tier: requests per rolling minute, tokens per rolling minute (input
 *   plus output, counted when a response ends, so a response in flight is not charged yet) and
 *   responses at once (generating or queued).
 * - Each engine has `capacity` slots. A response that finds none free waits in that engine's queue
 *   (bounded by `maxQueue`; a full queue is 429 `queue_full`). The queue is fair:
 *   - `spark` work goes first, but not forever: while `deep` work waits, at most `sparkRun` (K,
 *     default 4) `spark` grants happen in a row; the next free slot goes to `deep`. So the next
 *     `deep` waiter starts after at most K `spark` grants, and `spark` waiters give up at most one
 *     grant in K+1. The run counts grants, not time, and restarts when `deep` gets a grant or no
 *     longer waits.
 *   - Within a tier keys take turns (round robin), so one key's burst waits behind its own earlier
 *     requests, not in front of other keys: between two grants to a key, every other waiting key of
 *     that tier gets at most one.
 *   Together: every queued response starts within a bounded number of grants, whatever keeps
 *   arriving (at most K+1 grants per `deep` grant, and fewer than `maxQueue` keys per round).
 * - The numbers behind OpenAI's `x-ratelimit-*` headers (limit, remaining, time until the window
 *   is empty) are taken at admit time for each per-minute limit that applies to the key and tier:
 *   on the ticket, from `charge`, and in the headers of every 429.
 * - Every ticket is released exactly once; releasing a queued ticket (a client that left) takes it
 *   out of the queue. Releasing a running ticket hands its slot to the next waiter at once.
 */
import type { Engine } from "../engine/types.js";
import { SparkError } from "../protocol/errors.js";
import type { Principal, TierLimits } from "./keys.js";
import type { Metrics } from "./metrics.js";
import type { Tier } from "./model-registry.js";

export interface AdmissionOptions {
  /** Responses waiting per engine before new ones get 429 `queue_full`. */
  maxQueue: number;
  /** `spark` grants in a row while `deep` work waits; the next grant goes to `deep` (default 4). */
  sparkRun?: number;
}

export const DEFAULT_SPARK_RUN = 4;
export const DEFAULT_ADMISSION: AdmissionOptions = { maxQueue: 256, sparkRun: DEFAULT_SPARK_RUN };

/** One per-minute limit as it stands: what OpenAI's `x-ratelimit-*-requests|tokens` headers say. */
export interface RateLimitState {
  limit: number;
  /** What is left of `limit` in the rolling minute (never negative). */
  remaining: number;
  /** Milliseconds until the window holds nothing, i.e. `remaining` is back to `limit`. */
  resetMs: number;
}

/** The per-minute limits that apply to one key and tier; a limit that is not set is absent. */
export interface RateLimitSnapshot {
  requests?: RateLimitState;
  tokens?: RateLimitState;
}

/**
 * OpenAI's rate-limit headers for a snapshot: `x-ratelimit-limit-*`, `x-ratelimit-remaining-*` and
 * `x-ratelimit-reset-*` (a Go-style duration, `1m0s`, `59.412s`, `20ms`, `0s`), for `requests` and
 * `tokens`, each only when that limit applies.
 */
export function rateLimitHeaders(snapshot: RateLimitSnapshot): Record<string, string> {
  const headers: Record<string, string> = {};
  // Constant names (not built per request): this runs for every admitted request with limits.
  const requests = snapshot.requests;
  if (requests) {
    headers["x-ratelimit-limit-requests"] = String(requests.limit);
    headers["x-ratelimit-remaining-requests"] = String(requests.remaining);
    headers["x-ratelimit-reset-requests"] = formatDuration(requests.resetMs);
  }
  const tokens = snapshot.tokens;
  if (tokens) {
    headers["x-ratelimit-limit-tokens"] = String(tokens.limit);
    headers["x-ratelimit-remaining-tokens"] = String(tokens.remaining);
    headers["x-ratelimit-reset-tokens"] = formatDuration(tokens.resetMs);
  }
  return headers;
}

/** Milliseconds as Go's `time.Duration` prints them (OpenAI's format), to the millisecond. */
export function formatDuration(ms: number): string {
  const total = Math.max(0, Math.ceil(ms));
  if (total === 0) return "0s";
  if (total < 1000) return `${total}ms`;
  const hours = Math.floor(total / 3_600_000);
  const minutes = Math.floor((total % 3_600_000) / 60_000);
  const seconds = String((total % 60_000) / 1000);
  if (hours > 0) return `${hours}h${minutes}m${seconds}s`;
  return minutes > 0 ? `${minutes}m${seconds}s` : `${seconds}s`;
}

export interface Ticket {
  /** True while the response waits for an engine slot. */
  readonly queued: boolean;
  /** The key's per-minute limits for this tier right after this request was counted. */
  readonly rateLimits: RateLimitSnapshot;
  /** Resolves when the response may run; rejects (and leaves the queue) when `signal` aborts first. */
  wait(signal: AbortSignal): Promise<void>;
  /** Frees the slot or queue place and charges `tokens` to the key's tokens-per-minute. Idempotent. */
  release(tokens: number): void;
}

/**
 * A rolling one-minute sum in 60 one-second buckets: O(1) memory and time per request whatever the
 * limit, at the price of one-second precision (the same as `retry-after`'s).
 */
class MinuteWindow {
  readonly #buckets = new Float64Array(60);
  /** The second (since the epoch of `performance.now()`) the window was last moved to. */
  #second = 0;
  sum = 0;

  /** Moves the window to `second`, forgetting buckets that fell out of it. */
  advance(second: number): void {
    const steps = Math.min(second - this.#second, 60);
    for (let i = 1; i <= steps; i++) {
      const slot = (this.#second + i) % 60;
      this.sum -= this.#buckets[slot]!;
      this.#buckets[slot] = 0;
    }
    if (second > this.#second) this.#second = second;
  }

  add(amount: number): void {
    this.#buckets[this.#second % 60]! += amount;
    this.sum += amount;
  }

  /** Seconds until the sum drops below `limit` as old buckets fall out (at least 1). */
  secondsUntilBelow(limit: number): number {
    let sum = this.sum;
    for (let age = 59; age >= 0; age--) {
      sum -= this.#buckets[(this.#second - age + 60) % 60]!;
      if (sum < limit) return 60 - age;
    }
    return 60;
  }

  /** Milliseconds from `now` until every bucket now counted has fallen out of the window. */
  msUntilEmpty(now: number): number {
    for (let age = 0; age < 60; age++) {
      if (this.#buckets[(this.#second - age + 60) % 60]! !== 0) {
        return Math.max(0, (this.#second - age + 60) * 1000 - now);
      }
    }
    return 0;
  }
}

/** What one key has used of one tier in the last minute. */
class Usage {
  readonly requests = new MinuteWindow();
  /** Input plus output tokens of responses that ended. */
  readonly tokens = new MinuteWindow();
  /** Responses generating or queued now. */
  open = 0;

  advance(now: number): void {
    const second = Math.floor(now / 1000);
    this.requests.advance(second);
    this.tokens.advance(second);
  }

  get idle(): boolean {
    return this.open === 0 && this.requests.sum === 0 && this.tokens.sum === 0;
  }
}

interface Waiter {
  key: string;
  tier: Tier;
  grant: () => void;
}

/** One engine's slots and its two-class, round-robin-by-key queue. */
class Pool {
  active = 0;
  waiting = 0;
  /** `spark` grants made in a row while `deep` work waited (see the fairness rule above). */
  #sparkRun = 0;
  /** Exponential average of how long a response holds a slot, for `retry-after` on a full queue. */
  averageHoldMs = 1000;
  readonly #classes: Record<Tier, { byKey: Map<string, Waiter[]>; turns: string[] }> = {
    spark: { byKey: new Map(), turns: [] },
    deep: { byKey: new Map(), turns: [] },
  };

  constructor(
    readonly capacity: number,
    /** At most this many `spark` grants in a row while `deep` waits. */
    readonly maxSparkRun: number,
  ) {}

  enqueue(waiter: Waiter): void {
    const queue = this.#classes[waiter.tier];
    const own = queue.byKey.get(waiter.key);
    if (own) own.push(waiter);
    else {
      queue.byKey.set(waiter.key, [waiter]);
      queue.turns.push(waiter.key);
    }
    this.waiting++;
  }

  remove(waiter: Waiter): void {
    const queue = this.#classes[waiter.tier];
    const own = queue.byKey.get(waiter.key);
    const at = own?.indexOf(waiter) ?? -1;
    if (!own || at < 0) return;
    own.splice(at, 1);
    this.waiting--;
    if (own.length === 0) {
      queue.byKey.delete(waiter.key);
      queue.turns.splice(queue.turns.indexOf(waiter.key), 1);
    }
    if (this.#classes.deep.turns.length === 0) this.#sparkRun = 0;
  }

  /** Hands free slots to waiters: `spark` first unless `deep` has waited `maxSparkRun` grants; keys in turn. */
  grantNext(): void {
    while (this.active < this.capacity && this.waiting > 0) {
      const deepWaits = this.#classes.deep.turns.length > 0;
      const sparkFirst =
        this.#classes.spark.turns.length > 0 && !(deepWaits && this.#sparkRun >= this.maxSparkRun);
      if (!sparkFirst) this.#sparkRun = 0;
      else if (deepWaits) this.#sparkRun++;
      const queue = sparkFirst ? this.#classes.spark : this.#classes.deep;
      const key = queue.turns.shift()!;
      const own = queue.byKey.get(key)!;
      const waiter = own.shift()!;
      if (own.length > 0) queue.turns.push(key);
      else queue.byKey.delete(key);
      this.waiting--;
      this.active++;
      waiter.grant();
    }
  }
}

export class Admission {
  readonly #usage = new Map<string, Usage>();
  readonly #pools = new Map<Engine, Pool>();
  #admitted = 0;

  constructor(
    private readonly options: AdmissionOptions = DEFAULT_ADMISSION,
    private readonly metrics?: Metrics,
  ) {}

  /** Responses waiting for an engine, over all engines. */
  get queued(): number {
    let waiting = 0;
    for (const pool of this.#pools.values()) waiting += pool.waiting;
    return waiting;
  }

  /** Checks the key's limits and the engine's queue; throws a 429 `SparkError` when over. */
  admit(principal: Principal, tier: Tier, engine: Engine, capacity: number): Ticket {
    const now = performance.now();
    const usage = this.#usageOf(principal, tier, now);
    const limits = principal.limits[tier];
    this.#checkLimits(usage, limits, tier, now);

    let pool = this.#pools.get(engine);
    if (!pool) {
      pool = new Pool(capacity, this.options.sparkRun ?? DEFAULT_SPARK_RUN);
      this.#pools.set(engine, pool);
    }
    const mustWait = pool.active >= pool.capacity || pool.waiting > 0;
    if (mustWait && pool.waiting >= this.options.maxQueue) {
      const seconds = Math.max(1, Math.ceil(((pool.waiting / pool.capacity) * pool.averageHoldMs) / 1000));
      this.metrics?.rateLimited.inc({ tier, limit: "queue" });
      throw new SparkError(
        429,
        "server_error",
        "queue_full",
        `The server is busy: ${pool.waiting} responses are waiting for the ${tier} engine. Retry in ${seconds} s.`,
        null,
        { "retry-after": String(seconds), ...rateLimitHeaders(snapshotOf(usage, limits, now)) },
      );
    }

    usage.requests.add(1);
    usage.open++;
    const rateLimits = snapshotOf(usage, limits, now);
    if (++this.#admitted % 1024 === 0) this.#sweep(now);
    return this.#ticket(pool, usage, principal.id, tier, mustWait, rateLimits);
  }

  /**
   * Charges a request that runs no engine (`generate: false`): one request and `tokens` against
   * the key's per-minute limits, after checking them like `admit` does (it holds nothing, so the
   * concurrency limit does not apply). Throws the same 429s. Returns the limits as they stand after.
   */
  charge(principal: Principal, tier: Tier, tokens: number): RateLimitSnapshot {
    const now = performance.now();
    const usage = this.#usageOf(principal, tier, now);
    const limits = principal.limits[tier];
    this.#checkLimits(usage, { ...limits, concurrent: undefined }, tier, now);
    usage.requests.add(1);
    if (tokens > 0) usage.tokens.add(tokens);
    const rateLimits = snapshotOf(usage, limits, now);
    if (++this.#admitted % 1024 === 0) this.#sweep(now);
    return rateLimits;
  }

  /** The key's usage of `tier`, moved to `now`. */
  #usageOf(principal: Principal, tier: Tier, now: number): Usage {
    const usageKey = `${principal.id}\u0000${tier}`;
    let usage = this.#usage.get(usageKey);
    if (!usage) {
      usage = new Usage();
      this.#usage.set(usageKey, usage);
    }
    usage.advance(now);
    return usage;
  }

  #checkLimits(usage: Usage, limits: TierLimits, tier: Tier, now: number): void {
    const rpm = limits.requestsPerMinute;
    if (rpm !== undefined && usage.requests.sum >= rpm) {
      const seconds = usage.requests.secondsUntilBelow(rpm);
      throw this.#refusal(
        "requests",
        `requests per minute (limit ${rpm})`,
        seconds,
        usage,
        limits,
        tier,
        now,
      );
    }
    const tpm = limits.tokensPerMinute;
    if (tpm !== undefined && usage.tokens.sum >= tpm) {
      const seconds = usage.tokens.secondsUntilBelow(tpm);
      throw this.#refusal("tokens", `tokens per minute (limit ${tpm})`, seconds, usage, limits, tier, now);
    }
    const concurrent = limits.concurrent;
    if (concurrent !== undefined && usage.open >= concurrent) {
      throw this.#refusal(
        "requests",
        `concurrent responses (limit ${concurrent})`,
        1,
        usage,
        limits,
        tier,
        now,
      );
    }
  }

  /** The 429 for a limit reached (a method, not a closure made on every admitted request). */
  #refusal(
    kind: "requests" | "tokens",
    what: string,
    seconds: number,
    usage: Usage,
    limits: TierLimits,
    tier: Tier,
    now: number,
  ): SparkError {
    this.metrics?.rateLimited.inc({ tier, limit: what });
    return new SparkError(
      429,
      kind,
      "rate_limit_exceeded",
      `Rate limit reached for the ${tier} tier on ${what}. Retry in ${seconds} s.`,
      null,
      { "retry-after": String(seconds), ...rateLimitHeaders(snapshotOf(usage, limits, now)) },
    );
  }

  #ticket(
    pool: Pool,
    usage: Usage,
    key: string,
    tier: Tier,
    mustWait: boolean,
    rateLimits: RateLimitSnapshot,
  ): Ticket {
    let state: "queued" | "running" | "released" = mustWait ? "queued" : "running";
    let startedAt = performance.now();
    let granted: () => void = () => {};
    const queuedAt = startedAt;
    const metrics = this.metrics;
    const waiter: Waiter = {
      key,
      tier,
      grant: () => {
        state = "running";
        startedAt = performance.now();
        metrics?.queueLength.dec({ tier });
        metrics?.queueWait.observe({ tier }, (startedAt - queuedAt) / 1000);
        granted();
      },
    };
    if (mustWait) {
      pool.enqueue(waiter);
      this.metrics?.queueLength.inc({ tier });
    } else pool.active++;

    return {
      get queued() {
        return state === "queued";
      },
      rateLimits,
      wait(signal: AbortSignal): Promise<void> {
        if (state !== "queued") return Promise.resolve();
        return new Promise<void>((resolve, reject) => {
          const onAbort = (): void => reject(signal.reason);
          granted = () => {
            signal.removeEventListener("abort", onAbort);
            resolve();
          };
          if (signal.aborted) onAbort();
          else signal.addEventListener("abort", onAbort, { once: true });
        });
      },
      release(tokens: number): void {
        if (state === "released") return;
        if (state === "queued") {
          pool.remove(waiter);
          metrics?.queueLength.dec({ tier });
        } else {
          pool.active--;
          pool.averageHoldMs = pool.averageHoldMs * 0.9 + (performance.now() - startedAt) * 0.1;
        }
        state = "released";
        usage.open--;
        if (tokens > 0) {
          usage.advance(performance.now());
          usage.tokens.add(tokens);
        }
        pool.grantNext();
      },
    };
  }

  /** Forgets keys with no recent use, so the map does not grow with every key ever seen. */
  #sweep(now: number): void {
    for (const [key, usage] of this.#usage) {
      usage.advance(now);
      if (usage.idle) this.#usage.delete(key);
    }
  }
}

/** The per-minute limits of `limits` that are set, as `usage` (moved to `now`) stands. */
function snapshotOf(usage: Usage, limits: TierLimits, now: number): RateLimitSnapshot {
  const snapshot: RateLimitSnapshot = {};
  if (limits.requestsPerMinute !== undefined)
    snapshot.requests = stateOf(limits.requestsPerMinute, usage.requests, now);
  if (limits.tokensPerMinute !== undefined)
    snapshot.tokens = stateOf(limits.tokensPerMinute, usage.tokens, now);
  return snapshot;
}

/** One per-minute limit as `window` (moved to `now`) stands. */
function stateOf(limit: number, window: MinuteWindow, now: number): RateLimitState {
  return { limit, remaining: Math.max(0, limit - window.sum), resetMs: window.msUntilEmpty(now) };
}
