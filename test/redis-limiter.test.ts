/**
 * The Redis limiter's scripts against a real Redis (Debian's redis-server, see helpers/redis.ts),
 * in process: the rolling window admits a burst of the full limit and no more, whatever the number
 * of clients racing; retry-after and the reset say when the window frees; tokens are charged at
 * release; a refund gives the request back; slots are leases that end on their own; a Redis
 * restart loses nothing a running response holds (renewal re-adds its slot); and a link to a
 * stopped Redis fails at once, then comes back.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import type { SharedAnswer, SharedGrant } from "../src/core/limits/shared.js";
import { SharedStoreUnavailable } from "../src/core/limits/shared.js";
import { keysOf, RedisLimiter } from "../src/store/redis-limits.js";
import { RedisLink } from "../src/store/redis-link.js";
import { REDIS_MISSING, TestRedis } from "./helpers/redis.js";

const skip = REDIS_MISSING ?? false;
let redis: TestRedis;
const links: RedisLink[] = [];
const limiters: RedisLimiter[] = [];

before(async () => {
  if (!skip) redis = await TestRedis.start();
});
after(async () => {
  await Promise.all(limiters.map((limiter) => limiter.close()));
  await Promise.all(links.map((link) => link.close()));
  await redis?.destroy();
});

async function limiter(leaseMs = 30_000, log?: (line: string) => void): Promise<RedisLimiter> {
  const link = new RedisLink(redis.url, log ? { log } : {});
  links.push(link);
  assert.ok(await link.connect(), link.detail);
  const made = new RedisLimiter(link, { leaseMs });
  limiters.push(made);
  return made;
}

let keyCount = 0;
const freshKey = (): string => `key-${++keyCount}`;

function granted(answer: SharedAnswer): SharedGrant {
  assert.ok(answer.admitted, `refused: ${JSON.stringify(answer)}`);
  return answer.grant;
}

async function until(condition: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 60_000;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test(
  "a burst of the full per-minute limit is admitted at once, from racing clients, and no more",
  { skip },
  async () => {
    const clients = await Promise.all([limiter(), limiter(), limiter()]);
    const key = freshKey();
    const limits = { requestsPerMinute: 30 };
    // 90 acquires at once, spread over three connections (three instances' worth).
    const answers = await Promise.all(
      Array.from({ length: 90 }, (_, i) =>
        clients[i % 3]!.acquire({ key, tier: "spark", limits, hold: false, tokens: 0 }),
      ),
    );
    const admitted = answers.filter((answer) => answer.admitted);
    assert.equal(admitted.length, 30);
    // Each admission saw its own count: 1..30, once each (the script is atomic).
    assert.deepEqual(
      admitted.map((answer) => answer.requests.used).sort((a, b) => a - b),
      Array.from({ length: 30 }, (_, i) => i + 1),
    );
    for (const answer of answers) {
      if (answer.admitted) continue;
      assert.equal(answer.limit, "requests");
      assert.equal(answer.requests.used, 30);
      // The whole burst is in (at most) two seconds of the window: it frees 59-60 s from now.
      assert.ok(
        answer.retryAfterSeconds >= 58 && answer.retryAfterSeconds <= 60,
        String(answer.retryAfterSeconds),
      );
      assert.ok(
        answer.requests.resetMs > 57_000 && answer.requests.resetMs <= 60_000,
        String(answer.requests.resetMs),
      );
    }
  },
);

test("retry-after counts down to when the oldest second leaves the window", { skip }, async () => {
  const client = await limiter();
  const key = freshKey();
  const { requests } = keysOf(key, "spark");
  // Two requests 50 s ago and one 10 s ago (written as the script writes them), limit 3.
  const now = Number(((await redis.command("TIME")) as string[])[0]);
  await redis.command("HSET", requests, now - 50, 2, now - 10, 1);
  const refused = await client.acquire({
    key,
    tier: "spark",
    limits: { requestsPerMinute: 3 },
    hold: false,
    tokens: 0,
  });
  assert.ok(!refused.admitted);
  assert.equal(refused.limit, "requests");
  // The two of 50 s ago leave in 10 s; then 1 < 3.
  assert.ok(
    refused.retryAfterSeconds >= 9 && refused.retryAfterSeconds <= 10,
    String(refused.retryAfterSeconds),
  );
  // Seconds that left the window are forgotten: 61 s ago does not count.
  const old = freshKey();
  await redis.command("HSET", keysOf(old, "spark").requests, now - 61, 100);
  const fresh = await client.acquire({
    key: old,
    tier: "spark",
    limits: { requestsPerMinute: 1 },
    hold: false,
    tokens: 0,
  });
  assert.equal(granted(fresh) !== undefined, true);
  assert.equal(fresh.requests.used, 1);
  assert.equal(await redis.command("HEXISTS", keysOf(old, "spark").requests, now - 61), 0);
});

test(
  "tokens are charged at release and refuse once the minute holds the limit; a refund gives a request back",
  { skip },
  async () => {
    const client = await limiter();
    const key = freshKey();
    const limits = { tokensPerMinute: 100, requestsPerMinute: 10 };
    const first = granted(await client.acquire({ key, tier: "deep", limits, hold: false, tokens: 0 }));
    // Nothing charged until release: a second request is admitted.
    const second = granted(await client.acquire({ key, tier: "deep", limits, hold: false, tokens: 0 }));
    client.release(first, 60);
    client.release(second, 40);
    await until(async () => {
      const answer = await client.acquire({ key, tier: "deep", limits, hold: false, tokens: 0 });
      if (answer.admitted) {
        client.refund(answer.grant);
        return false;
      }
      assert.equal(answer.limit, "tokens");
      assert.equal(answer.tokens.used, 100);
      assert.ok(answer.retryAfterSeconds >= 1 && answer.retryAfterSeconds <= 60);
      return true;
    }, "the tokens to be charged");
    // Refunds gave back the requests the probes above counted: two counted, whatever the probes.
    const { requests } = keysOf(key, "deep");
    const counts = (await redis.command("HVALS", requests)) as string[];
    assert.equal(
      counts.reduce((sum, n) => sum + Number(n), 0),
      2,
    );
  },
);

test(
  "concurrent slots: a limit holds across clients, a release frees one, and a lease ends on its own",
  { skip },
  async () => {
    const [a, b] = await Promise.all([limiter(), limiter()]);
    const key = freshKey();
    const limits = { concurrent: 2 };
    const one = granted(await a.acquire({ key, tier: "spark", limits, hold: true, tokens: 0 }));
    granted(await b.acquire({ key, tier: "spark", limits, hold: true, tokens: 0 }));
    const third = await a.acquire({ key, tier: "spark", limits, hold: true, tokens: 0 });
    assert.ok(!third.admitted);
    assert.equal(third.limit, "concurrent");
    assert.equal(third.retryAfterSeconds, 1);
    a.release(one, 0);
    await until(async () => {
      const answer = await b.acquire({ key, tier: "spark", limits, hold: true, tokens: 0 });
      return answer.admitted;
    }, "the released slot");
    assert.equal(b.held, 2);

    // A client that stops renewing (it crashed) loses its slots when the lease ends.
    const crashing = await limiter(1000);
    const other = freshKey();
    const held = granted(
      await crashing.acquire({ key: other, tier: "spark", limits: { concurrent: 1 }, hold: true, tokens: 0 }),
    );
    const { slots } = keysOf(other, "spark");
    const leaseEnd = Number(await redis.command("ZSCORE", slots, held.slot!));
    const [seconds, micros] = (await redis.command("TIME")) as string[];
    const nowMs = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    assert.ok(leaseEnd - nowMs <= 1000, `the lease ends at most one lease from now: ${leaseEnd} - ${nowMs}`);
    // A crash, as Redis sees it: the connection goes and nothing renews or releases the slot.
    await links.at(-1)!.close();
    assert.equal(Number(await redis.command("ZCARD", slots)), 1);
    await until(async () => {
      const answer = await a.acquire({
        key: other,
        tier: "spark",
        limits: { concurrent: 1 },
        hold: true,
        tokens: 0,
      });
      if (answer.admitted) a.release(answer.grant, 0);
      return answer.admitted;
    }, "the crashed client's lease to end");
  },
);

test(
  "a Redis restart: the link fails fast while it is down, says so once, comes back, and renewal re-adds held slots",
  { skip },
  async () => {
    const lines: string[] = [];
    const client = await limiter(900, (line) => lines.push(line));
    const key = freshKey();
    const limits = { concurrent: 5 };
    granted(await client.acquire({ key, tier: "spark", limits, hold: true, tokens: 0 }));
    await redis.stop();
    try {
      await until(async () => {
        try {
          await client.acquire({ key, tier: "spark", limits, hold: true, tokens: 0 });
          return false;
        } catch (error) {
          assert.ok(error instanceof SharedStoreUnavailable, String(error));
          return true;
        }
      }, "the link to notice Redis is gone");
      assert.equal(client.up, false);
    } finally {
      await redis.start();
    }
    await until(async () => client.up, "the link to come back");
    // Redis came back empty: the slot still held is back once renewed.
    await until(
      async () => Number(await redis.command("ZCARD", keysOf(key, "spark").slots)) === 1,
      "renewal to re-add the held slot",
    );
    assert.equal(lines.filter((line) => /unreachable/.test(line)).length, 1, lines.join("\n"));
    assert.equal(lines.filter((line) => /reachable again/.test(line)).length, 1, lines.join("\n"));
  },
);
