/**
 * Admission with limits that hold across a fleet: the shared store (a `SharedLimiter`, Redis)
 * decides the per-key, per-tier limits; the instance's own `Admission` still runs its engine queue.
 *
 * Contracts:
 * - `LimitGate` is what the services call: `Admission` itself (one instance, synchronous) or a
 *   `SharedAdmission` (a fleet, one round trip to the store per request). Callers `await` both.
 * - A key and tier with no limit set never reaches the store (nothing to share).
 * - Otherwise the store's answer decides, and the instance's `Admission` sees the request without
 *   limits (its queue and its own counts still run, so it holds this instance's recent history if
 *   it must take over). A refusal is the same 429 as on one instance, with `retry-after` and the
 *   `x-ratelimit-*` headers from the fleet's counts; a request the local queue then refuses
 *   (`queue_full`) is refunded in the store.
 * - Store unreachable: `open` (default) falls back to the instance's own limits, as configured,
 *   per instance; `closed` answers 503 `limits_unavailable` (only for keys that have limits).
 * - A ticket is released exactly once, in the store too: its slot ends and its tokens are charged
 *   (to the fleet and to the instance's own counts).
 * - `counts()` is this instance's queued and generating responses per tier, for the fleet view.
 */
import type { Engine } from "../../engine/types.js";
import { SparkError } from "../../protocol/errors.js";
import {
  rateLimitHeaders,
  type Admission,
  type RateLimitSnapshot,
  type RateLimitState,
  type Ticket,
} from "../admission.js";
import type { Principal, TierLimits } from "../keys.js";
import type { Metrics } from "../metrics.js";
import type { Tier } from "../model-registry.js";
import {
  SharedStoreUnavailable,
  type SharedAnswer,
  type SharedLimiter,
  type SharedWindow,
  type TierCounts,
} from "./shared.js";

/** What the services need from admission: one instance's `Admission` or a fleet's `SharedAdmission`. */
export interface LimitGate {
  readonly queued: number;
  admit(principal: Principal, tier: Tier, engine: Engine, capacity: number): Ticket | Promise<Ticket>;
  charge(principal: Principal, tier: Tier, tokens: number): RateLimitSnapshot | Promise<RateLimitSnapshot>;
}

export type FailureMode = "open" | "closed";

export interface SharedAdmissionOptions {
  failure: FailureMode;
  metrics?: Metrics;
}

const NO_LIMITS: Principal["limits"] = { spark: {}, deep: {} };

export class SharedAdmission implements LimitGate {
  /** Tickets not yet released, with their tier, for `counts()`. */
  readonly #open = new Map<Ticket, Tier>();

  constructor(
    private readonly local: Admission,
    private readonly shared: SharedLimiter,
    private readonly options: SharedAdmissionOptions,
  ) {}

  get queued(): number {
    return this.local.queued;
  }

  async admit(principal: Principal, tier: Tier, engine: Engine, capacity: number): Promise<Ticket> {
    const limits = principal.limits[tier];
    if (!hasLimits(limits)) return this.#track(this.local.admit(principal, tier, engine, capacity), tier);
    const answer = await this.#acquire(principal, tier, limits, true, 0);
    if (answer === "local") return this.#track(this.local.admit(principal, tier, engine, capacity), tier);
    if (!answer.admitted) throw this.#refusal(answer, limits, tier);
    let ticket: Ticket;
    try {
      ticket = this.local.admit(withoutLimits(principal), tier, engine, capacity);
    } catch (error) {
      this.shared.refund(answer.grant);
      throw error;
    }
    const shared = this.shared;
    const grant = answer.grant;
    return this.#track(ticket, tier, snapshotOf(limits, answer.requests, answer.tokens), (tokens) =>
      shared.release(grant, tokens),
    );
  }

  async charge(principal: Principal, tier: Tier, tokens: number): Promise<RateLimitSnapshot> {
    const limits = principal.limits[tier];
    if (!hasLimits(limits)) return this.local.charge(principal, tier, tokens);
    const answer = await this.#acquire(principal, tier, limits, false, tokens);
    if (answer === "local") return this.local.charge(principal, tier, tokens);
    if (!answer.admitted) throw this.#refusal(answer, limits, tier);
    this.local.charge(withoutLimits(principal), tier, tokens);
    return snapshotOf(limits, answer.requests, answer.tokens);
  }

  /** This instance's responses per tier: waiting for an engine slot, and holding one. */
  counts(): TierCounts {
    const counts: TierCounts = { spark: { queued: 0, inFlight: 0 }, deep: { queued: 0, inFlight: 0 } };
    for (const [ticket, tier] of this.#open) {
      if (ticket.queued) counts[tier].queued++;
      else counts[tier].inFlight++;
    }
    return counts;
  }

  /** The store's answer, or "local" when it cannot be reached and the failure mode is `open`. */
  async #acquire(
    principal: Principal,
    tier: Tier,
    limits: TierLimits,
    hold: boolean,
    tokens: number,
  ): Promise<SharedAnswer | "local"> {
    try {
      return await this.shared.acquire({
        key: principal.id,
        tier,
        limits,
        hold: hold && limits.concurrent !== undefined,
        tokens,
      });
    } catch (error) {
      if (!(error instanceof SharedStoreUnavailable)) throw error;
      if (this.options.failure === "open") return "local";
      this.options.metrics?.rateLimited.inc({ tier, limit: "unavailable" });
      throw new SparkError(
        503,
        "server_error",
        "limits_unavailable",
        `The rate limits shared by this server's instances cannot be checked (${error.message}), and the server is set to refuse requests then (--redis-failure closed). Retry shortly.`,
        null,
        { "retry-after": "1" },
      );
    }
  }

  #refusal(answer: Extract<SharedAnswer, { admitted: false }>, limits: TierLimits, tier: Tier): SparkError {
    const what =
      answer.limit === "requests"
        ? `requests per minute (limit ${limits.requestsPerMinute})`
        : answer.limit === "tokens"
          ? `tokens per minute (limit ${limits.tokensPerMinute})`
          : `concurrent responses (limit ${limits.concurrent})`;
    this.options.metrics?.rateLimited.inc({ tier, limit: what });
    const seconds = answer.retryAfterSeconds;
    return new SparkError(
      429,
      answer.limit === "tokens" ? "tokens" : "requests",
      "rate_limit_exceeded",
      `Rate limit reached for the ${tier} tier on ${what}, counted over all of this server's instances. Retry in ${seconds} s.`,
      null,
      {
        "retry-after": String(seconds),
        ...rateLimitHeaders(snapshotOf(limits, answer.requests, answer.tokens)),
      },
    );
  }

  /**
   * `ticket` as handed out: counted in `counts()` until released, with the fleet's numbers (when
   * the store decided) and its release reported to the store, exactly once.
   */
  #track(
    ticket: Ticket,
    tier: Tier,
    rateLimits: RateLimitSnapshot = ticket.rateLimits,
    onRelease?: (tokens: number) => void,
  ): Ticket {
    const open = this.#open;
    let released = false;
    const tracked: Ticket = {
      get queued() {
        return ticket.queued;
      },
      rateLimits,
      wait: (signal) => ticket.wait(signal),
      release(tokens: number): void {
        ticket.release(tokens);
        if (released) return;
        released = true;
        open.delete(tracked);
        onRelease?.(tokens);
      },
    };
    open.set(tracked, tier);
    return tracked;
  }
}

function hasLimits(limits: TierLimits): boolean {
  return (
    limits.requestsPerMinute !== undefined ||
    limits.tokensPerMinute !== undefined ||
    limits.concurrent !== undefined
  );
}

/** The principal as the instance's own admission sees it while the fleet's limits apply. */
function withoutLimits(principal: Principal): Principal {
  return { id: principal.id, limits: NO_LIMITS };
}

function snapshotOf(limits: TierLimits, requests: SharedWindow, tokens: SharedWindow): RateLimitSnapshot {
  const snapshot: RateLimitSnapshot = {};
  const state = (limit: number, window: SharedWindow): RateLimitState => ({
    limit,
    remaining: Math.max(0, limit - window.used),
    resetMs: window.resetMs,
  });
  if (limits.requestsPerMinute !== undefined) snapshot.requests = state(limits.requestsPerMinute, requests);
  if (limits.tokensPerMinute !== undefined) snapshot.tokens = state(limits.tokensPerMinute, tokens);
  return snapshot;
}
