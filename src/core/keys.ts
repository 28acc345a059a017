/**
 * API keys and the principal a request acts as. Keys are never stored: the server keeps the SHA-256
 * of each key and hashes what a client presents. Spark's keys are 256-bit random tokens, so a fast
 * hash is enough (a slow password hash protects guessable secrets and would cost milliseconds per
 * request). The digest is looked up in a map; comparing digests leaks nothing about the key.
 *
 * Without keys the server runs single-user: every request is the `anonymous` principal, and the
 * CLI binds to loopback only unless told otherwise.
 *
 * A ring changes while the server runs: `replace` swaps in a reloaded key file at once (one map
 * assignment, so a request sees the old keys or the new ones, never a mix), and `revoke` drops a
 * key for good (a revoked hash stays refused even if a later file still lists it: revocations come
 * from the fleet, through Redis, and outlive any one copy of the key file). Once a ring has
 * required keys it always does, so a reload to an empty file locks everyone out instead of opening
 * the server. A principal remembers the hash it authenticated with, so a long-lived connection can
 * ask `verify` before each turn whether its key still stands.
 */
import { createHash, randomBytes } from "node:crypto";
import { SparkError } from "../protocol/errors.js";
import type { Tier } from "./model-registry.js";

export interface TierLimits {
  /** Requests started per rolling minute. */
  requestsPerMinute?: number | undefined;
  /** Input plus output tokens per rolling minute, counted when a response ends. */
  tokensPerMinute?: number | undefined;
  /** Responses generating or queued at once. */
  concurrent?: number | undefined;
}

export type Limits = { [tier in Tier]?: TierLimits | undefined };

export interface KeyRecord {
  /** Stable name of the key holder: the owner of its stored responses, shown in logs. */
  id: string;
  /** `sha256:` followed by the hex digest of the key. */
  hash: string;
  /** Overrides of the server's per-tier limits for this key. */
  limits?: Limits | undefined;
}

export interface Principal {
  id: string;
  limits: Required<Record<Tier, TierLimits>>;
  /** The hash of the key it authenticated with (absent for `anonymous`). */
  keyHash?: string;
}

export const ANONYMOUS = "anonymous";

/** The principal of servers and tests without keys or limits. */
export const anonymousPrincipal: Principal = { id: ANONYMOUS, limits: { spark: {}, deep: {} } };
const KEY_PREFIX = "sk-spark-";

export function hashKey(key: string): string {
  return `sha256:${createHash("sha256").update(key).digest("hex")}`;
}

/** A new random key (shown once to its holder) and the hash to store. */
export function generateKey(): { key: string; hash: string } {
  const key = KEY_PREFIX + randomBytes(32).toString("base64url");
  return { key, hash: hashKey(key) };
}

/** Keys whose digest `KeyRing` remembers (the most recently first seen; a few per client). */
const DIGEST_CACHE_KEYS = 1024;

export class KeyRing {
  #byHash = new Map<string, Principal>();
  #anonymous: Principal;
  readonly #revoked = new Set<string>();
  #required = false;
  /**
   * Digests of keys presented before that named a principal, so a client's every request does not
   * hash its key again (a cold SHA-256 was a tenth of what keys, routing and limits added per
   * request). Only the digest is remembered: the principal is looked up by digest every time, so a
   * key removed from the ring stops working at once. Wrong keys are never cached.
   */
  readonly #digests = new Map<string, string>();

  constructor(records: readonly KeyRecord[], defaults: Limits = {}) {
    this.#anonymous = { id: ANONYMOUS, limits: mergeLimits(defaults) };
    this.replace(records, defaults);
  }

  /** Swaps in a new set of keys and default limits (a reloaded key file); revoked hashes stay out. */
  replace(records: readonly KeyRecord[], defaults: Limits = {}): void {
    const byHash = new Map<string, Principal>();
    for (const record of records) {
      const hash = record.hash.toLowerCase();
      if (this.#revoked.has(hash)) continue;
      byHash.set(hash, { id: record.id, limits: mergeLimits(defaults, record.limits), keyHash: hash });
    }
    this.#anonymous = { id: ANONYMOUS, limits: mergeLimits(defaults) };
    this.#byHash = byHash;
    if (records.length > 0) this.#required = true;
  }

  /** Refuses `hash` from now on, whatever a key file says; returns the id it belonged to, if any. */
  revoke(hash: string): string | undefined {
    const normal = hash.toLowerCase();
    this.#revoked.add(normal);
    const principal = this.#byHash.get(normal);
    this.#byHash.delete(normal);
    return principal?.id;
  }

  isRevoked(hash: string): boolean {
    return this.#revoked.has(hash.toLowerCase());
  }

  /** The hash of the key with this id, if the ring holds one. */
  hashOf(id: string): string | undefined {
    for (const [hash, principal] of this.#byHash) if (principal.id === id) return hash;
    return undefined;
  }

  /**
   * Throws the 401 a new request with this principal's key would get now (revoked or removed since
   * it authenticated); a connection checks this before each turn.
   */
  verify(principal: Principal): void {
    if (!this.required) return;
    if (principal.keyHash !== undefined && this.#byHash.has(principal.keyHash)) return;
    throw new SparkError(
      401,
      "invalid_request_error",
      "invalid_api_key",
      `The API key of '${principal.id}' has been revoked or removed; ask the server's operator for a new key (spark keys create).`,
      null,
      { "www-authenticate": 'Bearer realm="spark", error="invalid_token"' },
    );
  }

  /** True when keys are configured and every request must carry one. */
  get required(): boolean {
    return this.#required;
  }

  get size(): number {
    return this.#byHash.size;
  }

  /** The principal of an `Authorization` header value; 401 when keys are required and it is missing or wrong. */
  authenticate(authorization: string | undefined): Principal {
    if (!this.#required) return this.#anonymous;
    const match = authorization === undefined ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (!match) {
      throw new SparkError(
        401,
        "invalid_request_error",
        "missing_api_key",
        "You didn't provide an API key. Send it in the Authorization header: 'Authorization: Bearer YOUR_KEY'.",
        null,
        { "www-authenticate": 'Bearer realm="spark"' },
      );
    }
    const token = match[1]!;
    const known = this.#digests.get(token);
    const digest = known ?? hashKey(token);
    const principal = this.#byHash.get(digest);
    if (principal && known === undefined) {
      if (this.#digests.size >= DIGEST_CACHE_KEYS) this.#digests.delete(this.#digests.keys().next().value!);
      this.#digests.set(token, digest);
    }
    if (!principal) {
      const key = match[1]!;
      const shown = key.length > 12 ? `${key.slice(0, 9)}...${key.slice(-4)}` : "***";
      throw new SparkError(
        401,
        "invalid_request_error",
        "invalid_api_key",
        this.#revoked.has(digest)
          ? `The API key ${shown} has been revoked. Ask the server's operator for a new key (spark keys create).`
          : `Incorrect API key provided: ${shown}. Ask the server's operator for a key (spark keys create).`,
        null,
        { "www-authenticate": 'Bearer realm="spark", error="invalid_token"' },
      );
    }
    return principal;
  }
}

function mergeLimits(defaults: Limits, limits: Limits = {}): Principal["limits"] {
  return {
    spark: { ...defaults.spark, ...limits.spark },
    deep: { ...defaults.deep, ...limits.deep },
  };
}
