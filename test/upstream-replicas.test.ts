/**
 * The openai engine in front of several upstream replicas: real HTTP servers on 127.0.0.1 stand
 * in for the replicas and record which requests they got; Spark runs as a real `SparkServer`.
 * Only the network boundary is simulated.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { ConfigError, resolveSettings } from "../src/settings/config.js";
import { createModels } from "../src/cli/create-engine.js";
import { Metrics } from "../src/core/metrics.js";
import type { EngineRequest } from "../src/engine/types.js";
import { OpenAIEngine, type OpenAIEngineOptions } from "../src/engines/openai/openai-engine.js";
import { LATENCY_TTL_MS, PrefixRouter, prefixKey } from "../src/engines/openai/prefix-router.js";
import { SparkServer } from "../src/server/http-server.js";
import { file, readSse, runToExit } from "./helpers/cli.js";
import { closedPort } from "./helpers/ports.js";
import { WsClient, terminalOf } from "./helpers/ws-client.js";

type Json = Record<string, unknown>;

interface Post {
  /** The conversation: the first word of its first user message. */
  tag: string;
  lastUser: string;
  authorization: string | undefined;
}

/** A fake upstream replica speaking streamed Chat Completions; it can be killed and restarted on its port. */
class FakeReplica {
  readonly posts: Post[] = [];
  probes = 0;
  /** Answer every generation with this status instead of a stream. */
  failWith: number | undefined;
  /** Answer every generation with 200 and a stream that is not valid SSE JSON. */
  malformed = false;
  /** Wait this long before the first chunk of every generation. */
  delayMs = 0;
  #server: http.Server | undefined;
  #held: (() => void)[] = [];
  port = 0;

  constructor(readonly name: string) {}

  get url(): string {
    return `http://127.0.0.1:${this.port}/v1`;
  }

  async start(): Promise<this> {
    const server = http.createServer((req, res) => void this.#handle(req, res));
    server.listen(this.port, "127.0.0.1");
    await once(server, "listening");
    this.port = (server.address() as AddressInfo).port;
    this.#server = server;
    return this;
  }

  /** Closes the port and every open connection, as a crashed process would. */
  async kill(): Promise<void> {
    const server = this.#server;
    this.#server = undefined;
    if (!server) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  /** Lets every held response finish. */
  release(): void {
    for (const resolve of this.#held.splice(0)) resolve();
  }

  tags(): string[] {
    return this.posts.map((post) => post.tag);
  }

  async #handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let text = "";
    for await (const chunk of req) text += String(chunk);
    if (req.method === "GET") {
      this.probes++;
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ object: "list", data: [{ id: "coder", object: "model" }] }));
      return;
    }
    const body = JSON.parse(text) as { messages: { role: string; content: string }[] };
    const users = body.messages.filter((m) => m.role === "user").map((m) => m.content);
    const lastUser = users.at(-1) ?? "";
    this.posts.push({
      tag: (users[0] ?? "").split(" ")[0]!,
      lastUser,
      authorization: req.headers.authorization,
    });
    if (this.failWith !== undefined) {
      res.writeHead(this.failWith, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { message: "replica broken" } }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    if (this.malformed) {
      res.end('data: {"id": "c", "choices": [{"delta": {"content": "hal\n\n');
      return;
    }
    if (this.delayMs > 0) await sleep(this.delayMs);
    res.write(chunk({ role: "assistant", content: "" }));
    if (lastUser.includes("HOLD")) {
      res.write(chunk({ content: "partial " }));
      await new Promise<void>((resolve) => this.#held.push(resolve));
    }
    res.write(chunk({ content: `reply from ${this.name}` }));
    res.write(chunk({}, "stop"));
    res.end("data: [DONE]\n\n");
  }
}

function chunk(delta: Json, finish: string | null = null): string {
  return `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
}

const started: { close(): Promise<void> }[] = [];
after(async () => {
  for (const thing of started.splice(0).reverse()) await thing.close().catch(() => {});
});

async function replicas(count: number): Promise<FakeReplica[]> {
  const list = await Promise.all(
    Array.from({ length: count }, (_, i) => new FakeReplica(String.fromCharCode(65 + i)).start()),
  );
  for (const replica of list) started.push({ close: () => replica.kill() });
  return list;
}

async function sparkServer(
  upstreams: FakeReplica[],
  options: Partial<OpenAIEngineOptions> = {},
): Promise<{ server: SparkServer; engine: OpenAIEngine; metrics: Metrics }> {
  const metrics = new Metrics();
  const engine = new OpenAIEngine({
    upstreams: upstreams.map((u) => ({ url: u.url })),
    registry: metrics.registry,
    ...options,
  });
  await engine.start();
  const server = new SparkServer({ engine, metrics, port: 0 });
  await server.listen();
  started.push(server, engine);
  return { server, engine, metrics };
}

/** One Responses turn over HTTP (not streamed). */
async function post(server: SparkServer, body: Json): Promise<{ status: number; json: Json }> {
  const response = await fetch(`${server.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "spark", ...body }),
  });
  return { status: response.status, json: (await response.json()) as Json };
}

/** The value of one metric line, 0 when absent. */
async function metric(server: SparkServer, name: string, labels: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name}{`) && l.includes(labels));
  return line ? Number(line.split(" ").at(-1)) : 0;
}

/** Polls `condition` until it holds; the bound only keeps a broken build from hanging. */
async function eventually(condition: () => Promise<boolean> | boolean, what: string): Promise<void> {
  for (let i = 0; i < 1000; i++) {
    if (await condition()) return;
    await sleep(20);
  }
  assert.fail(`never happened: ${what}`);
}

/** Which replicas served each conversation. */
function servedBy(upstreams: FakeReplica[]): Map<string, Set<string>> {
  const map = new Map<string, Set<string>>();
  for (const upstream of upstreams) {
    for (const tag of upstream.tags()) {
      if (!map.has(tag)) map.set(tag, new Set());
      map.get(tag)!.add(upstream.name);
    }
  }
  return map;
}

/** Only keeps a broken build from hanging the suite; nothing depends on it. */
const SAFETY = { timeout: 60_000 };

test(
  "affinity: every turn of a conversation reaches the replica of its first, over WebSocket and HTTP alike; conversations spread",
  SAFETY,
  async () => {
    const upstreams = await replicas(3);
    const { server } = await sparkServer(upstreams);
    // Long instructions shared by every conversation, sent on every turn, as Codex does: they must
    // neither pull all conversations onto one replica nor break a conversation's affinity.
    const instructions = "You are a coding agent in a sandbox. Be brief. ".repeat(200);
    const ws = await WsClient.connect(server.url);
    const conversations = 6;
    const lastIds: string[] = [];
    for (let c = 0; c < conversations; c++) {
      const first = terminalOf(await ws.turn({ model: "spark", instructions, input: `conv${c} hello` }));
      assert.equal(first.type, "response.completed");
      const second = terminalOf(
        await ws.turn({
          model: "spark",
          instructions,
          previous_response_id: first.response.id,
          input: `conv${c} more`,
        }),
      );
      assert.equal(second.type, "response.completed");
      lastIds.push(second.response.id);
    }
    // Third turns over HTTP, continuing the WebSocket chains from the store, in another order.
    for (let c = conversations - 1; c >= 0; c--) {
      const { status, json } = await post(server, {
        instructions,
        previous_response_id: lastIds[c],
        input: `conv${c} and over HTTP`,
      });
      assert.equal(status, 200, JSON.stringify(json));
      assert.equal(json.status, "completed");
    }
    await ws.close();

    const byConversation = servedBy(upstreams);
    assert.equal(byConversation.size, conversations);
    for (const [tag, names] of byConversation) {
      assert.equal(names.size, 1, `${tag} went to ${[...names].join(", ")}`);
    }
    const used = upstreams.filter((upstream) => upstream.posts.length > 0);
    assert.ok(used.length >= 2, "new conversations spread over the replicas");

    let hits = 0;
    for (const upstream of upstreams) {
      hits += await metric(server, "spark_upstream_affinity_hits_total", `replica="${upstream.url}"`);
    }
    assert.equal(hits, 2 * conversations);
  },
);

test(
  "a replica killed mid-run: a response streaming from it fails cleanly, none that had not streamed fails; it is ejected and rejoins",
  SAFETY,
  async () => {
    const upstreams = await replicas(3);
    const { server } = await sparkServer(upstreams, { health: { intervalMs: 50, failuresToEject: 2 } });
    const ids = new Map<string, string>();
    for (let c = 0; c < 6; c++) {
      const { json } = await post(server, { input: `conv${c} start` });
      assert.equal(json.status, "completed");
      ids.set(`conv${c}`, json.id as string);
    }
    const victim = upstreams.reduce((a, b) => (b.posts.length > a.posts.length ? b : a));
    const onVictim = victim.tags();
    assert.ok(onVictim.length >= 2);

    // A turn of one of the victim's conversations streams its first words, then the victim dies.
    const streaming = await fetch(`${server.url}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({
        model: "spark",
        previous_response_id: ids.get(onVictim[0]!),
        input: `${onVictim[0]} HOLD`,
        stream: true,
      }),
    });
    let killed: Promise<void> | undefined;
    const { events } = await readSse(streaming, (event) => {
      if (event.type === "response.output_text.delta") killed ??= victim.kill();
    });
    await killed;
    const terminals = events.filter((e) => /^response\.(completed|incomplete|failed)$/.test(e.type));
    assert.deepEqual(
      terminals.map((e) => e.type),
      ["response.failed"],
    );
    const failed = terminals[0]!.data.response as { error: { code: string; message: string } };
    assert.equal(failed.error.code, "upstream_error");
    assert.match(failed.error.message, new RegExp(`${victim.url}.*mid-response`));

    // Every conversation continues at once, the victim's among them, and new ones start.
    const turns = await Promise.all([
      ...[...ids].map(([tag, id]) => post(server, { previous_response_id: id, input: `${tag} after` })),
      ...[6, 7, 8].map((c) => post(server, { input: `conv${c} new` })),
    ]);
    for (const { status, json } of turns) {
      assert.equal(status, 200, JSON.stringify(json));
      assert.equal(json.status, "completed");
      const text = ((json.output as { content: { text: string }[] }[])[0]?.content[0]?.text ?? "") as string;
      assert.doesNotMatch(text, new RegExp(`from ${victim.name}`));
    }
    const label = `replica="${victim.url}"`;
    await eventually(
      async () => (await metric(server, "spark_upstream_ejections_total", label)) === 1,
      "the dead replica is ejected",
    );
    assert.equal(await metric(server, "spark_upstream_healthy", label), 0);

    await victim.start();
    await eventually(
      async () => (await metric(server, "spark_upstream_healthy", label)) === 1,
      "the replica rejoins once it answers its checks",
    );
    const before = victim.posts.length;
    for (let c = 10; c < 40 && victim.posts.length === before; c++) {
      const { json } = await post(server, { input: `conv${c} new` });
      assert.equal(json.status, "completed");
    }
    assert.ok(victim.posts.length > before, "new conversations reach the replica again");
  },
);

test(
  "a failure before the first token is retried once on another replica, unseen; the failing replica is ejected after N in a row",
  SAFETY,
  async () => {
    const [good] = await replicas(1);
    const dead = `http://127.0.0.1:${await closedPort()}/v1`;
    const metrics = new Metrics();
    // start() is not called: no active checks, so only requests find the dead replica.
    const engine = new OpenAIEngine({
      upstreams: [{ url: dead }, { url: good!.url }],
      registry: metrics.registry,
      health: { failuresToEject: 3 },
    });
    started.push(engine);
    const text = async (n: number): Promise<string> => {
      let out = "";
      for await (const part of engine.stream(request(`conv${n} hi`), new AbortController().signal)) {
        if (part.type === "text-delta") out += part.delta;
      }
      return out;
    };
    for (let n = 0; n < 12; n++) assert.equal(await text(n), "reply from A");
    const registry = await metrics.registry.getMetricsAsJSON();
    const value = (name: string, url: string): number =>
      (registry.find((m) => m.name === name)?.values ?? []).find((v) => v.labels.replica === url)?.value ?? 0;
    assert.equal(value("spark_upstream_ejections_total", dead), 1);
    assert.equal(value("spark_upstream_failures_total", dead), 3, "after ejection no request goes to it");
    assert.equal(value("spark_upstream_retries_total", good!.url), 3);
    assert.equal(value("spark_upstream_healthy", dead), 0);

    // Both replicas failing: one retry, then the client gets the error.
    good!.failWith = 503;
    const posts = good!.posts.length;
    await assert.rejects(text(99), (error) => (error as { code?: string }).code === "upstream_unavailable");
    assert.equal(good!.posts.length - posts, 1, "the first try, then one retry on the (ejected) other");
  },
);

test(
  "a replica that answers 200 with malformed SSE: its requests are retried on another, unseen, and it is ejected",
  SAFETY,
  async () => {
    const [good, broken] = await replicas(2);
    broken!.malformed = true;
    // Checks far apart: only requests judge the replicas here (the broken one lists its models fine).
    const { server } = await sparkServer([good!, broken!], {
      health: { intervalMs: 600_000, failuresToEject: 3 },
    });
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, c) => post(server, { input: `conv${c} hello` })),
    );
    for (const { status, json } of answers) {
      assert.equal(status, 200, JSON.stringify(json));
      assert.equal(json.status, "completed");
    }
    for (let c = 12; c < 40; c++) {
      const { status, json } = await post(server, { input: `conv${c} hello` });
      assert.equal(status, 200, JSON.stringify(json));
    }
    const label = `replica="${broken!.url}"`;
    assert.equal(await metric(server, "spark_upstream_healthy", label), 0);
    assert.equal(await metric(server, "spark_upstream_ejections_total", label), 1);
    assert.ok(broken!.posts.length >= 3 && broken!.posts.length <= 12, `${broken!.posts.length} posts`);
    assert.equal(
      await metric(server, "spark_upstream_retries_total", `replica="${good!.url}"`),
      broken!.posts.length,
    );
  },
);

test(
  "a malformed replica that a check brings back is on probation: its next failure ejects it again",
  SAFETY,
  async () => {
    const [good, broken] = await replicas(2);
    broken!.malformed = true;
    const { server } = await sparkServer([good!, broken!], {
      health: { intervalMs: 50, failuresToEject: 3 },
    });
    const label = `replica="${broken!.url}"`;
    const ejections = () => metric(server, "spark_upstream_ejections_total", label);
    for (let c = 0; (await ejections()) === 0; c++) {
      const { status } = await post(server, { input: `conv${c} hello` });
      assert.equal(status, 200);
    }
    // It lists its models, so a check brings it back; one more failed request ejects it again.
    await eventually(async () => (await metric(server, "spark_upstream_healthy", label)) === 1, "rejoined");
    const posts = broken!.posts.length;
    for (let c = 100; broken!.posts.length === posts; c++) {
      const { status } = await post(server, { input: `conv${c} hello` });
      assert.equal(status, 200);
    }
    assert.equal(broken!.posts.length, posts + 1);
    assert.equal(await ejections(), 2);
  },
);

test(
  "a replica many times slower than the other gets no new conversations, and its conversations move",
  SAFETY,
  async () => {
    const [fast, slow] = await replicas(2);
    slow!.delayMs = 1500;
    // Ties go to the replica holding fewer prefixes, the first listed when equal: A, then B.
    const { server } = await sparkServer([fast!, slow!], {
      health: { intervalMs: 600_000 },
      routing: { random: () => 0 },
    });
    const ids = new Map<string, string>();
    for (const tag of ["conv0", "conv1"]) {
      const { json } = await post(server, { input: `${tag} hello` });
      assert.equal(json.status, "completed");
      ids.set(tag, json.id as string);
    }
    assert.deepEqual(fast!.tags(), ["conv0"]);
    assert.deepEqual(slow!.tags(), ["conv1"]);
    // Both measured: the slow one's conversation moves, and new ones all go to the fast one.
    for (const [tag, id] of ids) {
      const { json } = await post(server, { previous_response_id: id, input: `${tag} more` });
      assert.equal(json.status, "completed");
    }
    for (let c = 2; c < 8; c++) {
      const { json } = await post(server, { input: `conv${c} hello` });
      assert.equal(json.status, "completed");
    }
    assert.deepEqual(slow!.tags(), ["conv1"]);
    assert.equal(fast!.posts.length, 9);
  },
);

test("weights: new conversations and concurrent load split by weight", SAFETY, async () => {
  const [heavy, light] = await replicas(2);
  const engine = new OpenAIEngine({
    upstreams: [
      { url: heavy!.url, weight: 3 },
      { url: light!.url, weight: 1 },
    ],
  });
  started.push(engine);
  const run = async (input: string): Promise<void> => {
    for await (const _part of engine.stream(request(input), new AbortController().signal));
  };
  for (let n = 0; n < 40; n++) await run(`conv${n} hi`);
  assert.ok(Math.abs(heavy!.posts.length - 30) <= 2, `heavy got ${heavy!.posts.length} of 40`);

  // Eight held at once: in flight per unit of weight stays level, 6 and 2.
  heavy!.posts.length = 0;
  light!.posts.length = 0;
  const held = Array.from({ length: 8 }, (_, n) => run(`load${n} HOLD`));
  await eventually(() => heavy!.posts.length + light!.posts.length === 8, "all eight arrive");
  assert.equal(heavy!.posts.length, 6);
  assert.equal(light!.posts.length, 2);
  heavy!.release();
  light!.release();
  await Promise.all(held);
});

test("each replica gets its own key, or the model's; /metrics labels replicas without credentials", async () => {
  const [a, b] = await replicas(2);
  const settings = resolveSettings(
    {
      config: file(
        "replica-keys.json",
        JSON.stringify({
          engine: "openai",
          upstreamApiKeyEnv: "SHARED_KEY",
          upstreams: [{ url: a!.url, apiKeyEnv: "A_KEY", weight: 2 }, b!.url.replace("//", "//user:secret@")],
        }),
      ),
    },
    {},
  );
  process.env.A_KEY = "key-for-a";
  process.env.SHARED_KEY = "key-shared";
  const metrics = new Metrics();
  const models = await createModels(settings, () => {}, metrics.registry);
  const engine = models.engines()[0]!;
  started.push(engine);
  for (let n = 0; n < 6; n++) {
    for await (const _part of engine.stream(request(`conv${n} hi`), new AbortController().signal));
  }
  assert.ok(a!.posts.length > 0 && b!.posts.length > 0);
  for (const post of a!.posts) assert.equal(post.authorization, "Bearer key-for-a");
  for (const post of b!.posts) assert.equal(post.authorization, "Bearer key-shared");
  const text = await metrics.text();
  assert.match(text, new RegExp(`spark_upstream_requests_total\\{replica="${b!.url}"\\} ${b!.posts.length}`));
  assert.doesNotMatch(text, /secret|user:/);
});

test("config: several --upstream flags, a comma-separated SPARK_UPSTREAM, and precedence over the config file", async () => {
  const config = file(
    "replicas-top.json",
    JSON.stringify({ engine: "openai", upstreams: ["http://a:1/v1", { url: "http://b:1/v1", weight: 2 }] }),
  );
  assert.deepEqual(resolveSettings({ config }, {}).upstreams, [
    { url: "http://a:1/v1" },
    { url: "http://b:1/v1", weight: 2 },
  ]);
  const flags = resolveSettings({ config, upstream: ["http://c:1/v1", "http://d:1/v1"] }, {});
  assert.deepEqual(flags.upstreams, [{ url: "http://c:1/v1" }, { url: "http://d:1/v1" }]);
  const single = resolveSettings({ config, upstream: ["http://c:1/v1"] }, {});
  assert.equal(single.upstream, "http://c:1/v1");
  assert.equal(single.upstreams, undefined);
  const env = resolveSettings({ config }, { SPARK_UPSTREAM: "http://e:1/v1, http://f:1/v1" });
  assert.deepEqual(env.upstreams, [{ url: "http://e:1/v1" }, { url: "http://f:1/v1" }]);
});

test("config errors for bad upstreams name the place and the problem", async () => {
  const bad = (name: string, json: Json, message: RegExp): void => {
    const config = file(`bad-upstreams-${name}.json`, JSON.stringify(json));
    assert.throws(
      () => resolveSettings({ config }, {}),
      (error) => error instanceof ConfigError && message.test(error.message),
      name,
    );
  };
  bad("empty", { upstreams: [] }, /upstreams: must list at least one upstream/);
  bad("number", { upstreams: ["http://a/v1", 42] }, /upstreams\[1\]: must be a URL or \{url/);
  bad("scheme", { upstreams: [{ url: "ftp://a/v1" }] }, /upstreams\[0\]\.url: must be an http or https URL/);
  bad("weight", { upstreams: [{ url: "http://a/v1", weight: 0 }] }, /upstreams\[0\]\.weight: .*>0/);
  bad("key", { upstreams: [{ url: "http://a/v1", apiKeyEnv: "not a name" }] }, /upstreams\[0\]\.apiKeyEnv/);
  bad("unknown", { upstreams: [{ url: "http://a/v1", colour: "red" }] }, /upstreams\[0\]: .*colour/i);
  bad("twice", { upstreams: ["http://a/v1", "http://a/v1/"] }, /upstreams: lists the same URL twice/);
  bad("many", { upstreams: Array.from({ length: 33 }, (_, i) => `http://h${i}/v1`) }, /at most 32/);
  bad("both", { upstream: "http://a/v1", upstreams: ["http://b/v1"] }, /either upstream or upstreams/);
  bad(
    "entry",
    { models: { deep: { engine: "openai", upstreams: [{ url: "http://a/v1", weight: -1 }] } } },
    /models\.deep\.upstreams\[0\]\.weight/,
  );

  const unset = resolveSettings(
    {
      config: file(
        "unset-key.json",
        JSON.stringify({
          engine: "openai",
          upstreams: ["http://a/v1", { url: "http://b/v1", apiKeyEnv: "NO_SUCH_KEY_X" }],
        }),
      ),
    },
    {},
  );
  await assert.rejects(
    createModels(unset, () => {}),
    (error) =>
      error instanceof ConfigError &&
      /upstreams\[1\]\.apiKeyEnv names NO_SUCH_KEY_X, which is not set/.test(error.message),
  );

  const { code, stderr } = await runToExit([
    "serve",
    "--engine",
    "openai",
    "--port",
    "0",
    "--upstream",
    "http://127.0.0.1:9/v1",
    "--upstream",
    "not a url",
  ]);
  assert.equal(code, 2, stderr);
  assert.match(stderr, /invalid upstream \(--upstream\) from command line: upstreams\[1\]/);
});

test("router: the longest prefix wins over a shared one; a busy holder yields past the load bound", () => {
  const router = new PrefixRouter([1, 1, 1, 1], { random: () => 0 });
  const system = {
    type: "message" as const,
    role: "system" as const,
    text: "You are a coding agent. ".repeat(20),
  };
  const turn = (tag: string, n: number): EngineRequest => {
    const items: EngineRequest["items"][number][] = [system];
    for (let i = 0; i < n; i++) {
      items.push({ type: "message", role: "user", text: `${tag} question ${i} `.repeat(30) });
      items.push({ type: "message", role: "assistant", text: `${tag} answer ${i} `.repeat(30) });
    }
    items.push({ type: "message", role: "user", text: `${tag} question ${n} `.repeat(30) });
    return { ...request(""), items };
  };
  const homes = new Map<string, number>();
  for (const tag of ["a", "b", "c", "d"]) {
    const route = router.pick(prefixKey(turn(tag, 0)));
    router.acquire(route.replica);
    homes.set(tag, route.replica);
  }
  assert.equal(new Set(homes.values()).size, 4, "new conversations go to the least-loaded replica");
  for (const home of homes.values()) router.release(home);
  for (let n = 1; n < 4; n++) {
    for (const [tag, home] of homes) {
      const route = router.pick(prefixKey(turn(tag, n)));
      assert.deepEqual(route, { replica: home, hit: true }, `${tag} turn ${n}`);
    }
  }
  const home = homes.get("a")!;
  for (let i = 0; i < 8; i++) router.acquire(home);
  assert.equal(router.pick(prefixKey(turn("a", 4))).replica, home, "8 more in flight: within the bound");
  router.acquire(home);
  const moved = router.pick(prefixKey(turn("a", 4)));
  assert.notEqual(moved.replica, home);
  assert.deepEqual(moved, { replica: moved.replica, hit: false, miss: "load" });
});

test("router: latency counts as load: a replica far slower than the fastest gets no new conversations and loses its own; noise and old figures do not count", () => {
  let now = 0;
  const router = new PrefixRouter([1, 1], { random: () => 0, now: () => now });
  const turn = (tag: string, n: number): EngineRequest => {
    const items: EngineRequest["items"][number][] = [];
    for (let i = 0; i < n; i++) {
      items.push({ type: "message", role: "user", text: `${tag} question ${i}` });
      items.push({ type: "message", role: "assistant", text: `${tag} answer ${i}` });
    }
    items.push({ type: "message", role: "user", text: `${tag} question ${n}` });
    return { ...request(""), items };
  };
  assert.equal(router.pick(prefixKey(turn("a", 0))).replica, 0);
  assert.equal(router.pick(prefixKey(turn("b", 0))).replica, 1);
  // A few milliseconds apart, or under twice as slow: equally fast, new conversations alternate.
  router.observe(0, 2);
  router.observe(1, 9);
  assert.equal(router.slowness(1), 1);
  router.observe(0, 150);
  router.observe(1, 250);
  assert.equal(router.slowness(1), 1);
  assert.equal(router.pick(prefixKey(turn("c", 0))).replica, 0);
  assert.equal(router.pick(prefixKey(turn("d", 0))).replica, 1);
  // 40 times slower: every new conversation goes to the fast one, and b leaves the slow one.
  const fresh = new PrefixRouter([1, 1], { random: () => 0, now: () => now });
  assert.equal(fresh.pick(prefixKey(turn("a", 0))).replica, 0);
  assert.equal(fresh.pick(prefixKey(turn("b", 0))).replica, 1);
  fresh.observe(0, 150);
  fresh.observe(1, 6000);
  assert.equal(fresh.slowness(1), 40);
  for (const tag of ["c", "d", "e", "f"]) assert.equal(fresh.pick(prefixKey(turn(tag, 0))).replica, 0);
  assert.deepEqual(fresh.pick(prefixKey(turn("b", 1))), { replica: 0, hit: false, miss: "load" });
  assert.deepEqual(fresh.pick(prefixKey(turn("a", 1))), { replica: 0, hit: true });
  // A figure not renewed for a minute is forgotten: the slow replica is tried again.
  now += LATENCY_TTL_MS + 1;
  assert.equal(fresh.slowness(1), 1);
  // Five times slower: new conversations avoid it, but its conversations stay (moving costs a prefill).
  const mild = new PrefixRouter([1, 1], { random: () => 0, now: () => now });
  mild.pick(prefixKey(turn("a", 0)));
  assert.equal(mild.pick(prefixKey(turn("b", 0))).replica, 1);
  mild.observe(0, 100);
  mild.observe(1, 500);
  assert.equal(mild.pick(prefixKey(turn("c", 0))).replica, 0);
  assert.deepEqual(mild.pick(prefixKey(turn("b", 1))), { replica: 1, hit: true });
});

function request(text: string): EngineRequest {
  return {
    model: "coder",
    items: [{ type: "message", role: "user", text }],
    tools: [],
    toolChoice: "auto",
    parallelToolCalls: true,
  };
}
