/**
 * `spark serve --redis URL`: what an instance shares with the rest of its fleet through Redis —
 * per-key limits (`RedisLimiter`), key revocations (`RedisRevocations`) and the queue view
 * (`RedisFleet`) — put together for the server, and taken apart again at exit. Redis being away at
 * start is not an error: the instance starts, says so, and joins once Redis answers.
 */
import type { KeyRing } from "../core/keys.js";
import type { FailureMode } from "../core/limits/gate.js";
import type { Metrics } from "../core/metrics.js";
import type { SparkServer, SparkServerOptions } from "../server/http-server.js";
import { RedisFleet } from "../store/redis-fleet.js";
import { DEFAULT_LEASE_MS, RedisLimiter } from "../store/redis-limits.js";
import { RedisLink } from "../store/redis-link.js";
import { RedisRevocations } from "../store/redis-revocations.js";

export interface FleetOptions {
  url: string;
  failure: FailureMode;
  leaseMs?: number;
  keys: KeyRing;
  log: (line: string) => void;
}

export class Fleet {
  readonly link: RedisLink;
  readonly limiter: RedisLimiter;
  readonly revocations: RedisRevocations;
  #view: RedisFleet | undefined;

  private constructor(private readonly options: FleetOptions) {
    const whileDown =
      options.failure === "open"
        ? "each instance enforces its own limits until it is back (--redis-failure open)"
        : "requests of keys with limits get 503 limits_unavailable until it is back (--redis-failure closed)";
    this.link = new RedisLink(options.url, {
      log: options.log,
      whileDown,
      onChange: (up) => {
        if (!up) return;
        // Back (or first up): catch up on revocations made meanwhile, and report at once.
        this.revocations.resync();
        void this.#view?.report();
      },
    });
    this.limiter = new RedisLimiter(this.link, { leaseMs: options.leaseMs ?? DEFAULT_LEASE_MS });
    this.revocations = new RedisRevocations(this.link);
  }

  static async open(options: FleetOptions): Promise<Fleet> {
    const fleet = new Fleet(options);
    await fleet.revocations.listen((hash) => {
      const id = options.keys.revoke(hash);
      if (id !== undefined)
        options.log(`API key "${id}" was revoked (through Redis): it gets 401 from now on`);
    });
    // Revocations made before this instance started are applied before it serves a request.
    if (await fleet.link.connect()) {
      const revoked = await fleet.revocations.all().catch(() => [] as string[]);
      for (const hash of revoked) options.keys.revoke(hash);
    }
    return fleet;
  }

  /** The server's `shared` option. */
  get shared(): NonNullable<SparkServerOptions["shared"]> {
    return {
      limiter: this.limiter,
      failure: this.options.failure,
      status: {
        health: () => ({ ok: this.link.up, detail: this.link.detail }),
        view: () => this.#view?.view(),
      },
    };
  }

  /** Starts reporting the server's queue to the fleet, and the fleet's metrics. */
  attach(server: SparkServer, metrics: Metrics): void {
    this.#view = new RedisFleet(this.link, this.limiter.instance, () => server.tierCounts());
    this.#view.registerMetrics(metrics.registry);
    void this.#view.report();
  }

  /** Records a revocation for every instance; false (and a log line) when Redis cannot take it. */
  async revoke(hash: string, id: string): Promise<boolean> {
    try {
      await this.revocations.revoke(hash);
      return true;
    } catch (error) {
      this.options.log(
        `could not record the revocation of API key "${id}" in Redis (${(error as Error).message}): ` +
          `instances that do not read this key file keep accepting it; run spark keys revoke --redis once Redis is back`,
      );
      return false;
    }
  }

  /** Releases what this instance still holds, leaves the queue view, and disconnects. */
  async close(): Promise<void> {
    await Promise.all([this.limiter.close(), this.#view?.close(), this.revocations.close()]);
    await this.link.close();
  }
}
