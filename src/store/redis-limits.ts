/**
 * Per-key, per-tier limits that hold across every instance, kept in Redis (the `SharedLimiter` of
 * `src/core/limits/shared.ts`). One Lua script per admission, so checking and counting are one
 * atomic step however many instances admit at once.
 *
 * The algorithm (the same as one instance's `Admission`, moved into Redis):
 * - Requests and tokens per rolling minute: a hash per key and tier whose fields are seconds (of
 *   Redis's own clock, `TIME`, so instances' clocks do not matter) and whose values are what was
 *   counted in that second. The window is the last 60 seconds; older fields are deleted as the
 *   script meets them, and the hash expires a minute after its last write. A request is admitted
 *   while the sum is below the limit, so a burst of the full limit is admitted at once and the next
 *   one is refused until the oldest second leaves the window: `retry-after` is the number of
 *   seconds until enough of it has (at least 1). Tokens are charged when a response ends.
 * - Concurrent responses: a sorted set of slots per key and tier, scored by when each slot's lease
 *   ends (Redis time, ms). Admission first drops expired slots, then takes one if fewer than the
 *   limit remain. The instance renews its slots' leases every third of a lease while their
 *   responses run and removes each when its response ends, so a killed instance's slots are free
 *   again at most one lease later. Renewal re-adds a slot a restarted (empty) Redis lost.
 * - A limit that is not set is neither read nor counted.
 * Keys are `spark:limits:{ID:TIER}:requests|tokens|slots` (the braces keep one key's data in one
 * Redis Cluster slot, so each script touches one slot).
 */
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import type { Tier } from "../core/model-registry.js";
import type {
  SharedAcquire,
  SharedAnswer,
  SharedGrant,
  SharedLimiter,
  SharedWindow,
} from "../core/limits/shared.js";
import { redisScript, type RedisLink } from "./redis-link.js";

/** Reads a window (dropping seconds that left it): its sum, seconds until below `limit`, ms until empty. */
const WINDOW_LUA = `
local function window(key, limit, second, nowMs)
  local flat = redis.call('HGETALL', key)
  local seconds, counts, stale = {}, {}, {}
  local sum = 0
  for i = 1, #flat, 2 do
    local s = tonumber(flat[i])
    if s <= second - 60 then
      stale[#stale + 1] = flat[i]
    else
      seconds[#seconds + 1] = s
      counts[s] = tonumber(flat[i + 1])
      sum = sum + counts[s]
    end
  end
  if #stale > 0 then redis.call('HDEL', key, unpack(stale)) end
  table.sort(seconds)
  local retry = 0
  if sum >= limit then
    retry = 60
    local left = sum
    for _, s in ipairs(seconds) do
      left = left - counts[s]
      if left < limit then
        retry = math.max(1, s + 60 - second)
        break
      end
    end
  end
  local resetMs = 0
  if #seconds > 0 then resetMs = math.max(0, (seconds[#seconds] + 60) * 1000 - nowMs) end
  return sum, retry, resetMs
end
`;

/**
 * KEYS: requests, tokens, slots. ARGV: rpm, tpm, concurrent (-1: not set), hold (1/0), slot id,
 * lease ms, tokens to charge now. Returns {admitted 1/0, refused by (1 requests, 2 tokens,
 * 3 concurrent), retry-after s or the second counted in, requests used, requests reset ms, tokens
 * used, tokens reset ms}.
 */
const ACQUIRE = redisScript(
  `${WINDOW_LUA}
local now = redis.call('TIME')
local second = tonumber(now[1])
local nowMs = second * 1000 + math.floor(tonumber(now[2]) / 1000)
local rpm, tpm, concurrent = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local rUsed, rRetry, rReset, tUsed, tRetry, tReset = 0, 0, 0, 0, 0, 0
if rpm >= 0 then rUsed, rRetry, rReset = window(KEYS[1], rpm, second, nowMs) end
if tpm >= 0 then tUsed, tRetry, tReset = window(KEYS[2], tpm, second, nowMs) end
if rpm >= 0 and rUsed >= rpm then return {0, 1, rRetry, rUsed, rReset, tUsed, tReset} end
if tpm >= 0 and tUsed >= tpm then return {0, 2, tRetry, rUsed, rReset, tUsed, tReset} end
if concurrent >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', nowMs)
  if redis.call('ZCARD', KEYS[3]) >= concurrent then return {0, 3, 1, rUsed, rReset, tUsed, tReset} end
  if ARGV[4] == '1' then
    local lease = tonumber(ARGV[6])
    redis.call('ZADD', KEYS[3], nowMs + lease, ARGV[5])
    redis.call('PEXPIRE', KEYS[3], lease * 2)
  end
end
local endMs = (second + 60) * 1000 - nowMs
if rpm >= 0 then
  redis.call('HINCRBY', KEYS[1], second, 1)
  redis.call('PEXPIRE', KEYS[1], 61000)
  rUsed, rReset = rUsed + 1, endMs
end
local tokens = tonumber(ARGV[7])
if tpm >= 0 and tokens > 0 then
  redis.call('HINCRBY', KEYS[2], second, tokens)
  redis.call('PEXPIRE', KEYS[2], 61000)
  tUsed, tReset = tUsed + tokens, endMs
end
return {1, 0, second, rUsed, rReset, tUsed, tReset}
`,
  3,
);

/** KEYS: tokens, slots. ARGV: slot id ('' for none), tokens to charge (0 for none). */
const RELEASE = redisScript(
  `
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[2], ARGV[1]) end
local tokens = tonumber(ARGV[2])
if tokens > 0 then
  local now = redis.call('TIME')
  redis.call('HINCRBY', KEYS[1], now[1], tokens)
  redis.call('PEXPIRE', KEYS[1], 61000)
end
return 1
`,
  2,
);

/** KEYS: requests, slots. ARGV: slot id ('' for none), the second the request was counted in. */
const REFUND = redisScript(
  `
if ARGV[1] ~= '' then redis.call('ZREM', KEYS[2], ARGV[1]) end
if ARGV[2] ~= '' and redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], -1)
end
return 1
`,
  2,
);

/** KEYS: slots. ARGV: lease ms, then the slot ids to renew (re-added if Redis lost them). */
const RENEW = redisScript(
  `
local now = redis.call('TIME')
local leaseEnd = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[1])
for i = 2, #ARGV do redis.call('ZADD', KEYS[1], leaseEnd, ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[1]) * 2)
return 1
`,
  1,
);

export const DEFAULT_LEASE_MS = 30_000;

interface Grant extends SharedGrant {
  /** Whether the key's tokens per minute is set (only then are tokens charged). */
  readonly chargeTokens: boolean;
}

export class RedisLimiter implements SharedLimiter {
  /** Unique per process: slot ids are `INSTANCE:N`. */
  readonly instance = `${hostname()}:${process.pid}:${randomBytes(4).toString("hex")}`;
  readonly #leaseMs: number;
  /** Slots this instance holds, by their slots key: renewed until released. */
  readonly #held = new Map<string, Set<string>>();
  #nextSlot = 0;
  readonly #renewal: NodeJS.Timeout;

  constructor(
    private readonly link: RedisLink,
    options: { leaseMs?: number } = {},
  ) {
    this.#leaseMs = options.leaseMs ?? DEFAULT_LEASE_MS;
    for (const script of [ACQUIRE, RELEASE, REFUND, RENEW]) link.register(script);
    this.#renewal = setInterval(() => this.#renew(), Math.max(100, this.#leaseMs / 3)).unref();
  }

  get up(): boolean {
    return this.link.up;
  }

  get leaseMs(): number {
    return this.#leaseMs;
  }

  /** Slots held now (responses of limited keys generating or queued on this instance). */
  get held(): number {
    let count = 0;
    for (const slots of this.#held.values()) count += slots.size;
    return count;
  }

  async acquire(request: SharedAcquire): Promise<SharedAnswer> {
    const keys = keysOf(request.key, request.tier);
    const { limits } = request;
    const slot = request.hold ? `${this.instance}:${++this.#nextSlot}` : "";
    // Renewed only once admitted; `release` stops renewing before it removes the slot, and one
    // connection keeps commands in order, so a renewal never brings a released slot back.
    const reply = (await this.link.run(
      ACQUIRE,
      [keys.requests, keys.tokens, keys.slots],
      [
        limitOf(limits.requestsPerMinute),
        limitOf(limits.tokensPerMinute),
        limitOf(limits.concurrent),
        request.hold ? 1 : 0,
        slot,
        this.#leaseMs,
        Math.max(0, Math.round(request.tokens)),
      ],
    )) as number[];
    const [admitted, refusedBy, third, requestsUsed, requestsReset, tokensUsed, tokensReset] = reply.map(
      Number,
    ) as [number, number, number, number, number, number, number];
    const requests: SharedWindow = { used: requestsUsed, resetMs: requestsReset };
    const tokens: SharedWindow = { used: tokensUsed, resetMs: tokensReset };
    if (admitted !== 1) {
      const limit = refusedBy === 1 ? "requests" : refusedBy === 2 ? "tokens" : "concurrent";
      return { admitted: false, limit, retryAfterSeconds: Math.max(1, third), requests, tokens };
    }
    if (slot) this.#hold(keys.slots, slot);
    const grant: Grant = {
      key: request.key,
      tier: request.tier,
      second: third,
      chargeTokens: limits.tokensPerMinute !== undefined,
      ...(slot ? { slot } : {}),
    };
    return { admitted: true, grant, requests, tokens };
  }

  release(grant: SharedGrant, tokens: number): void {
    const keys = keysOf(grant.key, grant.tier);
    if (grant.slot) this.#drop(keys.slots, grant.slot);
    const charge = (grant as Grant).chargeTokens ? Math.max(0, Math.round(tokens)) : 0;
    if (!grant.slot && charge === 0) return;
    // Lost with Redis: the lease frees the slot, and the tokens go uncharged.
    this.link.run(RELEASE, [keys.tokens, keys.slots], [grant.slot ?? "", charge]).catch(() => {});
  }

  refund(grant: SharedGrant): void {
    const keys = keysOf(grant.key, grant.tier);
    if (grant.slot) this.#drop(keys.slots, grant.slot);
    this.link.run(REFUND, [keys.requests, keys.slots], [grant.slot ?? "", grant.second]).catch(() => {});
  }

  /** Stops renewing; slots still held are released (a clean exit leaves nothing behind). */
  async close(): Promise<void> {
    clearInterval(this.#renewal);
    const releases = [...this.#held].map(([slotsKey, slots]) =>
      this.link.call("ZREM", slotsKey, ...slots).catch(() => {}),
    );
    this.#held.clear();
    await Promise.all(releases);
  }

  #hold(slotsKey: string, slot: string): void {
    let slots = this.#held.get(slotsKey);
    if (!slots) this.#held.set(slotsKey, (slots = new Set()));
    slots.add(slot);
  }

  #drop(slotsKey: string, slot: string): void {
    const slots = this.#held.get(slotsKey);
    if (!slots) return;
    slots.delete(slot);
    if (slots.size === 0) this.#held.delete(slotsKey);
  }

  /** Extends every held slot's lease (one script per key and tier, pipelined). */
  #renew(): void {
    if (!this.link.up) return;
    for (const [slotsKey, slots] of this.#held) {
      this.link.run(RENEW, [slotsKey], [this.#leaseMs, ...slots]).catch(() => {});
    }
  }
}

function limitOf(value: number | undefined): number {
  return value === undefined ? -1 : value;
}

/** The three keys of one API key's tier (see the file's comment). */
export function keysOf(key: string, tier: Tier): { requests: string; tokens: string; slots: string } {
  const base = `spark:limits:{${key}:${tier}}`;
  return { requests: `${base}:requests`, tokens: `${base}:tokens`, slots: `${base}:slots` };
}
