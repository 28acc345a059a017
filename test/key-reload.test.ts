/**
 * Keys change under running servers: real `spark serve` processes, real `spark keys` commands, a
 * real Redis. An instance re-reads its key file when it changes (keys added work, keys removed get
 * 401, a bad file keeps the last good keys and the log says why); a revoked key's running response
 * finishes while its connection's next turn gets 401. With Redis, a revocation reaches every
 * instance, each with its own copy of the key file, within moments (measured), and an instance
 * started later refuses the key too; a key removed from one instance's file is revoked for all.
 */
import assert from "node:assert/strict";
import { copyFileSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { Redis } from "ioredis";
import { dir, file, runToExit } from "./helpers/cli.js";
import { createKeys, killAll, respond, serve, until, type Instance } from "./helpers/fleet.js";
import { REDIS_MISSING, TestRedis } from "./helpers/redis.js";
import { terminalOf, WsClient } from "./helpers/ws-client.js";

const SCRIPT = file(
  "key-reload.jsonl",
  JSON.stringify({ output: [{ type: "message", text: "Ok." }] }) + "\n",
);
const CONFIG = file(
  "key-reload.json",
  JSON.stringify({
    models: {
      spark: { engine: "script", script: SCRIPT },
      slow: {
        engine: "script",
        script: file(
          "key-reload-slow.jsonl",
          JSON.stringify({ output: [{ type: "message", text: "word ".repeat(200) }] }) + "\n",
        ),
        rate: 40,
        tier: "spark",
      },
    },
  }),
);

const instances: Instance[] = [];
let redis: TestRedis | undefined;

before(async () => {
  if (!REDIS_MISSING) redis = await TestRedis.start();
});
after(async () => {
  killAll(instances);
  await redis?.destroy();
});

async function start(keyFile: string, extra: string[] = []): Promise<Instance> {
  const instance = await serve(SCRIPT, [
    "--config",
    CONFIG,
    "--key-file",
    keyFile,
    "--store",
    "memory",
    ...extra,
  ]);
  instances.push(instance);
  return instance;
}

/** Replaces `path` atomically, as `spark keys` and editors do. */
function replaceFile(path: string, text: string): void {
  writeFileSync(`${path}.new`, text);
  renameSync(`${path}.new`, path);
}

test("the key file is watched: added keys work, removed keys get 401, a bad file keeps the last good keys", async () => {
  const { file: keyFile, keys } = await createKeys({ alice: {} });
  const server = await start(keyFile);
  assert.equal((await respond(server.url, keys.alice!)).status, 200);

  const { keys: more } = await createKeys({ bob: {} }, keyFile);
  await until(async () => (await respond(server.url, more.bob!)).status === 200, "bob's key to be loaded");
  assert.match(server.stderr(), /key file .* reloaded: 2 key\(s\), added "bob"/);

  const good = readFileSync(keyFile, "utf8");
  replaceFile(keyFile, "{ not json");
  await until(
    () => /not valid JSON.*keeping the last good keys \(2\)/.test(server.stderr()),
    "the bad file to be reported",
  );
  replaceFile(keyFile, JSON.stringify({ keys: [{ id: "alice", hash: "sha256:nothex" }] }));
  await until(
    () => /keys\[0\]\.hash: .*keeping the last good keys \(2\)/.test(server.stderr()),
    "the bad hash to be reported",
  );
  assert.equal((await respond(server.url, keys.alice!)).status, 200, "the last good keys still hold");
  assert.equal((await respond(server.url, more.bob!)).status, 200);

  replaceFile(keyFile, good);
  const removed = await runToExit(["keys", "revoke", "--name", "bob", "--key-file", keyFile]);
  assert.equal(removed.code, 0, removed.stderr);
  const refused = await until(async () => {
    const answer = await respond(server.url, more.bob!);
    return answer.status === 401 ? answer : undefined;
  }, "bob's key to be refused");
  assert.equal(refused.body.error?.code, "invalid_api_key");
  assert.equal((await respond(server.url, keys.alice!)).status, 200);
});

test("a key revoked while its response runs: the response finishes, the connection's next turn gets 401", async () => {
  const { file: keyFile, keys } = await createKeys({ carol: {} });
  const server = await start(keyFile);
  const socket = await WsClient.connect(server.url, { headers: { authorization: `Bearer ${keys.carol}` } });
  socket.send({ type: "response.create", model: "slow", input: "take your time" });
  const created = await socket.waitForType("response.created");
  const id = (created.response as { id: string }).id;
  await socket.waitForType("response.output_text.delta");

  replaceFile(keyFile, JSON.stringify({ keys: [] }));
  await until(() => /removed "carol"/.test(server.stderr()), "the key file to be reloaded");
  await socket.waitFor(
    (event) => event.type === "response.completed" && (event.response as { id: string }).id === id,
  );
  assert.equal(terminalOf(socket.responseEvents(id)).response.status, "completed");

  const from = socket.events.length;
  socket.send({ type: "response.create", model: "spark", input: "and now?" });
  const error = await socket.waitForType("error", from);
  assert.equal(error.status, 401);
  assert.equal((error.error as { code: string }).code, "invalid_api_key");
  assert.equal((await respond(server.url, keys.carol!)).status, 401);
  // An empty key file does not open the server to anyone.
  const anonymous = await fetch(`${server.url}/v1/models`);
  assert.equal(anonymous.status, 401);
  await socket.close();
});

test(
  "with Redis a revocation reaches every instance (each with its own key file) and instances started later",
  { skip: REDIS_MISSING ?? false },
  async () => {
    const url = redis!.url;
    const { file: source, keys } = await createKeys({ dave: {}, erin: {}, frank: {} });
    const copies = [1, 2, 3, 4].map((n) => {
      const copy = join(dir, `key-copy-${n}-${Date.now()}.json`);
      copyFileSync(source, copy);
      return copy;
    });
    const fleet = await Promise.all(copies.slice(0, 3).map((copy) => start(copy, ["--redis", url])));
    for (const member of fleet) assert.equal((await respond(member.url, keys.dave!)).status, 200);

    // `spark keys revoke --redis` on a machine with a copy of the file: every instance refuses dave.
    // Timed from the publication (a subscriber of the test's own) to each instance's log line.
    const watcher = new Redis(url);
    await watcher.subscribe("spark:revoked-keys");
    const publishedAt = new Promise<number>((resolve) =>
      watcher.once("message", () => resolve(performance.now())),
    );
    const seenAt = fleet.map(
      (member) =>
        new Promise<number>((resolve) => {
          const onData = (chunk: Buffer | string): void => {
            if (!/API key "dave" was revoked \(through Redis\)/.test(String(chunk))) return;
            member.child.stderr!.off("data", onData);
            resolve(performance.now());
          };
          member.child.stderr!.on("data", onData);
        }),
    );
    const revoked = await runToExit([
      "keys",
      "revoke",
      "--name",
      "dave",
      "--key-file",
      copies[0]!,
      "--redis",
      url,
    ]);
    assert.equal(revoked.code, 0, revoked.stderr);
    assert.match(revoked.stderr, /revoked in Redis/);
    const published = await publishedAt;
    const latencies = (await Promise.all(seenAt)).map((at) => Math.round(at - published));
    watcher.disconnect();
    console.log(
      `# revocation logged by the three instances ${latencies.join(", ")} ms after it was published`,
    );
    for (const member of fleet) {
      const answer = await respond(member.url, keys.dave!);
      assert.equal(answer.status, 401);
      assert.match(answer.body.error!.message, /has been revoked/);
      assert.equal((await respond(member.url, keys.erin!)).status, 200);
    }

    // A key removed from one instance's file: that instance revokes it for all.
    replaceFile(
      copies[1]!,
      JSON.stringify({
        keys: JSON.parse(readFileSync(copies[1]!, "utf8")).keys.filter(
          (k: { id: string }) => k.id !== "erin",
        ),
      }),
    );
    for (const member of fleet)
      await until(async () => (await respond(member.url, keys.erin!)).status === 401, "erin's revocation");
    assert.equal((await respond(fleet[0]!.url, keys.frank!)).status, 200);

    // Started later, with a copy that still lists both: refused from the first request.
    const late = await start(copies[3]!, ["--redis", url]);
    assert.equal((await respond(late.url, keys.dave!)).status, 401);
    assert.equal((await respond(late.url, keys.erin!)).status, 401);
    assert.equal((await respond(late.url, keys.frank!)).status, 200);
  },
);
