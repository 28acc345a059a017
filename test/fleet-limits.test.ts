/**
 * Limits that hold across a fleet: three real `spark serve --redis` instances (script engine) on
 * one real Redis (Debian's redis-server, helpers/redis.ts), one key file, requests spread
 * round-robin as a load balancer would. Requests per minute, tokens per minute and concurrent
 * responses each hold in total, not per instance, with OpenAI's headers and a correct
 * `retry-after` from the shared counts; slots come back when responses end or clients leave, and
 * the slots of an instance killed with SIGKILL come back within the lease. `/healthz` and
 * `/metrics` show the fleet's responses in flight.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { file, readSse } from "./helpers/cli.js";
import { createKeys, health, killAll, respond, serve, until, type Instance } from "./helpers/fleet.js";
import { REDIS_MISSING, TestRedis } from "./helpers/redis.js";
import { WsClient } from "./helpers/ws-client.js";

const skip = REDIS_MISSING ?? false;
const SCRIPT = file(
  "fleet-limits.jsonl",
  JSON.stringify({ output: [{ type: "message", text: "A short answer." }] }) + "\n",
);
// `slow` streams 400 pieces at 40 per second: ten seconds, longer than any check made meanwhile.
const CONFIG = file(
  "fleet-limits.json",
  JSON.stringify({
    models: {
      spark: { engine: "script", script: SCRIPT },
      slow: {
        engine: "script",
        script: file(
          "fleet-slow.jsonl",
          JSON.stringify({ output: [{ type: "message", text: "word ".repeat(400) }] }) + "\n",
        ),
        rate: 40,
        tier: "spark",
      },
    },
  }),
);
const LEASE_SECONDS = 4;

let redis: TestRedis;
let keys: Record<string, string>;
let keyFile: string;
let fleet: Instance[] = [];
const extra: Instance[] = [];

function instance(): Promise<Instance> {
  return serve(SCRIPT, [
    "--config",
    CONFIG,
    "--key-file",
    keyFile,
    "--redis",
    redis.url,
    "--redis-lease",
    String(LEASE_SECONDS),
    "--store",
    "memory",
  ]);
}

before(async () => {
  if (skip) return;
  redis = await TestRedis.start();
  ({ file: keyFile, keys } = await createKeys({
    rpm: { rpm: 30 },
    tpm: { tpm: 100 },
    concurrent: { concurrent: 3 },
    crash: { concurrent: 2 },
  }));
  fleet = await Promise.all([instance(), instance(), instance()]);
});
after(async () => {
  killAll([...fleet, ...extra]);
  await redis?.destroy();
});

test(
  "requests per minute: 60 requests round-robin over three instances, exactly 30 admitted, the rest 429 with retry-after",
  { skip },
  async () => {
    const started = Date.now();
    const answers = await Promise.all(
      Array.from({ length: 60 }, (_, i) => respond(fleet[i % 3]!.url, keys.rpm!)),
    );
    const elapsedSeconds = Math.ceil((Date.now() - started) / 1000);
    const admitted = answers.filter((answer) => answer.status === 200);
    const refused = answers.filter((answer) => answer.status === 429);
    assert.equal(admitted.length, 30, `statuses: ${answers.map((a) => a.status).join(" ")}`);
    assert.equal(refused.length, 30);
    // Every admission saw the fleet's count at that moment: remaining 29..0, once each.
    assert.deepEqual(
      admitted
        .map((answer) => Number(answer.headers.get("x-ratelimit-remaining-requests")))
        .sort((a, b) => a - b),
      Array.from({ length: 30 }, (_, i) => i),
    );
    for (const answer of refused) {
      assert.equal(answer.body.error?.code, "rate_limit_exceeded");
      assert.equal(answer.body.error?.type, "requests");
      assert.equal(answer.headers.get("x-ratelimit-limit-requests"), "30");
      assert.equal(answer.headers.get("x-ratelimit-remaining-requests"), "0");
      // The window frees a minute after the burst began, less the time the burst took.
      const retry = Number(answer.headers.get("retry-after"));
      assert.ok(retry >= 60 - elapsedSeconds - 1 && retry <= 60, `retry-after ${retry}`);
    }
    // The same refusal over WebSocket, on any instance: an error event with the headers.
    const socket = await WsClient.connect(fleet[1]!.url, {
      headers: { authorization: `Bearer ${keys.rpm}` },
    });
    socket.send({ type: "response.create", model: "spark", input: "one more" });
    const error = await socket.waitForType("error");
    assert.equal(error.status, 429);
    assert.equal((error.error as { code: string }).code, "rate_limit_exceeded");
    assert.ok(Number((error.headers as Record<string, string>)["retry-after"]) >= 1);
    await socket.close();
  },
);

test(
  "tokens per minute: charged when each response ends, on whichever instance; refused once the fleet's minute holds the limit",
  { skip },
  async () => {
    const first = await respond(fleet[0]!.url, keys.tpm!);
    assert.equal(first.status, 200);
    const perResponse = (first.body.usage as { total_tokens: number }).total_tokens;
    assert.ok(perResponse > 0 && perResponse < 100);
    // Admitted while fewer than 100 tokens were charged before it: ceil(100 / T) in all.
    const expected = Math.ceil(100 / perResponse);
    let admitted = 1;
    let refusal: Awaited<ReturnType<typeof respond>> | undefined;
    for (let i = 1; i < 40 && !refusal; i++) {
      const answer = await respond(fleet[i % 3]!.url, keys.tpm!);
      if (answer.status === 200) {
        assert.equal(
          Number(answer.headers.get("x-ratelimit-remaining-tokens")),
          100 - admitted * perResponse,
          "the headers count every earlier response's tokens",
        );
        admitted++;
      } else refusal = answer;
    }
    assert.equal(admitted, expected);
    assert.ok(refusal);
    assert.equal(refusal.status, 429);
    assert.equal(refusal.body.error?.type, "tokens");
    assert.equal(refusal.headers.get("x-ratelimit-remaining-tokens"), "0");
    const retry = Number(refusal.headers.get("retry-after"));
    assert.ok(retry >= 1 && retry <= 60, `retry-after ${retry}`);
  },
);

test(
  "concurrent: 3 slow responses at once over the fleet, the rest 429; the fleet's view counts them; a client leaving frees its slot",
  { skip },
  async () => {
    const controllers = Array.from({ length: 9 }, () => new AbortController());
    const answers = await Promise.all(
      controllers.map((controller, i) =>
        fetch(`${fleet[i % 3]!.url}/v1/responses`, {
          method: "POST",
          headers: { authorization: `Bearer ${keys.concurrent}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "slow", input: "go", stream: true }),
          signal: controller.signal,
        }),
      ),
    );
    const running = answers.filter((answer) => answer.status === 200);
    const refused = answers.filter((answer) => answer.status === 429);
    assert.equal(running.length, 3, `statuses: ${answers.map((a) => a.status).join(" ")}`);
    assert.equal(refused.length, 6);
    for (const answer of refused) {
      const body = (await answer.json()) as { error: { code: string; message: string } };
      assert.equal(body.error.code, "rate_limit_exceeded");
      assert.match(body.error.message, /concurrent responses \(limit 3\)/);
      assert.equal(answer.headers.get("retry-after"), "1");
    }
    // Every instance sees the fleet's three responses in flight (reported through Redis).
    for (const member of fleet) {
      await until(async () => {
        const { body } = await health(member.url);
        return body.fleet?.instances === 3 && body.fleet.in_flight.spark === 3;
      }, "the fleet view to count 3 in flight");
    }
    const metrics = await (
      await fetch(`${fleet[0]!.url}/metrics`, { headers: { authorization: `Bearer ${keys.concurrent}` } })
    ).text();
    assert.match(metrics, /^spark_fleet_in_flight\{tier="spark"\} 3$/m);
    assert.match(metrics, /^spark_redis_up 1$/m);

    // One client leaves: its slot is free again, on any instance.
    const leaving = answers.indexOf(running[0]!);
    controllers[leaving]!.abort();
    const next = await until(async () => {
      const answer = await fetch(`${fleet[(leaving + 1) % 3]!.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${keys.concurrent}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "spark", input: "quick" }),
      });
      await answer.arrayBuffer();
      return answer.status === 200 ? answer : undefined;
    }, "the departed client's slot");
    assert.equal(next.status, 200);
    // The others run to their end and free theirs: then three fit again.
    await Promise.all(
      running
        .filter((_, i) => i !== 0)
        .map((answer) => readSse(answer).then(({ events }) => events.at(-1)?.type)),
    ).then((ends) => assert.deepEqual(ends, ["response.completed", "response.completed"]));
    const again = await Promise.all(fleet.map((member) => respond(member.url, keys.concurrent!)));
    assert.deepEqual(
      again.map((answer) => answer.status),
      [200, 200, 200],
    );
  },
);

test(
  "kill -9 of an instance holding concurrent slots: they come back within the lease",
  { skip },
  async () => {
    const doomed = await instance();
    extra.push(doomed);
    const streams = await Promise.all(
      [0, 1].map(() =>
        fetch(`${doomed.url}/v1/responses`, {
          method: "POST",
          headers: { authorization: `Bearer ${keys.crash}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "slow", input: "hold", stream: true }),
        }),
      ),
    );
    assert.deepEqual(
      streams.map((answer) => answer.status),
      [200, 200],
    );
    assert.equal((await respond(fleet[0]!.url, keys.crash!)).status, 429, "both slots are held");
    doomed.child.kill("SIGKILL");
    await doomed.exited;
    for (const stream of streams) await stream.body?.cancel().catch(() => {});
    // What Redis holds: two slots whose leases end at most one lease after the kill.
    const [seconds, micros] = (await redis.command("TIME")) as string[];
    const killedAt = Number(seconds) * 1000 + Math.floor(Number(micros) / 1000);
    const slots = (await redis.command(
      "ZRANGE",
      "spark:limits:{crash:spark}:slots",
      0,
      -1,
      "WITHSCORES",
    )) as [string, string][];
    assert.equal(slots.length, 2);
    for (const [, leaseEnd] of slots) assert.ok(Number(leaseEnd) <= killedAt + LEASE_SECONDS * 1000);
    const started = Date.now();
    await until(async () => (await respond(fleet[1]!.url, keys.crash!)).status === 200, "the leases to end");
    console.log(
      `# slots of the killed instance back after ${Date.now() - started} ms (lease ${LEASE_SECONDS} s)`,
    );
  },
);
