/**
 * The `spark` command line as users run it: a real child process (the CLI bundled from the current
 * sources, test/helpers/cli-entry.ts), real ports, real signals.
 */
import assert from "node:assert/strict";
import { request as httpRequest } from "node:http";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { textOf, WsClient } from "./helpers/ws-client.js";
import {
  assertHealthy,
  dir,
  file,
  LISTENING,
  readSse,
  REPO_ROOT,
  runToExit,
  SAFETY_TIMEOUT_MS,
  startScriptServe,
  startServer,
  stop,
} from "./helpers/cli.js";

const SHORT_SCRIPT = file(
  "short.jsonl",
  JSON.stringify({ output: [{ type: "message", text: "Hello from the CLI test." }] }) + "\n",
);
// 20,000 pieces at 200 tokens/s: the stream cannot end on its own while the test runs.
const LONG_SCRIPT = file(
  "long.jsonl",
  JSON.stringify({ output: [{ type: "message", text: "word ".repeat(20_000) }] }) + "\n",
);

test("serve prints its URL as the first stdout line, answers /healthz, and exits 0 on SIGTERM", async () => {
  const cli = await startScriptServe(SHORT_SCRIPT, ["--rate", "200"]);
  await assertHealthy(cli.url);
  const response = await fetch(`${cli.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ input: "hi" }),
  });
  assert.equal(response.status, 200);
  const body = (await response.json()) as { output: { content: { text: string }[] }[] };
  assert.equal(body.output[0]?.content[0]?.text, "Hello from the CLI test.");
  assert.equal(await stop(cli), 0);
  assert.match(cli.stdout().split("\n")[0] ?? "", LISTENING);
});

test("serve whose stderr reader is gone (spark serve 2>&1 | head) still exits 0 on SIGTERM", async () => {
  const cli = await startServer(["serve", "--engine", "script", "--script", SHORT_SCRIPT, "--port", "0"]);
  await assertHealthy(cli.url);
  // The reader goes away: the shutdown line then fails with EPIPE. Before the fix the server logged
  // that failure to the same stderr, failed again, and spun a core for ever instead of exiting.
  cli.child.stderr!.destroy();
  assert.equal(await stop(cli), 0);
});

test("serve --help mentions every option", async () => {
  const { code, stdout } = await runToExit(["serve", "--help"]);
  assert.equal(code, 0);
  for (const option of [
    "--host",
    "--port",
    "--engine",
    "--model",
    "--upstream",
    "--upstream-api-key-env",
    "--script",
    "--rate",
    "--config",
    "--no-websocket",
    "--websocket-max-minutes",
  ]) {
    assert.match(stdout, new RegExp(`${option}\\b(?!-)`), `help should mention ${option}`);
  }
});

test("spark --version prints the package's version and exits 0", async () => {
  const { version } = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as {
    version: string;
  };
  for (const flag of ["--version", "-V"]) {
    const { code, stdout } = await runToExit([flag]);
    assert.equal(code, 0);
    assert.equal(stdout, `spark ${version}\n`);
  }
});

test("one vocabulary in --help: --tier takes a tier, --model a GGUF file, in spark and spark serve", async () => {
  const tui = await runToExit(["--help"]);
  assert.equal(tui.code, 0);
  assert.match(tui.stdout, /--tier <tier>/);
  assert.doesNotMatch(tui.stdout, /--tier <model>/, "the tier is not called a model");
  assert.match(tui.stdout, /--model <file\.gguf>/);
  assert.match(tui.stdout, /\/tier\b/);
  const serve = await runToExit(["serve", "--help"]);
  assert.match(serve.stdout, /--model <file\.gguf>/);
});

test("SIGTERM drains a stream: it goes on, and a second SIGTERM ends it with exactly one terminal event; exit 0", async () => {
  const cli = await startScriptServe(LONG_SCRIPT, ["--rate", "200"]);
  const response = await fetch(`${cli.url}/v1/responses`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ input: "write a lot", stream: true }),
    signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS),
  });
  assert.equal(response.status, 200);

  // The first SIGTERM drains: the stream keeps going (50 more deltas prove it); the second ends it.
  let signalled = false;
  let deltasAfterSignal = 0;
  const { events, trailing } = await readSse(response, (event) => {
    if (event.type !== "response.output_text.delta") return;
    if (!signalled) {
      signalled = true;
      cli.child.kill("SIGTERM");
    } else if (++deltasAfterSignal === 50) cli.child.kill("SIGTERM");
  });
  assert.ok(signalled, "the stream must have produced a text delta");
  assert.ok(deltasAfterSignal >= 50, "the stream went on after the first SIGTERM");
  assert.equal(trailing.trim(), "", "the stream must end on an event boundary");

  const terminalTypes = new Set(["response.completed", "response.incomplete", "response.failed"]);
  const terminals = events.filter((e) => terminalTypes.has(e.type));
  assert.equal(terminals.length, 1, `terminal events: ${terminals.map((e) => e.type).join(", ")}`);
  assert.equal(events.at(-1), terminals[0], "the terminal event is the last one");
  const terminal = terminals[0]!;
  assert.equal(terminal.type, "response.incomplete");
  const final = terminal.data.response as { status: string; incomplete_details: { reason: string } };
  assert.equal(final.status, "incomplete");
  assert.equal(final.incomplete_details.reason, "server_shutdown");
  const sequence = events.map((e) => e.data.sequence_number);
  assert.deepEqual(
    sequence,
    sequence.map((_, i) => i),
    "sequence numbers run 0, 1, 2, ...",
  );

  assert.equal(await cli.exited, 0, `stderr:\n${cli.stderr()}`);
  assert.match(cli.stderr(), /SIGTERM: draining/);
  assert.match(cli.stderr(), /SIGTERM: ending in-flight responses/);
});

test("WebSocket mode is on by default; --no-websocket and SPARK_WEBSOCKET=0 turn it off (426)", async () => {
  const base = ["serve", "--engine", "script", "--script", SHORT_SCRIPT, "--port", "0"];
  const on = await startServer(base);
  const client = await WsClient.connect(on.url);
  const events = await client.turn({ input: "hi" });
  assert.equal(textOf(events), "Hello from the CLI test.");
  await client.close();
  assert.equal(await stop(on), 0);

  for (const [args, env] of [
    [[...base, "--no-websocket"], {}],
    [base, { SPARK_WEBSOCKET: "0" }],
  ] as const) {
    const off = await startServer(args, env);
    await assert.rejects(WsClient.connect(off.url), /upgrade refused with 426/);
    assert.match(off.stderr(), /WebSocket mode off/);
    assert.equal(await stop(off), 0);
  }
});

test("SIGINT with no requests exits 0", async () => {
  const cli = await startServer(["serve", "--engine", "script", "--script", SHORT_SCRIPT, "--port", "0"]);
  assert.equal(await stop(cli, "SIGINT"), 0, `stderr:\n${cli.stderr()}`);
});

test("SPARK_* environment variables configure the server without flags", async () => {
  const cli = await startServer(["serve"], {
    SPARK_PORT: "0",
    SPARK_ENGINE: "script",
    SPARK_SCRIPT: SHORT_SCRIPT,
  });
  await assertHealthy(cli.url);
  const health = (await (await fetch(`${cli.url}/healthz`)).json()) as { engine: string };
  assert.equal(health.engine, "script");
  assert.equal(await stop(cli), 0);
});

test("a --config file configures the server", async () => {
  const config = file("good.json", JSON.stringify({ engine: "script", script: SHORT_SCRIPT, port: 0 }));
  const cli = await startServer(["serve", "--config", config]);
  await assertHealthy(cli.url);
  const health = (await (await fetch(`${cli.url}/healthz`)).json()) as { engine: string };
  assert.equal(health.engine, "script");
  assert.equal(await stop(cli), 0);
});

test("a config file with an unknown key exits 2 naming the file and the key", async () => {
  const config = file(
    "unknown-key.json",
    JSON.stringify({ engine: "script", script: SHORT_SCRIPT, port: 0, colour: "blue" }),
  );
  const { code, stdout, stderr } = await runToExit(["serve", "--config", config]);
  assert.equal(code, 2, stderr);
  assert.ok(stderr.includes(config), stderr);
  assert.match(stderr, /colour/);
  assert.doesNotMatch(stdout, /listening/);
});

test("a config file that is not JSON exits 2 naming the file", async () => {
  const config = file("bad-json.json", '{"engine": "script",');
  const { code, stderr } = await runToExit(["serve", "--config", config]);
  assert.equal(code, 2, stderr);
  assert.ok(stderr.includes(config), stderr);
  assert.match(stderr, /JSON/);
});

test("a config file with a bad value exits 2 naming the file and the key", async () => {
  const config = file(
    "bad-port.json",
    JSON.stringify({ engine: "script", script: SHORT_SCRIPT, port: "abc" }),
  );
  const { code, stderr } = await runToExit(["serve", "--config", config]);
  assert.equal(code, 2, stderr);
  assert.ok(stderr.includes(config), stderr);
  assert.match(stderr, /port/);
});

test("--engine script without --script exits 2 and says to pass --script", async () => {
  const { code, stderr } = await runToExit(["serve", "--engine", "script", "--port", "0"]);
  assert.equal(code, 2, stderr);
  assert.match(stderr, /--script/);
});

test("a script file with an invalid line exits 2 naming the file and the line", async () => {
  const script = file(
    "bad-script.jsonl",
    JSON.stringify({ output: [{ type: "message", text: "fine" }] }) +
      "\n" +
      JSON.stringify({ output: [{ type: "telepathy", text: "nope" }] }) +
      "\n",
  );
  const { code, stdout, stderr } = await runToExit([
    "serve",
    "--engine",
    "script",
    "--script",
    script,
    "--port",
    "0",
  ]);
  assert.equal(code, 2, stderr);
  assert.ok(stderr.includes(`${script}:2`), stderr);
  assert.doesNotMatch(stdout, /listening/);
});

test("--engine llama with a missing --model file exits non-zero mentioning --model", async () => {
  const { code, stderr } = await runToExit([
    "serve",
    "--engine",
    "llama",
    "--model",
    join(dir, "nonexistent.gguf"),
    "--no-download",
    "--port",
    "0",
  ]);
  assert.notEqual(code, 0, stderr);
  assert.equal(typeof code, "number", `expected an exit code, got ${code}`);
  assert.match(stderr, /--model/);
});

test("serve on a port in use exits 2, names the process that holds it and suggests --port 0", async () => {
  // This test process holds the port: its pid is what the message must name.
  const holder = createNetServer();
  await new Promise<void>((resolve) => holder.listen(0, "127.0.0.1", resolve));
  const port = (holder.address() as AddressInfo).port;
  try {
    const { code, stdout, stderr } = await runToExit([
      "serve",
      "--engine",
      "script",
      "--script",
      SHORT_SCRIPT,
      "--port",
      String(port),
    ]);
    // Before: an "internal error" stack trace on stderr and exit 0.
    assert.equal(code, 2, stderr);
    assert.match(stderr, new RegExp(`port ${port} on 127\\.0\\.0\\.1 is in use`));
    assert.match(stderr, /--port 0/);
    if (process.platform === "linux") assert.match(stderr, new RegExp(`pid ${process.pid}\\b`));
    assert.doesNotMatch(stderr, /internal error|\n\s+at /);
    assert.doesNotMatch(stdout, /listening/);
  } finally {
    holder.close();
  }
});

test("--allowed-host and --allowed-origin (repeatable) let a proxy's name and a web app's origin in", async () => {
  const server = await startScriptServe(SHORT_SCRIPT, [
    "--allowed-host",
    "spark.internal",
    "--allowed-host",
    "proxy.example",
    "--allowed-origin",
    "https://app.example",
  ]);
  try {
    const { port } = new URL(server.url);
    const status = (headers: Record<string, string>): Promise<number> =>
      new Promise((resolve, reject) => {
        const request = httpRequest(
          `${server.url}/v1/models`,
          { headers: { connection: "close", ...headers } },
          (response) => {
            response.resume();
            resolve(response.statusCode ?? 0);
          },
        );
        request.on("error", reject);
        request.end();
      });
    assert.equal(await status({ host: "spark.internal" }), 200);
    assert.equal(await status({ host: `proxy.example:${port}` }), 200);
    assert.equal(await status({ host: "evil.example" }), 403);
    assert.equal(await status({ origin: "https://app.example" }), 200);
    assert.equal(await status({ origin: "https://evil.example" }), 403);
  } finally {
    await stop(server);
  }
});
