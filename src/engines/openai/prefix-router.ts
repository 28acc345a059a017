/**
 * Which upstream replica serves a request: prefix affinity bounded by load, the idea of SGLang's
 * cache-aware router. Pure bookkeeping (no I/O), so the benchmark's simulation runs this very code.
 *
 * Affinity key. The engine sees only an `EngineRequest`, so the key comes from the request itself:
 * a hash chain over its leading items, `hashes[i]` standing for the model, the tools and items
 * 0..i. A continued conversation (a `previous_response_id` chain, a WebSocket lane, a client that
 * resends its history) repeats the items of its earlier turns, so its chain starts with the hashes
 * of the turn before. Each item is fingerprinted from a bounded sample of its text (its length,
 * head, tail and 32 characters spread between them), so a key costs O(items), not O(history); a
 * rare collision only sends a request to a replica without its prefix, never anything wrong.
 *
 * The table remembers which replicas served each prefix hash (a bit per replica, at most
 * `maxPrefixes` hashes, the oldest inserted forgotten first: the longest prefix of a live
 * conversation is always among the newest), and whether the prefix was ever continued.
 *
 * A request whose longest known prefix is where an earlier request ended (never continued since)
 * continues that request: it goes to a replica that served it, unless that replica is much busier
 * than the least-loaded one: more than `loadGap` more requests in flight *and* more than
 * `loadRatio` times as many (SGLang's two balance thresholds, applied per request). A longest
 * prefix that other requests already continued differently is a shared one (instructions and tools
 * common to many conversations): following it would pile every new conversation onto the first
 * replica that saw the instructions, so such a request is routed as a new conversation. Those go to
 * the least-loaded replica: fewest requests in flight per unit of weight, ties broken by the power
 * of two choices (two tied replicas at random, the one holding fewer prefixes per unit of weight
 * wins, so new conversations spread their cache use by weight).
 *
 * Latency. Requests in flight alone do not show a slow replica when there are few of them: a
 * replica 40 times slower than the others, idle between two turns, would keep every conversation it
 * ever served. So each replica's latency (time to first part, `observe`, an exponential moving
 * average) is compared with the fastest replica's (or `LATENCY_FLOOR_MS`, whichever is more: a
 * few milliseconds of difference is noise, not slowness): a replica `SLOW_RATIO` times slower or
 * more counts `slowness` (its latency over the fastest's) per request, the one being placed included:
 * its load is `(inFlight + (inFlight + 1) × (slowness − 1)) / weight`. New conversations then go
 * elsewhere, and its conversations move away once the balance thresholds say so (when idle: more
 * than `loadGap` + 1 times slower, since moving a conversation costs its whole prefill). Within `SLOW_RATIO` replicas count
 * as equally fast (measurement noise must not pull every new conversation onto one). A latency not
 * measured for `LATENCY_TTL_MS` is forgotten, so a replica that stopped getting requests for being
 * slow gets one again now and then, and is measured anew.
 */
import type { ConversationItem, EngineRequest } from "../../engine/types.js";

export type RoutingPolicy = "prefix-affinity" | "least-loaded" | "round-robin";

export interface RouterOptions {
  /** Default "prefix-affinity"; the others exist for comparison (the benchmark). */
  policy?: RoutingPolicy;
  /**
   * Affinity yields to the least-loaded replica past this many more requests in flight. Default 8:
   * GPU servers batch many requests, and moving a long conversation costs its whole prefill.
   */
  loadGap?: number;
  /** ... and past this many times as many. Default 1.5. */
  loadRatio?: number;
  /** Prefix hashes remembered over all replicas. Default 65,536. */
  maxPrefixes?: number;
  /** Random numbers in [0, 1) for the tie-break; default Math.random. */
  random?: () => number;
  /** The clock for latency measurements, in ms; default `performance.now`. */
  now?: () => number;
}

/** A replica this many times slower than the fastest, or more, counts its slowness as load. */
export const SLOW_RATIO = 2;
/** Latencies are compared to the fastest one, or to this many ms where the fastest is faster. */
export const LATENCY_FLOOR_MS = 100;
/** How long a replica's latency counts after it was last measured. */
export const LATENCY_TTL_MS = 60_000;
/** Weight of a new latency sample in the moving average. */
const LATENCY_ALPHA = 0.3;

/** At most this many replicas per router: one bit each in the table. */
export const MAX_REPLICAS = 32;

/** A request's affinity key: chained hashes of its leading items. */
export interface PrefixKey {
  readonly hashes: Float64Array;
}

/**
 * Why a request did not go to a replica that served its prefix: it continues nothing known
 * (`cold`), only a prefix that other requests share (`shared`), the holder was much busier than the
 * least-loaded replica (`load`), or it was ejected or had just failed this request (`down`).
 */
export type MissReason = "cold" | "shared" | "load" | "down";

export interface Route {
  replica: number;
  /** Whether the replica had served the request's prefix. */
  hit: boolean;
  miss?: MissReason;
}

export const EMPTY_KEY: PrefixKey = { hashes: new Float64Array(0) };

/** Table values: the replicas' bits in the low 32 bits, and this flag once the prefix was continued. */
const CONTINUED = 2 ** 32;

export class PrefixRouter {
  readonly policy: RoutingPolicy;
  readonly #count: number;
  readonly #weights: Float64Array;
  readonly #inFlight: Int32Array;
  readonly #healthy: Uint8Array;
  /** Prefix hashes held per replica (table entries with its bit). */
  readonly #held: Int32Array;
  readonly #table = new Map<number, number>();
  readonly #loadGap: number;
  readonly #loadRatio: number;
  readonly #maxPrefixes: number;
  readonly #random: () => number;
  readonly #ties: Int32Array;
  readonly #now: () => number;
  /** Moving average of each replica's latency in ms (0: never measured), and when last measured. */
  readonly #latency: Float64Array;
  readonly #measuredAt: Float64Array;
  /** Per replica: its latency over the fastest's where `SLOW_RATIO` or more, else 1 (see `#weigh`). */
  readonly #slowness: Float64Array;
  #next = 0;
  /** The index of the longest prefix the last affine pick matched. */
  #matched = -1;

  constructor(weights: readonly number[], options: RouterOptions = {}) {
    if (weights.length < 1 || weights.length > MAX_REPLICAS) {
      throw new RangeError(`a router takes 1 to ${MAX_REPLICAS} replicas, not ${weights.length}`);
    }
    this.#count = weights.length;
    this.#weights = Float64Array.from(weights, (w) => (Number.isFinite(w) && w > 0 ? w : 1));
    this.#inFlight = new Int32Array(this.#count);
    this.#healthy = new Uint8Array(this.#count).fill(1);
    this.#held = new Int32Array(this.#count);
    this.#ties = new Int32Array(this.#count);
    this.policy = options.policy ?? "prefix-affinity";
    this.#loadGap = options.loadGap ?? 8;
    this.#loadRatio = options.loadRatio ?? 1.5;
    this.#maxPrefixes = options.maxPrefixes ?? 65_536;
    this.#random = options.random ?? Math.random;
    this.#now = options.now ?? (() => performance.now());
    this.#latency = new Float64Array(this.#count);
    this.#measuredAt = new Float64Array(this.#count);
    this.#slowness = new Float64Array(this.#count).fill(1);
  }

  /** `replica` took `ms` to a request's first part. */
  observe(replica: number, ms: number): void {
    if (replica < 0 || replica >= this.#count || !Number.isFinite(ms) || ms < 0) return;
    const now = this.#now();
    const fresh = this.#latency[replica]! > 0 && now - this.#measuredAt[replica]! <= LATENCY_TTL_MS;
    // 0.01 ms at least: a measured replica is told apart from one never measured.
    const sample = Math.max(ms, 0.01);
    this.#latency[replica] = fresh
      ? this.#latency[replica]! + LATENCY_ALPHA * (sample - this.#latency[replica]!)
      : sample;
    this.#measuredAt[replica] = now;
  }

  /** How many times slower than the fastest healthy replica `replica` is, as the load counts it. */
  slowness(replica: number): number {
    this.#weigh();
    return this.#slowness[replica] ?? 1;
  }

  get size(): number {
    return this.#count;
  }

  /** The affinity key of a request; empty (and free) unless the policy uses it. */
  key(request: EngineRequest): PrefixKey {
    if (this.policy !== "prefix-affinity" || this.#count === 1) return EMPTY_KEY;
    return prefixKey(request);
  }

  /**
   * Picks a replica for a request and records its prefix there. `exclude` (a replica that just
   * failed this request) is never picked while another replica exists. Ejected replicas are picked
   * only when every other one is ejected too, so an outage that ends is found by requests as well.
   */
  pick(key: PrefixKey, exclude = -1): Route {
    this.#weigh();
    let eligible = 0;
    for (let r = 0; r < this.#count; r++) if (this.#healthy[r] && r !== exclude) eligible |= 1 << r;
    if (eligible === 0) {
      for (let r = 0; r < this.#count; r++) if (r !== exclude) eligible |= 1 << r;
      if (eligible === 0) eligible = 1 << exclude;
    }
    let route: Route;
    if (this.policy === "round-robin") {
      let r = this.#next;
      while (!(eligible & (1 << (r % this.#count)))) r++;
      this.#next = (r + 1) % this.#count;
      route = { replica: r % this.#count, hit: false, miss: "cold" };
    } else {
      const least = this.#leastLoaded(eligible);
      route =
        this.policy === "prefix-affinity"
          ? this.#affine(key, eligible, least)
          : { replica: least, hit: false, miss: "cold" };
    }
    // A continuation's replica already holds the prefix it matched: only the new items are recorded.
    this.#record(key, route.replica, route.hit ? this.#matched + 1 : 0);
    return route;
  }

  /** A request started on `replica`. */
  acquire(replica: number): void {
    this.#inFlight[replica]!++;
  }

  /** A request on `replica` ended, however it ended. */
  release(replica: number): void {
    if (this.#inFlight[replica]! > 0) this.#inFlight[replica]!--;
  }

  inFlight(replica: number): number {
    return this.#inFlight[replica] ?? 0;
  }

  healthy(replica: number): boolean {
    return this.#healthy[replica] === 1;
  }

  /** Takes a replica out of routing (and forgets what it held: it may come back with an empty cache), or back in. */
  setHealthy(replica: number, healthy: boolean): void {
    if (this.healthy(replica) === healthy) return;
    this.#healthy[replica] = healthy ? 1 : 0;
    if (!healthy) this.#forget(replica);
  }

  /** Prefix hashes the table holds for `replica`. */
  held(replica: number): number {
    return this.#held[replica] ?? 0;
  }

  #load(replica: number): number {
    const inFlight = this.#inFlight[replica]!;
    return (inFlight + (inFlight + 1) * (this.#slowness[replica]! - 1)) / this.#weights[replica]!;
  }

  /** Recomputes `#slowness` from the latencies measured within `LATENCY_TTL_MS` (O(replicas)). */
  #weigh(): void {
    const now = this.#now();
    let fastest = Infinity;
    for (let r = 0; r < this.#count; r++) {
      if (this.#fresh(r, now) && this.#healthy[r]) fastest = Math.min(fastest, this.#latency[r]!);
    }
    for (let r = 0; r < this.#count; r++) {
      const ratio =
        this.#fresh(r, now) && fastest < Infinity
          ? this.#latency[r]! / Math.max(fastest, LATENCY_FLOOR_MS)
          : 1;
      this.#slowness[r] = ratio >= SLOW_RATIO ? ratio : 1;
    }
  }

  #fresh(replica: number, now: number): boolean {
    return this.#latency[replica]! > 0 && now - this.#measuredAt[replica]! <= LATENCY_TTL_MS;
  }

  /** The replica in `mask` with the fewest requests in flight per unit of weight; ties: power of two choices. */
  #leastLoaded(mask: number): number {
    let best = Infinity;
    let ties = 0;
    for (let r = 0; r < this.#count; r++) {
      if (!(mask & (1 << r))) continue;
      const load = this.#load(r);
      if (load < best) {
        best = load;
        ties = 0;
      }
      if (load === best) this.#ties[ties++] = r;
    }
    if (ties === 1) return this.#ties[0]!;
    const i = Math.floor(this.#random() * ties);
    let j = Math.floor(this.#random() * (ties - 1));
    if (j >= i) j++;
    const a = this.#ties[i]!;
    const b = this.#ties[j]!;
    return this.#held[a]! / this.#weights[a]! <= this.#held[b]! / this.#weights[b]! ? a : b;
  }

  #affine(key: PrefixKey, eligible: number, least: number): Route {
    const { hashes } = key;
    let elsewhere = false;
    for (let i = hashes.length - 1; i >= 0; i--) {
      const value = this.#table.get(hashes[i]!);
      if (value === undefined) continue;
      const continued = value >= CONTINUED;
      const holders = (value % CONTINUED) & eligible;
      if (holders === 0) {
        // Served only by replicas out of routing: a shorter prefix may still be held elsewhere.
        if (!continued) elsewhere = true;
        continue;
      }
      if (continued) return { replica: least, hit: false, miss: elsewhere ? "down" : "shared" };
      const preferred = holders & (1 << least) ? least : this.#leastLoaded(holders);
      const load = this.#load(preferred);
      const floor = this.#load(least);
      if (load - floor > this.#loadGap && load > this.#loadRatio * floor) {
        return { replica: least, hit: false, miss: "load" };
      }
      this.#matched = i;
      return { replica: preferred, hit: true };
    }
    return { replica: least, hit: false, miss: elsewhere ? "down" : "cold" };
  }

  #record(key: PrefixKey, replica: number, from: number): void {
    const { hashes } = key;
    if (hashes.length === 0) return;
    const bit = 1 << replica;
    const table = this.#table;
    let parent: number | undefined = from > 0 ? hashes[from - 1] : undefined;
    for (let i = from; i < hashes.length; i++) {
      const hash = hashes[i]!;
      const value = table.get(hash);
      if (value === undefined) {
        table.set(hash, bit >>> 0);
        this.#held[replica]!++;
        // The prefix before this one now has a continuation.
        const before = parent === undefined ? undefined : table.get(parent);
        if (before !== undefined && before < CONTINUED) table.set(parent!, before + CONTINUED);
      } else if (!((value % CONTINUED) & bit)) {
        table.set(hash, value + (bit >>> 0));
        this.#held[replica]!++;
      }
      parent = hash;
    }
    while (table.size > this.#maxPrefixes) {
      const oldest = table.entries().next().value;
      if (!oldest) break;
      table.delete(oldest[0]);
      this.#unhold(oldest[1] % CONTINUED);
    }
  }

  #unhold(mask: number): void {
    for (let r = 0; r < this.#count; r++) if (mask & (1 << r)) this.#held[r]!--;
  }

  #forget(replica: number): void {
    const bit = (1 << replica) >>> 0;
    for (const [hash, value] of this.#table) {
      const mask = value % CONTINUED;
      if (!(mask & bit)) continue;
      if (mask === bit) this.#table.delete(hash);
      else this.#table.set(hash, value - bit);
    }
    this.#held[replica] = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// The key: a 32-bit FNV-1a hash of each item's sample, chained item by item into two 32-bit lanes,
// joined into one exact 53-bit number.

/** Characters of an item's text taken whole; longer texts are sampled. */
const WHOLE = 64;
const EDGE = 16;
const SPREAD = 16;
const FNV_PRIME = 0x01000193;

function hashText(seed: number, text: string): number {
  const n = text.length;
  let h = Math.imul(seed ^ n, FNV_PRIME);
  if (n <= WHOLE) {
    for (let i = 0; i < n; i++) h = Math.imul(h ^ text.charCodeAt(i), FNV_PRIME);
    return h;
  }
  for (let i = 0; i < EDGE; i++) h = Math.imul(h ^ text.charCodeAt(i), FNV_PRIME);
  const step = Math.floor((n - 2 * EDGE) / SPREAD);
  for (let i = 0, at = EDGE; i < SPREAD; i++, at += step) h = Math.imul(h ^ text.charCodeAt(at), FNV_PRIME);
  for (let i = n - EDGE; i < n; i++) h = Math.imul(h ^ text.charCodeAt(i), FNV_PRIME);
  return h;
}

function hashItem(item: ConversationItem): number {
  switch (item.type) {
    case "message":
      return hashText(hashText(1, item.role), item.text);
    case "tool_call":
      return hashText(hashText(hashText(2, item.callId), item.name), item.input);
    case "tool_result":
      return hashText(hashText(3, item.callId), item.output);
  }
}

/** The affinity key of a request (see the file's comment). */
export function prefixKey(request: EngineRequest): PrefixKey {
  const items = request.items;
  let seed = hashText(0x811c9dc5, request.model);
  for (const tool of request.tools) {
    seed = hashText(hashText(seed, tool.kind), tool.name);
    seed = Math.imul(seed ^ (tool.description?.length ?? 0), FNV_PRIME);
  }
  let lo = seed;
  let hi = Math.imul(seed ^ 0x2545f491, 0x5bd1e995);
  const hashes = new Float64Array(items.length);
  for (let i = 0; i < items.length; i++) {
    const h = hashItem(items[i]!);
    lo = Math.imul(lo ^ h, FNV_PRIME);
    hi = Math.imul(hi ^ h ^ (lo >>> 13), 0x5bd1e995);
    hi ^= hi >>> 15;
    hashes[i] = (lo >>> 0) * 2_097_152 + (hi >>> 11);
  }
  return { hashes };
}
