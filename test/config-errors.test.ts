/**
 * Configuration as users write it, through the real `spark serve` command line: every bad config
 * file or key file exits 2 with one stderr message that names the file, the key path and what is
 * wrong; the loopback-only rule for servers without keys; and a `models` config with two engines,
 * where `model: "auto"` routes by the prompt.
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { hashKey } from "../src/core/keys.js";
import { file, firstLine, runToExit, SAFETY_TIMEOUT_MS, spawnCli, startServer, stop } from "./helpers/cli.js";

const SPARK_SCRIPT = file(
  "config-spark.jsonl",
  JSON.stringify({ output: [{ type: "message", text: "From the spark script." }] }) + "\n",
);
const DEEP_SCRIPT = file(
  "config-deep.jsonl",
  JSON.stringify({ output: [{ type: "message", text: "From the deep script." }] }) + "\n",
);
const SECURITY_PROMPT = "fix the SQL injection in the login handler";

function newKey(): { key: string; hash: string } {
  const key = `sk-spark-test-${randomBytes(16).toString("hex")}`;
  return { key, hash: hashKey(key) };
}
const ALICE = newKey();
const valid = { id: "alice", hash: ALICE.hash };

let files = 0;
function json(value: unknown): string {
  return file(`config-errors-${++files}.json`, JSON.stringify(value, null, 2));
}

/** Runs `spark serve` expecting exit code 2 before it listens; returns stderr. */
async function expectUsageError(args: readonly string[]): Promise<string> {
  const { code, stdout, stderr } = await runToExit(["serve", "--port", "0", ...args]);
  assert.equal(code, 2, `exit code; stderr:\n${stderr}`);
  assert.doesNotMatch(stdout, /listening/);
  return stderr;
}

function assertMentions(stderr: string, parts: readonly (string | RegExp)[]): void {
  for (const part of parts) {
    if (typeof part === "string")
      assert.ok(stderr.includes(part), `stderr should mention ${part}:\n${stderr}`);
    else assert.match(stderr, part);
  }
}

interface ConfigCase {
  name: string;
  config: Record<string, unknown>;
  /** Besides the config file's path: the key path and what is wrong. */
  mentions: (string | RegExp)[];
}

const CONFIG_CASES: ConfigCase[] = [
  {
    name: "models.deep.engine not one of llama/openai/script",
    config: { models: { spark: { engine: "script", script: SPARK_SCRIPT }, deep: { engine: "gpt-9" } } },
    mentions: ["models.deep.engine", /llama/, /openai/, /script/],
  },
  {
    name: "models.deep with an unknown key",
    config: { models: { deep: { engine: "script", script: DEEP_SCRIPT, colour: "blue" } } },
    mentions: ["models.deep", /colour/, /unrecognized|unknown/i],
  },
  {
    name: "models.auto (the router's reserved alias)",
    config: { models: { auto: { engine: "script", script: SPARK_SCRIPT } } },
    mentions: ["models.auto", /reserved|not 'auto'/],
  },
  {
    name: "models.spark with the openai engine and no upstream",
    config: { models: { spark: { engine: "openai" } } },
    mentions: ["models.spark", /upstream/],
  },
  {
    name: "keys[0].hash malformed",
    config: { engine: "script", script: SPARK_SCRIPT, keys: [{ id: "alice", hash: "md5:1234" }] },
    mentions: ["keys[0].hash", /sha256/],
  },
  {
    name: "limits.spark.requestsPerMinute negative",
    config: { engine: "script", script: SPARK_SCRIPT, limits: { spark: { requestsPerMinute: -5 } } },
    mentions: ["limits.spark.requestsPerMinute", /too small|>\s*0|positive/i],
  },
  {
    name: "limits.spark.requestsPerMinute not an integer",
    config: { engine: "script", script: SPARK_SCRIPT, limits: { spark: { requestsPerMinute: 1.5 } } },
    mentions: ["limits.spark.requestsPerMinute", /int/i],
  },
  {
    name: "variants.check empty",
    config: { engine: "script", script: SPARK_SCRIPT, variants: { check: " " } },
    mentions: ["variants.check", /must be a command/],
  },
  {
    name: "variants.concurrency over 10",
    config: { engine: "script", script: SPARK_SCRIPT, variants: { concurrency: 11 } },
    mentions: ["variants.concurrency", /10/],
  },
];

for (const { name, config, mentions } of CONFIG_CASES) {
  test(`config file: ${name} exits 2 naming the file, the key and the problem`, async () => {
    const path = json(config);
    const stderr = await expectUsageError(["--config", path]);
    assertMentions(stderr, [path, ...mentions]);
  });
}

test("a key file that is not JSON exits 2 naming the key file", async () => {
  const keyFile = file("config-errors-not-json.keys", '{"keys": [');
  const stderr = await expectUsageError([
    "--engine",
    "script",
    "--script",
    SPARK_SCRIPT,
    "--key-file",
    keyFile,
  ]);
  assertMentions(stderr, [keyFile, /key file/, /not valid JSON/]);
});

test("a key file with a bad entry exits 2 naming the key file, the entry's key and the problem", async () => {
  const keyFile = json({ keys: [valid, { id: "bob smith", hash: newKey().hash }] });
  const stderr = await expectUsageError([
    "--engine",
    "script",
    "--script",
    SPARK_SCRIPT,
    "--key-file",
    keyFile,
  ]);
  assertMentions(stderr, [keyFile, /key file/, "keys[1].id", /letters, digits/]);
});

test("the same key id in the config and the key file exits 2 naming the id and both files", async () => {
  const config = json({ engine: "script", script: SPARK_SCRIPT, keys: [valid] });
  const keyFile = json({ keys: [{ id: "alice", hash: newKey().hash }] });
  const stderr = await expectUsageError(["--config", config, "--key-file", keyFile]);
  assertMentions(stderr, [/"alice"/, /twice|duplicate/i, config, keyFile]);
});

test("--host 0.0.0.0 without keys exits 2 and says to create keys or pass --allow-unauthenticated", async () => {
  const stderr = await expectUsageError([
    "--engine",
    "script",
    "--script",
    SPARK_SCRIPT,
    "--host",
    "0.0.0.0",
  ]);
  assertMentions(stderr, ["0.0.0.0", /spark keys create/, /--key-file/, /--allow-unauthenticated/]);
});

/** Starts a server bound to 0.0.0.0 and returns a loopback URL to reach it. */
async function startOnAllInterfaces(
  args: readonly string[],
): Promise<ReturnType<typeof spawnCli> & { url: string }> {
  const cli = spawnCli([
    "serve",
    "--engine",
    "script",
    "--script",
    SPARK_SCRIPT,
    "--port",
    "0",
    "--host",
    "0.0.0.0",
    ...args,
  ]);
  const line = await firstLine(cli);
  const match = /^spark listening on http:\/\/0\.0\.0\.0:(\d+)$/.exec(line);
  assert.ok(match, `unexpected first stdout line: ${JSON.stringify(line)}`);
  assert.ok(Number(match[1]) > 0);
  return { ...cli, url: `http://127.0.0.1:${match[1]}` };
}

async function post(url: string, body: object, key?: string): Promise<Response> {
  return fetch(`${url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(key ? { authorization: `Bearer ${key}` } : {}) },
    body: JSON.stringify(body),
    signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
  });
}

interface Answer {
  model: string;
  metadata: Record<string, string>;
  output: { type: string; content?: { text: string }[] }[];
}

function textOf(answer: Answer): string {
  return answer.output
    .flatMap((item) => item.content ?? [])
    .map((part) => part.text)
    .join("");
}

test("--host 0.0.0.0 --allow-unauthenticated starts and warns that anyone can use it", async () => {
  const server = await startOnAllInterfaces(["--allow-unauthenticated"]);
  const response = await post(server.url, { input: "hi" });
  assert.equal(response.status, 200);
  assert.equal(textOf((await response.json()) as Answer), "From the spark script.");
  assert.equal(await stop(server), 0, server.stderr());
  assert.match(
    server.stderr(),
    /no API keys configured: anyone who can reach 0\.0\.0\.0 can use this server/,
  );
});

test("--host 0.0.0.0 with keys starts and requires a key", async () => {
  const config = json({ keys: [valid] });
  const server = await startOnAllInterfaces(["--config", config]);
  assert.equal((await post(server.url, { input: "hi" })).status, 401);
  assert.equal((await post(server.url, { input: "hi" }, newKey().key)).status, 401);
  const response = await post(server.url, { input: "hi" }, ALICE.key);
  assert.equal(response.status, 200);
  assert.equal(textOf((await response.json()) as Answer), "From the spark script.");
  assert.equal(await stop(server), 0, server.stderr());
  assert.match(server.stderr(), /1 API key\(s\) configured/);
});

test("a models config with two script engines serves each alias from its own script; auto routes", async () => {
  const config = json({
    port: 0,
    models: {
      spark: { engine: "script", script: SPARK_SCRIPT },
      deep: { engine: "script", script: DEEP_SCRIPT },
    },
  });
  const server = await startServer(["serve", "--config", config]);

  const models = (await (await fetch(`${server.url}/v1/models`)).json()) as {
    object: string;
    data: { id: string; object: string }[];
  };
  assert.equal(models.object, "list");
  const ids = models.data.map((m) => m.id);
  for (const id of ["spark", "deep", "auto"])
    assert.ok(ids.includes(id), `/v1/models lists ${ids.join(", ")}`);

  for (const [model, text] of [
    ["spark", "From the spark script."],
    ["deep", "From the deep script."],
  ] as const) {
    const response = await post(server.url, { model, input: "hello" });
    assert.equal(response.status, 200);
    const answer = (await response.json()) as Answer;
    assert.equal(answer.model, model);
    assert.equal(textOf(answer), text);
  }

  // auto + a security-sensitive task: the deep tier answers, and says so in a header and the metadata.
  const routed = await post(server.url, { model: "auto", input: SECURITY_PROMPT });
  assert.equal(routed.status, 200);
  assert.equal(routed.headers.get("x-spark-route"), "deep");
  assert.equal(routed.headers.get("x-spark-route-rule"), "security_sensitive");
  const routedAnswer = (await routed.json()) as Answer;
  assert.equal(routedAnswer.model, "deep");
  assert.equal(routedAnswer.metadata.spark_route, "deep");
  assert.equal(routedAnswer.metadata.spark_route_rule, "security_sensitive");
  assert.equal(textOf(routedAnswer), "From the deep script.");

  // auto + a plain question stays on spark (the router can choose either way).
  const question = await post(server.url, { model: "auto", input: "what does this function return?" });
  assert.equal(question.headers.get("x-spark-route"), "spark");
  assert.equal(textOf((await question.json()) as Answer), "From the spark script.");

  // An explicit model is never routed: no route header, no route metadata, spark's own script.
  const pinned = await post(server.url, { model: "spark", input: SECURITY_PROMPT });
  assert.equal(pinned.status, 200);
  assert.equal(pinned.headers.get("x-spark-route"), null);
  const pinnedAnswer = (await pinned.json()) as Answer;
  assert.equal(pinnedAnswer.model, "spark");
  assert.equal(pinnedAnswer.metadata.spark_route, undefined);
  assert.equal(textOf(pinnedAnswer), "From the spark script.");

  assert.equal(await stop(server), 0, server.stderr());
});

test("an empty --allowed-host or SPARK_ALLOWED_ORIGINS entry exits 2 naming the flag or the variable", async () => {
  const flag = await expectUsageError(["--engine", "script", "--script", SPARK_SCRIPT, "--allowed-host", ""]);
  assertMentions(flag, ["--allowed-host", "command line", /must not be empty/]);
  const { code, stderr } = await runToExit(
    ["serve", "--port", "0", "--engine", "script", "--script", SPARK_SCRIPT],
    { SPARK_ALLOWED_ORIGINS: "https://a.example,,https://b.example" },
  );
  assert.equal(code, 2, stderr);
  assertMentions(stderr, ["SPARK_ALLOWED_ORIGINS", "--allowed-origin", /must not be empty/]);
});
