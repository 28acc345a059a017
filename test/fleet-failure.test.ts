/**
 * Redis going away under a running fleet, in both failure modes: real `spark serve --redis`
 * instances (one `--redis-failure open`, the default, one `closed`), a real Redis stopped with
 * SIGKILL mid-run and started again (empty, as after a crash without persistence). Responses and
 * WebSocket connections admitted before keep streaming to their end; meanwhile `open` enforces
 * the instance's own limits (with the instance's own history) and `closed` answers 503
 * `limits_unavailable`; `/healthz` says degraded with the reason (still 200), `spark_redis_up` is
 * 0; each instance logs the outage once and the recovery once; afterwards limits are shared again.
 */
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { file, readSse } from "./helpers/cli.js";
import { createKeys, health, killAll, respond, serve, until, type Instance } from "./helpers/fleet.js";
import { REDIS_MISSING, TestRedis } from "./helpers/redis.js";
import { terminalOf, textOf, WsClient } from "./helpers/ws-client.js";

const skip = REDIS_MISSING ?? false;
const SCRIPT = file(
  "fleet-failure.jsonl",
  JSON.stringify({ output: [{ type: "message", text: "Fine." }] }) + "\n",
);
const WORDS = 1000;
// `slow`: 1000 pieces at 50 per second, twenty seconds: it spans the outage.
const CONFIG = file(
  "fleet-failure.json",
  JSON.stringify({
    models: {
      spark: { engine: "script", script: SCRIPT },
      slow: {
        engine: "script",
        script: file(
          "fleet-failure-slow.jsonl",
          JSON.stringify({ output: [{ type: "message", text: "word ".repeat(WORDS) }] }) + "\n",
        ),
        rate: 50,
        tier: "spark",
      },
    },
  }),
);

let redis: TestRedis;
let keys: Record<string, string>;
let open: Instance;
let closed: Instance;

before(async () => {
  if (skip) return;
  redis = await TestRedis.start();
  const created = await createKeys({ limited: { rpm: 1000 }, few: { rpm: 3 } });
  keys = created.keys;
  const common = ["--config", CONFIG, "--key-file", created.file, "--redis", redis.url, "--store", "memory"];
  [open, closed] = await Promise.all([
    serve(SCRIPT, common),
    serve(SCRIPT, [...common, "--redis-failure", "closed"]),
  ]);
});
after(async () => {
  killAll([open, closed].filter(Boolean));
  await redis?.destroy();
});

function stream(url: string, key: string): Promise<Response> {
  return fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "slow", input: "a long one", stream: true }),
  });
}

async function metric(url: string, key: string, name: string): Promise<string | undefined> {
  const text = await (await fetch(`${url}/metrics`, { headers: { authorization: `Bearer ${key}` } })).text();
  return new RegExp(`^${name} (\\S+)$`, "m").exec(text)?.[1];
}

test(
  "Redis stopped and restarted mid-run: open falls back to the instance's limits, closed answers 503; no stream is lost",
  { skip },
  async () => {
    const key = keys.limited!;
    // Under way before the outage: an SSE stream and a WebSocket turn on each instance.
    const streams = await Promise.all([stream(open.url, key), stream(closed.url, key)]);
    assert.deepEqual(
      streams.map((response) => response.status),
      [200, 200],
    );
    const reading = streams.map((response) => readSse(response));
    const sockets = await Promise.all(
      [open, closed].map((member) =>
        WsClient.connect(member.url, { headers: { authorization: `Bearer ${key}` } }),
      ),
    );
    for (const socket of sockets)
      socket.send({ type: "response.create", model: "slow", input: "over the socket" });
    await Promise.all(sockets.map((socket) => socket.waitForType("response.output_text.delta")));
    // Two of the `few` key's three requests, counted in Redis and in the open instance's own history.
    for (let i = 0; i < 2; i++) assert.equal((await respond(open.url, keys.few!)).status, 200);

    await redis.stop("SIGKILL");
    let restarted = false;
    try {
      for (const member of [open, closed]) {
        const { status, body } = await until(async () => {
          const answer = await health(member.url);
          return answer.body.redis?.status === "degraded" ? answer : undefined;
        }, "/healthz to report Redis down");
        assert.equal(status, 200, "degraded, still serving");
        assert.equal(body.status, "degraded");
        assert.match(body.redis!.detail, /unreachable/);
        assert.equal(await metric(member.url, key, "spark_redis_up"), "0");
      }
      assert.equal((await health(open.url)).body.redis?.failure, "open");
      assert.equal((await health(closed.url)).body.redis?.failure, "closed");

      // open: the instance's own limits, with its own history (two of three used).
      assert.equal((await respond(open.url, key)).status, 200);
      assert.equal((await respond(open.url, keys.few!)).status, 200);
      const local = await respond(open.url, keys.few!);
      assert.equal(local.status, 429);
      assert.doesNotMatch(local.body.error!.message, /all of this server's instances/);
      // closed: refused, saying why and when to retry; nothing was started.
      const refused = await respond(closed.url, key);
      assert.equal(refused.status, 503);
      assert.equal(refused.body.error?.code, "limits_unavailable");
      assert.equal(refused.headers.get("retry-after"), "1");
      assert.match(refused.body.error!.message, /--redis-failure closed/);

      await redis.start();
      restarted = true;
    } finally {
      if (!restarted) await redis.start();
    }
    for (const member of [open, closed]) {
      await until(async () => (await health(member.url)).body.status === "ok", "/healthz to be ok again");
      assert.equal(await metric(member.url, key, "spark_redis_up"), "1");
    }
    // Shared again, from Redis's (empty) counts.
    assert.equal((await respond(closed.url, key)).status, 200);
    assert.equal(
      (await respond(open.url, keys.few!)).headers.get("x-ratelimit-remaining-requests"),
      "2",
      "counted in Redis again",
    );

    // Everything admitted before the outage ran to its end.
    for (const { events } of await Promise.all(reading)) {
      const last = events.at(-1)!;
      assert.equal(last.type, "response.completed");
      const text = events
        .filter((event) => event.type === "response.output_text.delta")
        .map((event) => event.data.delta)
        .join("");
      assert.equal(text.split("word").length - 1, WORDS, "the whole text");
    }
    for (const socket of sockets) {
      const created = await socket.waitForType("response.created");
      const id = (created.response as { id: string }).id;
      await socket.waitFor(
        (event) => event.type === "response.completed" && (event.response as { id: string }).id === id,
      );
      const events = socket.responseEvents(id);
      assert.equal(terminalOf(events).type, "response.completed");
      assert.equal(textOf(events).split("word").length - 1, WORDS);
      // The connection goes on.
      const next = await socket.turn({ model: "spark", input: "still there?" });
      assert.equal(textOf(next), "Fine.");
      await socket.close();
    }
    for (const member of [open, closed]) {
      const log = member.stderr();
      assert.equal(log.match(/is unreachable/g)?.length, 1, log);
      assert.equal(log.match(/is reachable again after/g)?.length, 1, log);
    }
  },
);
