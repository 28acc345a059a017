/**
 * Key revocations shared through Redis: a revoked key's hash is added to a set, so an instance
 * started later refuses it too, and published on a channel, so every running instance refuses it
 * within moments (pub/sub delivers in well under a second on a healthy network).
 *
 * Contracts:
 * - `revoke(hash)` (from `spark keys revoke --redis`, or an instance whose key file lost a key)
 *   adds and publishes in one transaction; it rejects when Redis cannot be reached, so the caller
 *   can say the revocation did not reach the fleet.
 * - `listen(onRevoked)` subscribes on a connection of its own, then reads the whole set; it reads it
 *   again each time that connection comes back (a revocation published while it was away is not
 *   lost). `onRevoked` may see a hash more than once.
 * - Revocations are permanent: a revoked key never works again; create a new one.
 * Keys: `spark:revoked-keys` (set of `sha256:…` hashes), channel `spark:revoked-keys`.
 */
import type { Redis } from "ioredis";
import type { RedisLink } from "./redis-link.js";

export const REVOKED_SET = "spark:revoked-keys";
export const REVOKED_CHANNEL = "spark:revoked-keys";

export class RedisRevocations {
  #subscriber: Redis | undefined;
  #onRevoked: ((hash: string) => void) | undefined;

  constructor(private readonly link: RedisLink) {}

  async revoke(hash: string): Promise<void> {
    const normal = hash.toLowerCase();
    await this.link.call("SADD", REVOKED_SET, normal);
    await this.link.call("PUBLISH", REVOKED_CHANNEL, normal);
  }

  /** Every revoked hash (for `spark keys list --redis`, and at start). */
  async all(): Promise<string[]> {
    // A set reply is an array on RESP2 and may be a Set on RESP3.
    return [...((await this.link.call("SMEMBERS", REVOKED_SET)) as Iterable<string>)];
  }

  /**
   * Reads the whole set again (the subscriber does once subscribed; call it too when the main link
   * comes back, in case the subscriber came back first and its read failed).
   */
  resync(): void {
    const onRevoked = this.#onRevoked;
    if (onRevoked)
      void this.all().then(
        (hashes) => hashes.forEach(onRevoked),
        () => {},
      );
  }

  async listen(onRevoked: (hash: string) => void): Promise<void> {
    this.#onRevoked = onRevoked;
    const subscriber = this.link.client.duplicate({
      // A subscriber must queue its SUBSCRIBE until connected, and resubscribe after reconnecting.
      enableOfflineQueue: true,
      autoResubscribe: true,
      commandTimeout: undefined,
      connectionName: "spark-revocations",
    });
    this.#subscriber = subscriber;
    subscriber.on("error", () => {});
    subscriber.on("message", (channel: string, hash: string) => {
      if (channel === REVOKED_CHANNEL) onRevoked(hash);
    });
    subscriber.on("ready", () => {
      // The set is read once the subscription is in place, so nothing published falls between.
      void subscriber.subscribe(REVOKED_CHANNEL).then(
        () => this.resync(),
        () => {},
      );
    });
    try {
      await subscriber.connect();
    } catch {
      // Redis is away: ioredis keeps reconnecting, and `ready` subscribes then.
    }
  }

  async close(): Promise<void> {
    const subscriber = this.#subscriber;
    this.#subscriber = undefined;
    if (!subscriber) return;
    try {
      await subscriber.quit();
    } catch {
      subscriber.disconnect();
    }
  }
}
