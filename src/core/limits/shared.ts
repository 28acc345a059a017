/**
 * The seam between admission and a store that many instances share (Redis, `src/store/redis-*.ts`).
 * The core only sees these interfaces; the concrete client stays outside it (lint keeps it out).
 *
 * Contracts of a `SharedLimiter`:
 * - `acquire` is one atomic step in the shared store: it checks the key's per-minute requests and
 *   tokens and its concurrent responses for one tier across every instance, and when all allow it,
 *   counts the request and (with `hold`) takes a concurrent slot, in the same step. The answer says
 *   what stands afterwards (or why it was refused and when to retry), for the `x-ratelimit-*` and
 *   `retry-after` headers.
 * - A slot is a lease: the instance that holds it renews it while the response runs, so a crashed
 *   instance's slots come back on their own once the lease ends.
 * - `release` ends the slot and charges the response's tokens; it never throws (a store that went
 *   away loses the charge and the lease ends the slot). `refund` undoes an acquire whose response
 *   never ran (the instance's own queue refused it).
 * - A store that cannot answer rejects with `SharedStoreUnavailable`; the caller decides between
 *   the instance's own limits (`open`) and a 503 (`closed`).
 */
import type { TierLimits } from "../keys.js";
import type { Tier } from "../model-registry.js";

export interface SharedAcquire {
  /** The key's id (principal id). */
  key: string;
  tier: Tier;
  limits: TierLimits;
  /** Take a concurrent slot (a response that runs an engine); false only counts (`generate: false`). */
  hold: boolean;
  /** Tokens to charge at once (`generate: false` input, estimated); 0 for responses. */
  tokens: number;
}

/** What a per-minute limit looks like after the acquire: the numbers behind `x-ratelimit-*`. */
export interface SharedWindow {
  /** Requests (or tokens) counted in the rolling minute, over the fleet. */
  used: number;
  /** Milliseconds until the rolling minute holds nothing. */
  resetMs: number;
}

export type SharedAnswer =
  | { admitted: true; grant: SharedGrant; requests: SharedWindow; tokens: SharedWindow }
  | {
      admitted: false;
      /** The limit that refused: requests per minute, tokens per minute or concurrent responses. */
      limit: "requests" | "tokens" | "concurrent";
      retryAfterSeconds: number;
      requests: SharedWindow;
      tokens: SharedWindow;
    };

/** A counted request (and its slot, if it holds one), to release or refund exactly once. */
export interface SharedGrant {
  readonly key: string;
  readonly tier: Tier;
  /** The slot's id in the shared store; absent when the request holds none. */
  readonly slot?: string;
  /** The second (store clock) the request was counted in, for a refund. */
  readonly second: number;
}

export class SharedStoreUnavailable extends Error {}

export interface SharedLimiter {
  /** Whether the store answered the last time it was asked (or connected since). */
  readonly up: boolean;
  acquire(request: SharedAcquire): Promise<SharedAnswer>;
  release(grant: SharedGrant, tokens: number): void;
  refund(grant: SharedGrant): void;
}

/** Responses waiting and generating, per tier: one instance's, or the fleet's sum. */
export type TierCounts = Record<Tier, { queued: number; inFlight: number }>;

/** What `/healthz` and `/metrics` say about the shared store and the fleet. */
export interface FleetStatus {
  /** Whether the shared store answers now, and if not, why. */
  health(): { ok: boolean; detail: string };
  /** The fleet's queue view, once read. */
  view(): FleetView | undefined;
}

/** The fleet's queue view, as last read from the shared store. */
export interface FleetView {
  /** Instances that reported within the freshness window (this one included). */
  instances: number;
  tiers: TierCounts;
  /** Milliseconds since the view was read; grows while the store cannot be reached. */
  ageMs: number;
}
