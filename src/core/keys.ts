/**
 * API keys and the principal a request acts as. Keys are never stored: the server keeps the SHA-256
 * of each key and hashes what a client presents. Spark's keys are 256-bit random tokens, so a fast
 * hash is enough (a slow password hash protects guessable secrets and would cost milliseconds per
 * request). The digest is looked up in a map; comparing digests leaks nothing about the key.
 *
 * Without keys the server runs single-user: every request is the `anonymous` principal, and the
 * CLI binds to loopback only unless told otherwise.
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
  readonly #byHash = new Map<string, Principal>();
  readonly #anonymous: Principal;
  /**
   * Digests of keys presented before that named a principal, so a client's every request does not
   * hash its key again (a cold SHA-256 was a tenth of what keys, routing and limits added per
   * request). Only the digest is remembered: the principal is looked up by digest every time, so a
   * key removed from the ring stops working at once. Wrong keys are never cached.
   */
  readonly #digests = new Map<string, string>();

  constructor(records: readonly KeyRecord[], defaults: Limits = {}) {
    const merge = (limits: Limits = {}): Principal["limits"] => ({
      spark: { ...defaults.spark, ...limits.spark },
      deep: { ...defaults.deep, ...limits.deep },
    });
    this.#anonymous = { id: ANONYMOUS, limits: merge() };
    for (const record of records) {
      this.#byHash.set(record.hash.toLowerCase(), { id: record.id, limits: merge(record.limits) });
    }
  }

  /** True when keys are configured and every request must carry one. */
  get required(): boolean {
    return this.#byHash.size > 0;
  }

  get size(): number {
    return this.#byHash.size;
  }

  /** The principal of an `Authorization` header value; 401 when keys are required and it is missing or wrong. */
  authenticate(authorization: string | undefined): Principal {
    if (!this.required) return this.#anonymous;
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
        `Incorrect API key provided: ${shown}. Ask the server's operator for a key (spark keys create).`,
        null,
        { "www-authenticate": 'Bearer realm="spark", error="invalid_token"' },
      );
    }
    return principal;
  }
}
