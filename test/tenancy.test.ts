/**
 * A shared server: API keys, isolation between keys on every route and over WebSocket, per-key
 * per-tier rate limits, the fair engine queue (`response.queued`), and `model: "auto"` routing.
 * Real sockets on port 0, the real `openai` SDK, the script engine at a fixed rate.
 */
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import OpenAI from "openai";
import { formatDuration } from "../src/core/admission.js";
import { generateKey, KeyRing, type Limits } from "../src/core/keys.js";
import { ModelRegistry } from "../src/core/model-registry.js";
import type { EnginePart, EngineRequest } from "../src/engine/types.js";
import { parseScript, ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer, type SparkServerOptions } from "../src/server/http-server.js";
import { WsClient, type ServerEvent } from "./helpers/ws-client.js";

const ALICE = generateKey();
const BOB = generateKey();
const servers: SparkServer[] = [];

after(async () => {
  await Promise.all(servers.map((server) => server.close()));
});

/** The script engine, noting the input of every generation it starts, in order. */
class RecordingEngine extends ScriptEngine {
  readonly started: string[] = [];

  override stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    const user = request.items.findLast((item) => item.type === "message" && item.role === "user");
    this.started.push(user?.type === "message" ? user.text : "");
    return super.stream(request, signal);
  }
}

/**
 * A recording engine whose generations each hold their engine slot until the test lets them go
 * (`finishNext`, in the order they started), so the queue's grants happen exactly when the test says.
 */
class GatedEngine extends RecordingEngine {
  readonly #gates: (() => void)[] = [];
  #open = false;

  override async *stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    const parts = super.stream(request, signal);
    if (!this.#open) await new Promise<void>((resolve) => this.#gates.push(resolve));
    yield* parts;
  }

  /** Lets the oldest held generation run to its end. */
  finishNext(): void {
    this.#gates.shift()?.();
  }

  /** Lets every generation run, now and from now on. */
  open(): void {
    this.#open = true;
    for (const gate of this.#gates.splice(0)) gate();
  }
}

async function start(
  options: {
    words?: number;
    rate?: number;
    limits?: Limits;
    capacity?: number;
    maxQueue?: number;
    gated?: boolean;
  } = {},
): Promise<{ server: SparkServer; engine: RecordingEngine; url: string }> {
  const text = Array.from({ length: options.words ?? 5 }, (_, i) => `word${i}`).join(" ");
  const lines = parseScript(JSON.stringify({ output: [{ type: "message", text }] }), "tenancy");
  const settings = options.rate === undefined ? { lines } : { lines, rate: options.rate };
  const engine = options.gated ? new GatedEngine(settings) : new RecordingEngine(settings);
  const serverOptions: SparkServerOptions = {
    engine,
    port: 0,
    keys: new KeyRing(
      [
        { id: "alice", hash: ALICE.hash },
        { id: "bob", hash: BOB.hash },
      ],
      options.limits ?? {},
    ),
    ...(options.capacity !== undefined ? { capacity: options.capacity } : {}),
    ...(options.maxQueue !== undefined ? { admission: { maxQueue: options.maxQueue } } : {}),
  };
  const server = new SparkServer(serverOptions);
  servers.push(server);
  const url = await server.listen();
  return { server, engine, url };
}

function sdk(url: string, key: string): OpenAI {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0 });
}

async function post(
  url: string,
  path: string,
  body: unknown,
  key?: string,
): Promise<{ status: number; headers: Headers; json: Record<string, unknown> }> {
  const response = await fetch(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
  });
  return { status: response.status, headers: response.headers, json: (await response.json()) as never };
}

async function call(
  url: string,
  method: string,
  path: string,
  key?: string,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const response = await fetch(`${url}${path}`, {
    method,
    headers: key ? { authorization: `Bearer ${key}` } : {},
  });
  return { status: response.status, json: (await response.json()) as never };
}

function errorOf(json: Record<string, unknown>): { code: string; type: string; message: string } {
  return json.error as never;
}

/** A streamed response read with the SDK; `events` fills as they arrive. */
function streamed(client: OpenAI, body: Record<string, unknown>, signal?: AbortSignal) {
  const events: ServerEvent[] = [];
  const waiters: { type: string; resolve: () => void }[] = [];
  const done = (async () => {
    const stream = await client.responses.create(
      { model: "spark", ...body, stream: true } as never,
      signal ? { signal } : {},
    );
    for await (const event of stream as unknown as AsyncIterable<ServerEvent>) {
      events.push(event);
      for (const waiter of waiters.filter((w) => w.type === event.type)) waiter.resolve();
    }
    return events;
  })();
  const seen = (type: string): Promise<void> =>
    events.some((e) => e.type === type)
      ? Promise.resolve()
      : new Promise<void>((resolve) => waiters.push({ type, resolve }));
  return { events, done, seen };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

function rateLimitsOf(headers: Headers): Record<string, string> {
  const limits: Record<string, string> = {};
  headers.forEach((value, name) => {
    if (name.startsWith("x-ratelimit-")) limits[name] = value;
  });
  return limits;
}

/** A Go-style duration (`59.412s`, `1m0s`, `20ms`) of more than nothing and at most a minute. */
function assertMinuteOrLess(text: string | null): void {
  const match = /^(?:(\d+)ms|(?:(\d+)m)?(\d+(?:\.\d{1,3})?)s)$/.exec(text ?? "");
  assert.ok(match, `a duration: ${text}`);
  const ms = match[1] ? Number(match[1]) : Number(match[2] ?? 0) * 60_000 + Number(match[3]) * 1000;
  assert.ok(ms > 0 && ms <= 60_000, `${text} is within the minute`);
}

describe("API keys", () => {
  test("requests without a key or with a wrong key get 401; /healthz stays open", async () => {
    const { url } = await start();
    const missing = await post(url, "/v1/responses", { input: "hi" });
    assert.equal(missing.status, 401);
    assert.equal(errorOf(missing.json).code, "missing_api_key");
    assert.match(missing.headers.get("www-authenticate") ?? "", /^Bearer/);

    const wrong = await post(url, "/v1/responses", { input: "hi" }, "sk-spark-not-a-real-key-at-all");
    assert.equal(wrong.status, 401);
    assert.equal(errorOf(wrong.json).code, "invalid_api_key");
    assert.doesNotMatch(errorOf(wrong.json).message, /not-a-real-key-at/, "the key is not echoed back");

    assert.equal((await call(url, "GET", "/v1/models")).status, 401);
    assert.equal((await call(url, "GET", "/healthz")).status, 200);
    await assert.rejects(sdk(url, "sk-wrong").responses.create({ model: "spark", input: "hi" }), {
      status: 401,
    });

    const ok = await sdk(url, ALICE.key).responses.create({ model: "spark", input: "hi" });
    assert.equal(ok.status, "completed");
    assert.equal(ok.output_text, "word0 word1 word2 word3 word4");
  });

  test("a WebSocket upgrade needs a key too", async () => {
    const { url } = await start();
    await assert.rejects(WsClient.connect(url), /upgrade refused with 401/);
    await assert.rejects(
      WsClient.connect(url, { headers: { authorization: "Bearer sk-spark-wrong" } }),
      /upgrade refused with 401/,
    );
    const client = await WsClient.connect(url, { headers: { authorization: `Bearer ${ALICE.key}` } });
    const events = await client.turn({ model: "spark", input: "hi" });
    assert.equal(events.at(-1)?.type, "response.completed");
    await client.close();
  });
});

describe("isolation between keys", () => {
  test("another key's response is not found on every route", async () => {
    const { url } = await start();
    const alice = sdk(url, ALICE.key);
    const created = await alice.responses.create({ model: "spark", input: "alice's secret plan" });
    const id = created.id;

    for (const [method, path] of [
      ["GET", `/v1/responses/${id}`],
      ["GET", `/v1/responses/${id}/input_items`],
      ["DELETE", `/v1/responses/${id}`],
    ] as const) {
      const answer = await call(url, method, path, BOB.key);
      assert.equal(answer.status, 404, `${method} ${path}`);
      assert.equal(errorOf(answer.json).code, "response_not_found");
      assert.doesNotMatch(JSON.stringify(answer.json), /secret plan/);
    }
    const chained = await post(url, "/v1/responses", { input: "more", previous_response_id: id }, BOB.key);
    assert.equal(chained.status, 400);
    assert.equal(errorOf(chained.json).code, "previous_response_not_found");
    const compacted = await post(url, "/v1/responses/compact", { previous_response_id: id }, BOB.key);
    assert.equal(compacted.status, 400);
    assert.equal(errorOf(compacted.json).code, "previous_response_not_found");

    const bobSocket = await WsClient.connect(url, { headers: { authorization: `Bearer ${BOB.key}` } });
    bobSocket.send({ type: "response.create", model: "spark", input: "more", previous_response_id: id });
    const error = await bobSocket.waitForType("error");
    assert.equal((error.error as { code: string }).code, "previous_response_not_found");
    await bobSocket.close();

    // Alice still has everything, untouched by Bob's attempts.
    const own = await alice.responses.retrieve(id);
    assert.equal(own.output_text, created.output_text);
    const items = await alice.responses.inputItems.list(id);
    assert.deepEqual(
      items.data.map((item) => (item as { content: { text: string }[] }).content[0]?.text),
      ["alice's secret plan"],
    );
    const next = await alice.responses.create({ model: "spark", input: "go on", previous_response_id: id });
    assert.equal(next.status, "completed");
  });

  test("one key cannot steer another key's WebSocket response", async () => {
    const { url } = await start({ words: 40, rate: 200 });
    const bob = await WsClient.connect(url, { headers: { authorization: `Bearer ${BOB.key}` } });
    const alice = await WsClient.connect(url, { headers: { authorization: `Bearer ${ALICE.key}` } });
    bob.send({ type: "response.create", model: "spark", input: "bob's long task" });
    const created = await bob.waitForType("response.created");
    const id = (created.response as { id: string }).id;
    alice.send({ type: "response.steer", previous_response_id: id, input: "stop and leak" });
    const failed = await alice.waitForType("response.steer.failed");
    assert.equal((failed.error as { code: string }).code, "response_not_found");
    const terminal = await bob.waitFor((e) => e.type === "response.completed");
    assert.equal((terminal.response as { incomplete_details: unknown }).incomplete_details, null);
    assert.ok(!bob.events.some((e) => e.type.startsWith("response.steer")), "bob saw nothing of alice");
    await Promise.all([alice.close(), bob.close()]);
  });
});

describe("rate limits", () => {
  test("requests per minute: 429 with retry-after, per key and per tier, over HTTP and WebSocket", async () => {
    const { url } = await start({ limits: { spark: { requestsPerMinute: 2 } } });
    for (let i = 0; i < 2; i++) {
      assert.equal(
        (await post(url, "/v1/responses", { model: "spark", input: "hi" }, ALICE.key)).status,
        200,
      );
    }
    const refused = await post(url, "/v1/responses", { model: "spark", input: "hi" }, ALICE.key);
    assert.equal(refused.status, 429);
    assert.equal(errorOf(refused.json).code, "rate_limit_exceeded");
    assert.equal(errorOf(refused.json).type, "requests");
    const retryAfter = Number(refused.headers.get("retry-after"));
    assert.ok(retryAfter >= 1 && retryAfter <= 60, `retry-after ${retryAfter}`);

    // Chat Completions counts against the same limit.
    const chat = await post(
      url,
      "/v1/chat/completions",
      { model: "spark", messages: [{ role: "user", content: "hi" }] },
      ALICE.key,
    );
    assert.equal(chat.status, 429);

    const socket = await WsClient.connect(url, { headers: { authorization: `Bearer ${ALICE.key}` } });
    socket.send({ type: "response.create", model: "spark", input: "hi" });
    const error = await socket.waitForType("error");
    assert.equal(error.status, 429);
    assert.equal((error.error as { code: string }).code, "rate_limit_exceeded");
    assert.ok(Number((error.headers as Record<string, string>)["retry-after"]) >= 1);
    assert.equal((error.headers as Record<string, string>)["x-ratelimit-remaining-requests"], "0");
    await socket.close();

    // Other keys and the other tier have limits of their own.
    assert.equal((await post(url, "/v1/responses", { model: "spark", input: "hi" }, BOB.key)).status, 200);
    assert.equal((await post(url, "/v1/responses", { model: "deep", input: "hi" }, ALICE.key)).status, 200);
  });

  test("tokens per minute are charged when a response ends", async () => {
    const { url } = await start({ limits: { deep: { tokensPerMinute: 10 } } });
    const first = await post(url, "/v1/responses", { model: "deep", input: "one two three" }, ALICE.key);
    assert.equal(first.status, 200);
    const usage = first.json.usage as { total_tokens: number };
    assert.ok(usage.total_tokens >= 10, `the first response used ${usage.total_tokens} tokens`);
    const refused = await post(url, "/v1/responses", { model: "deep", input: "again" }, ALICE.key);
    assert.equal(refused.status, 429);
    assert.equal(errorOf(refused.json).type, "tokens");
    assert.equal((await post(url, "/v1/responses", { model: "deep", input: "x" }, BOB.key)).status, 200);
  });

  test("x-ratelimit-* headers on every HTTP route where a per-minute limit applies, 429s included", async () => {
    const { url } = await start({ limits: { spark: { requestsPerMinute: 6, tokensPerMinute: 100_000 } } });
    const alice = sdk(url, ALICE.key);

    const first = await post(url, "/v1/responses", { model: "spark", input: "hi" }, ALICE.key);
    assert.equal(first.status, 200);
    const { "x-ratelimit-reset-requests": resetRequests, ...firstLimits } = rateLimitsOf(first.headers);
    assertMinuteOrLess(resetRequests ?? null);
    assert.deepEqual(firstLimits, {
      "x-ratelimit-limit-requests": "6",
      "x-ratelimit-remaining-requests": "5",
      "x-ratelimit-limit-tokens": "100000",
      "x-ratelimit-remaining-tokens": "100000", // taken at admit time: nothing was charged yet
      "x-ratelimit-reset-tokens": "0s",
    });
    const used = (first.json.usage as { total_tokens: number }).total_tokens;

    const { data: stream, response: streamed } = await alice.responses
      .create({ model: "spark", input: "hi", stream: true })
      .withResponse();
    for await (const event of stream) void event;
    assert.equal(streamed.headers.get("x-ratelimit-remaining-requests"), "4");
    assert.equal(streamed.headers.get("x-ratelimit-remaining-tokens"), String(100_000 - used));
    assertMinuteOrLess(streamed.headers.get("x-ratelimit-reset-tokens"));

    const { response: chat } = await alice.chat.completions
      .create({ model: "spark", messages: [{ role: "user", content: "hi" }] })
      .withResponse();
    assert.equal(chat.headers.get("x-ratelimit-remaining-requests"), "3");
    const compacted = await post(url, "/v1/responses/compact", { model: "spark", input: "hi" }, ALICE.key);
    assert.equal(compacted.status, 200);
    assert.equal(compacted.headers.get("x-ratelimit-remaining-requests"), "2");
    assert.equal(compacted.headers.get("x-ratelimit-limit-tokens"), "100000");
    const prewarm = await post(
      url,
      "/v1/responses",
      { model: "spark", input: "x", generate: false },
      ALICE.key,
    );
    assert.equal(prewarm.headers.get("x-ratelimit-remaining-requests"), "1");
    const last = await post(
      url,
      "/v1/chat/completions",
      { messages: [{ role: "user", content: "hi" }] },
      ALICE.key,
    );
    assert.equal(last.headers.get("x-ratelimit-remaining-requests"), "0");

    const refused = await post(url, "/v1/responses", { model: "spark", input: "hi" }, ALICE.key);
    assert.equal(refused.status, 429);
    assert.equal(refused.headers.get("x-ratelimit-limit-requests"), "6");
    assert.equal(refused.headers.get("x-ratelimit-remaining-requests"), "0");
    assertMinuteOrLess(refused.headers.get("x-ratelimit-reset-requests"));
    assert.ok(refused.headers.has("x-ratelimit-remaining-tokens"));

    // No limit applies to the deep tier: no headers.
    const deep = await post(url, "/v1/responses", { model: "deep", input: "hi" }, ALICE.key);
    assert.equal(deep.status, 200);
    assert.deepEqual(rateLimitsOf(deep.headers), {});
  });

  test("reset durations are written the way OpenAI writes them (Go durations)", () => {
    assert.deepEqual(
      [0, 0.4, 20, 999, 1000, 8640, 59_412, 60_000, 60_500, 360_000, 3_600_000].map(formatDuration),
      ["0s", "1ms", "20ms", "999ms", "1s", "8.64s", "59.412s", "1m0s", "1m0.5s", "6m0s", "1h0m0s"],
    );
  });

  test("concurrent responses per key", async () => {
    const { url } = await start({ words: 200, rate: 400, limits: { spark: { concurrent: 1 } } });
    const controller = new AbortController();
    const running = streamed(sdk(url, ALICE.key), { input: "long" }, controller.signal);
    await running.seen("response.output_text.delta");
    const refused = await post(url, "/v1/responses", { model: "spark", input: "second" }, ALICE.key);
    assert.equal(refused.status, 429);
    assert.match(errorOf(refused.json).message, /concurrent/);
    controller.abort();
    await running.done.catch(() => undefined);
  });
});

describe("the engine queue", () => {
  test("queued responses see response.queued then in_progress; spark before deep; keys take turns", async () => {
    const gated = await start({ words: 6, capacity: 1, gated: true });
    const { url, server } = gated;
    const engine = gated.engine as GatedEngine;
    const alice = sdk(url, ALICE.key);
    const bob = sdk(url, BOB.key);
    const first = streamed(alice, { model: "deep", input: "A-running" });
    await first.seen("response.in_progress");

    // Arrival order: alice deep, alice spark ×3, then bob spark, all while A holds the only slot.
    const queued: ReturnType<typeof streamed>[] = [];
    for (const [client, model, input] of [
      [alice, "deep", "alice-deep"],
      [alice, "spark", "alice-spark-1"],
      [alice, "spark", "alice-spark-2"],
      [alice, "spark", "alice-spark-3"],
      [bob, "spark", "bob-spark"],
    ] as const) {
      const stream = streamed(client, { model, input });
      queued.push(stream);
      await stream.seen("response.queued");
    }
    assert.equal(server.admission.queued, 5);
    engine.open();

    const all = await Promise.all([first.done, ...queued.map((s) => s.done)]);
    assert.deepEqual(engine.started, [
      "A-running",
      "alice-spark-1",
      "bob-spark", // Bob's single request does not wait behind Alice's burst.
      "alice-spark-2",
      "alice-spark-3",
      "alice-deep", // Deep work waits for the interactive tier: 4 spark grants here, the most it waits.
    ]);
    for (const events of all.slice(1)) {
      const types = events.map((e) => e.type);
      assert.deepEqual(types.slice(0, 3), ["response.created", "response.queued", "response.in_progress"]);
      assert.equal((events[0]!.response as { status: string }).status, "queued");
      assert.equal((events[1]!.response as { status: string }).status, "queued");
      assert.equal((events[2]!.response as { status: string }).status, "in_progress");
      assert.equal(types.at(-1), "response.completed");
    }
    assert.equal(server.admission.queued, 0);
  });

  test("a steady stream of spark work cannot starve deep: deep starts after at most 4 spark grants", async () => {
    const gated = await start({ capacity: 1, gated: true });
    const { url } = gated;
    const engine = gated.engine as GatedEngine;
    const alice = sdk(url, ALICE.key);
    const bob = sdk(url, BOB.key);
    const all: ReturnType<typeof streamed>[] = [];
    const send = async (client: OpenAI, model: string, input: string): Promise<void> => {
      const stream = streamed(client, { model, input });
      all.push(stream);
      await Promise.race([stream.seen("response.queued"), stream.seen("response.in_progress")]);
    };
    let sparks = 0;
    const spark = (): Promise<void> => send(alice, "spark", `spark-${++sparks}`);
    try {
      await spark(); // runs, holding the only slot
      await send(bob, "deep", "deep-1");
      await spark();
      // Every grant finds spark work waiting (one more arrives before each), as under steady load.
      for (let grant = 0; grant < 12; grant++) {
        await spark();
        const started = engine.started.length;
        engine.finishNext();
        await until(() => engine.started.length > started);
        if (grant === 5) await send(bob, "deep", "deep-2");
      }
      assert.deepEqual(engine.started, [
        "spark-1",
        "spark-2", // spark goes first while deep has waited fewer than 4 spark grants…
        "spark-3",
        "spark-4",
        "spark-5",
        "deep-1", // …and deep goes next once it has.
        "spark-6", // deep-2 arrives while this one runs
        "spark-7",
        "spark-8",
        "spark-9",
        "spark-10",
        "deep-2",
        "spark-11",
      ]);
    } finally {
      engine.open();
      for (const events of await Promise.all(all.map((s) => s.done)))
        assert.equal(events.at(-1)?.type, "response.completed");
    }
  });

  test("a full queue answers 429 queue_full with retry-after", async () => {
    const { url } = await start({ words: 100, rate: 400, capacity: 1, maxQueue: 1 });
    const controller = new AbortController();
    const running = streamed(sdk(url, ALICE.key), { input: "running" }, controller.signal);
    await running.seen("response.in_progress");
    const waiting = streamed(sdk(url, BOB.key), { input: "waiting" }, controller.signal);
    await waiting.seen("response.queued");
    const refused = await post(url, "/v1/responses", { model: "spark", input: "no room" }, BOB.key);
    assert.equal(refused.status, 429);
    assert.equal(errorOf(refused.json).code, "queue_full");
    assert.ok(Number(refused.headers.get("retry-after")) >= 1);
    controller.abort();
    await Promise.allSettled([running.done, waiting.done]);
  });

  test("a client that leaves while queued is removed and never generates", async () => {
    const { url, engine, server } = await start({ words: 30, rate: 300, capacity: 1 });
    const running = streamed(sdk(url, ALICE.key), { input: "running" });
    await running.seen("response.in_progress");
    const leaving = new AbortController();
    const gone = streamed(sdk(url, BOB.key), { input: "leaves" }, leaving.signal);
    await gone.seen("response.queued");
    const stays = streamed(sdk(url, BOB.key), { input: "stays" });
    await stays.seen("response.queued");
    assert.equal(server.admission.queued, 2);

    leaving.abort();
    const goneEvents = await gone.done.catch(() => gone.events);
    assert.ok(!goneEvents.some((e) => e.type === "response.in_progress"), "it never started");
    await until(() => server.admission.queued === 1);
    await Promise.all([running.done, stays.done]);
    assert.deepEqual(engine.started, ["running", "stays"]);
  });

  test("over WebSocket a queued response also reports response.queued", async () => {
    const { url } = await start({ words: 20, rate: 300, capacity: 1 });
    const one = await WsClient.connect(url, { headers: { authorization: `Bearer ${ALICE.key}` } });
    const two = await WsClient.connect(url, { headers: { authorization: `Bearer ${BOB.key}` } });
    one.send({ type: "response.create", model: "spark", input: "first" });
    await one.waitForType("response.in_progress");
    const events = await two.turn({ model: "spark", input: "second" });
    assert.deepEqual(
      events.slice(0, 3).map((e) => e.type),
      ["response.created", "response.queued", "response.in_progress"],
    );
    assert.equal(events.at(-1)?.type, "response.completed");
    await Promise.all([one.close(), two.close()]);
  });
});

describe('model "auto"', () => {
  test("the router's choice is in a response header and the response metadata; explicit names win", async () => {
    const { url } = await start();
    const routed = await post(
      url,
      "/v1/responses",
      { model: "auto", input: "Fix the SQL injection in the login handler." },
      ALICE.key,
    );
    assert.equal(routed.status, 200);
    assert.equal(routed.headers.get("x-spark-route"), "deep");
    assert.equal(routed.headers.get("x-spark-route-rule"), "security_sensitive");
    assert.equal(routed.json.model, "deep");
    const metadata = routed.json.metadata as Record<string, string>;
    assert.equal(metadata.spark_route, "deep");
    assert.match(metadata.spark_route_reason ?? "", /sql injection|login/i);

    const quick = await post(
      url,
      "/v1/responses",
      { model: "auto", input: "What does Array.prototype.at do?" },
      ALICE.key,
    );
    assert.equal(quick.headers.get("x-spark-route"), "spark");
    assert.equal(quick.json.model, "spark");

    const explicit = await post(
      url,
      "/v1/responses",
      { model: "spark", input: "Fix the SQL injection in the login handler." },
      ALICE.key,
    );
    assert.equal(explicit.headers.get("x-spark-route"), null);
    assert.equal(explicit.json.model, "spark");
    assert.deepEqual(explicit.json.metadata, {});

    const models = (await call(url, "GET", "/v1/models", ALICE.key)).json.data as { id: string }[];
    for (const id of ["spark", "deep", "auto"])
      assert.ok(
        models.some((m) => m.id === id),
        id,
      );
  });
});

describe("configured models", () => {
  test("each alias has its own engine and defaults; a request's own values win over the defaults", async () => {
    const script = (text: string): ScriptEngine =>
      new ScriptEngine({ lines: parseScript(JSON.stringify({ output: [{ type: "message", text }] }), text) });
    const fast = script("fast one two three four");
    const thorough = script("thorough one two three four");
    const models = new ModelRegistry([
      { alias: "spark", tier: "spark", engine: fast, engineModel: "spark", capacity: 4, defaults: {} },
      {
        alias: "deep",
        tier: "deep",
        engine: thorough,
        engineModel: "spark",
        capacity: 4,
        defaults: { maxOutputTokens: 2 },
      },
    ]);
    const server = new SparkServer({ models, port: 0 });
    servers.push(server);
    const client = sdk(await server.listen(), "unused");

    const spark = await client.responses.create({ model: "spark", input: "hi" });
    assert.equal(spark.output_text, "fast one two three four");
    const capped = await client.responses.create({ model: "deep", input: "hi" });
    assert.equal(capped.status, "incomplete");
    assert.equal(capped.incomplete_details?.reason, "max_output_tokens");
    assert.ok(capped.output_text.startsWith("thorough"));
    const own = await client.responses.create({ model: "deep", input: "hi", max_output_tokens: 100 });
    assert.equal(own.status, "completed");
    assert.equal(own.output_text, "thorough one two three four");
  });
});
