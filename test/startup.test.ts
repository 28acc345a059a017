/**
 * Start-up without blocking on the network (figure 34): a client sends its first request as soon as
 * its connection is open, never after the server's model list; and the settings' schema is needed
 * only when there is something to validate.
 */
import assert from "node:assert/strict";
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { after, before, describe, test } from "node:test";
import { WebSocket, WebSocketServer } from "ws";
import { loadSettings } from "../src/client/client-settings.js";
import { resolveSettings } from "../src/settings/config.js";
import { parseScript, ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { chmodSync, readFileSync } from "node:fs";
import { file, firstLine, freshDir, spawnCli } from "./helpers/cli.js";
import { testModelPath } from "./helpers/model.js";

test("without a config file, SPARK_* settings or serve flags, the settings are what the schema makes of nothing", async () => {
  assert.deepEqual(await loadSettings({}, {}), resolveSettings({}, {}));
  // Anything given goes through the schema, with its errors.
  await assert.rejects(loadSettings({}, { SPARK_THREADS: "0" }), /threads/);
  await assert.rejects(loadSettings({ port: 70000 }, {}), /port/);
});

/**
 * In front of a Spark server: WebSocket upgrades pass through (each `response.create` noted with
 * what had happened to `GET /v1/models` by then), `GET /v1/models` is held unanswered until the
 * test ends.
 */
describe("spark exec --server", () => {
  let spark: SparkServer;
  let relay: ReturnType<typeof createServer>;
  let relayUrl: string;
  const held: ServerResponse[] = [];
  const modelsRequests: { ended: boolean }[] = [];
  const frames: { modelsRequested: number; modelsEnded: number }[] = [];

  before(async () => {
    const lines = parseScript(JSON.stringify({ output: [{ type: "message", text: "the answer" }] }));
    spark = new SparkServer({ engine: new ScriptEngine({ lines }), port: 0 });
    const target = await spark.listen();
    relay = createServer((request: IncomingMessage, response: ServerResponse) => {
      if (request.url?.startsWith("/v1/models")) {
        const entry = { ended: false };
        modelsRequests.push(entry);
        held.push(response);
        response.on("close", () => (entry.ended = true));
        return;
      }
      const forward = httpRequest(`${target}${request.url}`, {
        method: request.method,
        headers: request.headers,
      });
      forward.on("response", (answer) => {
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(response);
      });
      request.pipe(forward);
    });
    const wss = new WebSocketServer({ noServer: true });
    relay.on("upgrade", (request, socket, head) => {
      wss.handleUpgrade(request, socket as Socket, head, (client) => {
        const upstream = new WebSocket(`${target.replace(/^http/, "ws")}/v1/responses`);
        const backlog: string[] = [];
        upstream.on("open", () => backlog.splice(0).forEach((frame) => upstream.send(frame)));
        client.on("message", (data) => {
          const text = data.toString();
          if (text.includes('"response.create"'))
            frames.push({
              modelsRequested: modelsRequests.length,
              modelsEnded: modelsRequests.filter((entry) => entry.ended).length,
            });
          if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
          else backlog.push(text);
        });
        upstream.on("message", (data) => client.send(data.toString()));
        client.on("close", () => upstream.close());
        upstream.on("close", () => client.close());
      });
    });
    await new Promise<void>((resolve) => relay.listen(0, "127.0.0.1", resolve));
    relayUrl = `http://127.0.0.1:${(relay.address() as AddressInfo).port}`;
  });
  after(async () => {
    for (const response of held) response.destroy();
    relay.closeAllConnections();
    await new Promise((resolve) => relay.close(resolve));
    await spark.close();
  });

  test("sends its request before the server's model list answers, and exits while that list is still unanswered", async () => {
    const workspace = freshDir("ws-");
    const cli = spawnCli(["exec", "--server", relayUrl, "-C", workspace, "hello"]);
    assert.equal(await cli.exited, 0, cli.stderr());
    assert.equal(cli.stdout().trim(), "the answer");
    assert.equal(frames.length, 1);
    // Asked for the model list (if at all) only after the request; the exit did not wait for it.
    assert.deepEqual(frames[0], { modelsRequested: 0, modelsEnded: 0 });
  });
});

test("spark app serves its page while its in-process model server still loads (a llama-server that never gets ready)", async () => {
  // A llama-server that says where it listens and never answers there: the engine never gets ready.
  const stuck = file(
    "stuck-llama-server.sh",
    "#!/bin/sh\necho 'main: listening on http://127.0.0.1:9' >&2\nexec sleep 600\n",
  );
  chmodSync(stuck, 0o755);
  const workspace = freshDir("ws-");
  const app = spawnCli(["app", workspace, "--port", "0"], {
    SPARK_ENGINE: "llama",
    SPARK_LLAMA_SERVER: stuck,
    SPARK_THREADS: "1",
    SPARK_MODEL: testModelPath() ?? file("model.gguf", "not a model"),
  });
  const line = await firstLine(app);
  const url = /http:\/\/[^\s/]+/.exec(line)?.[0];
  assert.ok(url, line);
  const page = await fetch(url);
  assert.equal(page.status, 200);
  assert.match(await page.text(), /<!doctype html>/i);
  app.child.kill("SIGTERM");
  assert.equal(await app.exited, 0);
});

/**
 * Records every module file the process loads (an ESM loader hook, through NODE_OPTIONS) into
 * the file the environment names: which of the bundle's chunks a start path evaluated.
 */
function loadRecorder(): { env: Record<string, string>; loaded(): string[] } {
  const log = file("loaded-modules.txt", "");
  const source =
    'import { appendFileSync } from "node:fs";' +
    "export async function load(url, context, next) {" +
    '  if (url.startsWith("file:")) appendFileSync(process.env.LOADED_MODULES_FILE, url + "\\n");' +
    "  return next(url, context);" +
    "}";
  const hook = file(
    "record-loads.mjs",
    `import { register } from "node:module";\nregister(${JSON.stringify(`data:text/javascript,${encodeURIComponent(source)}`)});\n`,
  );
  return {
    env: { NODE_OPTIONS: `--import ${hook}`, LOADED_MODULES_FILE: log },
    loaded: () => readFileSync(log, "utf8").split("\n").filter(Boolean),
  };
}

const holdsZod = (url: string): boolean => readFileSync(new URL(url), "utf8").includes("node_modules/zod/");

test("spark app serves its page and greets a browser without loading zod; the browser's first message is handled once it is", async () => {
  const recorder = loadRecorder();
  const workspace = freshDir("ws-");
  const app = spawnCli(
    ["app", workspace, "--port", "0", "--quiet", "--server", "http://127.0.0.1:9"],
    // As on a fresh machine: no SPARK_* setting but the home (any other has the settings
    // validated, which needs zod; test/helpers/cli.ts sets SPARK_DATA_DIR otherwise).
    { ...recorder.env, SPARK_DATA_DIR: undefined },
  );
  try {
    const line = await firstLine(app);
    const url = new URL(/http:\/\/[^\s]+/.exec(line)?.[0] ?? "");
    assert.equal((await fetch(url)).status, 200);
    const ws = new WebSocket(`ws://${url.host}/app/ws`, { headers: { origin: url.origin } });
    const messages: { type: string; code?: string }[] = [];
    const next = (type: string): Promise<{ type: string; code?: string }> =>
      new Promise((resolve) => {
        const found = messages.find((m) => m.type === type);
        if (found) return resolve(found);
        const onMessage = (): void => {
          const match = messages.find((m) => m.type === type);
          if (match) {
            ws.off("message", onMessage);
            resolve(match);
          }
        };
        ws.on("message", onMessage);
      });
    ws.on("message", (data) => messages.push(JSON.parse(String(data)) as { type: string }));
    await next("hello");
    const atHello = recorder.loaded();
    assert.ok(
      atHello.some((loaded) => /app-server/.test(loaded)),
      atHello.join("\n"),
    );
    assert.deepEqual(atHello.filter(holdsZod), [], "zod is not loaded before the greeting");
    // Sent at once: it waits for the schemas, then is refused by them.
    ws.send(JSON.stringify({ type: "task.open" }));
    const refused = await next("error");
    assert.equal(refused.code, "invalid_message");
    assert.ok(recorder.loaded().some(holdsZod), "the schemas came with zod");
    ws.close();
  } finally {
    app.child.kill("SIGTERM");
    await app.exited;
  }
});
