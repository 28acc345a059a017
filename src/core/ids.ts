/**
 * OpenAI-style ids: a type prefix and 48 hex characters (`resp_…`, `msg_…`, `fc_…`, `call_…`), from
 * the system's CSPRNG like `randomBytes(24)`, but drawn from a pre-filled pool: one `randomFillSync`
 * of {@link POOL_IDS} ids' worth of bytes instead of one call into the crypto library per id (a turn
 * makes several ids, and a single `randomBytes` call measured 0.18 ms cold on the busy test VM).
 * Every byte is used once; nothing is derived or reused, so ids stay as unguessable as before.
 */
import { randomFillSync } from "node:crypto";

const ID_BYTES = 24;
/** Ids per refill: 6 KiB of random bytes, refilled synchronously when used up. */
const POOL_IDS = 256;

const pool = Buffer.allocUnsafe(ID_BYTES * POOL_IDS);
let next = pool.length;

export function newId(prefix: string): string {
  if (next + ID_BYTES > pool.length) {
    randomFillSync(pool);
    next = 0;
  }
  const hex = pool.toString("hex", next, next + ID_BYTES);
  next += ID_BYTES;
  return `${prefix}_${hex}`;
}
