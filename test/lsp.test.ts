/**
 * `spark lsp` end to end: the language server as a child process driven by a real LSP client over
 * stdio, against real `spark serve --engine script` processes, through a recording proxy that shows
 * what reached the Spark server (bodies, counts, aborts). Plus the pure parts (clipping,
 * post-processing, the cache, fences) in process.
 */
import assert from "node:assert/strict";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createServer } from "node:net";
import { PassThrough } from "node:stream";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { after, before, describe, test } from "node:test";
import { CancellationTokenSource, ResponseError } from "vscode-languageserver-protocol/node";
import { hashKey } from "../src/core/keys.js";
import { CompletionCache } from "../src/lsp/completion-cache.js";
import { EditRing } from "../src/lsp/edit-ring.js";
import { clipPrefix, clipSuffix, postProcess } from "../src/lsp/fim-context.js";
import { BoundedMessageReader, REFUSED_METHOD } from "../src/lsp/message-reader.js";
import { completionsBlocked, DEFAULT_EXCLUDE_PATTERNS, matchesAny } from "../src/lsp/file-filter.js";
import { finalRewrite, progressDelta, quickEditMaxTokens, stripFence } from "../src/lsp/quick-edit.js";
import { file, freshDir, runToExit, startScriptServe, startServer, stop, type Cli } from "./helpers/cli.js";
import {
  initialize,
  recordingProxy,
  spawnLsp,
  type LspProcess,
  type Notification,
  type ProxiedRequest,
  type RecordingProxy,
} from "./helpers/lsp-client.js";

const INVALID_PARAMS = -32602;
const REQUEST_CANCELLED = -32800;
const REQUEST_FAILED = -32803;

const REWRITE = "function add(a: number, b: number): number {\n  return a + b;\n}\n";
const SLOW = "first second third fourth fifth sixth seventh eighth ninth tenth ".repeat(10);
const SCRIPT = [
  { output: [{ type: "message", text: "```ts\n" + REWRITE + "```" }] },
  { completion: "a + b;", after: "  return " },
  { completion: 'world")', after: 'hello("' },
  { completion: SLOW, after: "slow(" },
  { completion: "42;", after: "answer = " },
  { completion: "// more" },
];

const workspace = freshDir("lsp-ws-");
const uriOf = (name: string): string => pathToFileURL(join(workspace, name)).href;

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function metric(server: string, name: string): Promise<number> {
  const text = await (await fetch(`${server}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return line === undefined ? 0 : Number(line.split(" ").pop());
}

/** Polls the server's metrics until `name` reaches `value` (the test's own timeout bounds it). */
async function metricReaches(server: string, name: string, value: number): Promise<number> {
  for (;;) {
    const current = await metric(server, name);
    if (current >= value) return current;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function open(lsp: LspProcess, name: string, text: string, version = 1): Promise<void> {
  return lsp.connection.sendNotification("textDocument/didOpen", {
    textDocument: { uri: uriOf(name), languageId: "typescript", version, text },
  });
}

/** Inserts `text` at `line:character` as an incremental change. */
function type(lsp: LspProcess, name: string, version: number, line: number, character: number, text: string) {
  return lsp.connection.sendNotification("textDocument/didChange", {
    textDocument: { uri: uriOf(name), version },
    contentChanges: [{ range: { start: { line, character }, end: { line, character } }, text }],
  });
}

interface Items {
  items: { insertText: string }[];
}

function complete(
  lsp: LspProcess,
  name: string,
  line: number,
  character: number,
  token?: CancellationTokenSource,
) {
  const params = {
    textDocument: { uri: uriOf(name) },
    position: { line, character },
    context: { triggerKind: 2 },
  };
  return token
    ? lsp.connection.sendRequest<Items>("textDocument/inlineCompletion", params, token.token)
    : lsp.connection.sendRequest<Items>("textDocument/inlineCompletion", params);
}

function command<T = Record<string, unknown>>(
  lsp: LspProcess,
  name: string,
  args: unknown[] = [],
): Promise<T> {
  return lsp.connection.sendRequest<T>("workspace/executeCommand", { command: name, arguments: args });
}

/** `spark.quickEdit` on `range` of the workspace file `name` (no instruction when it is left out). */
function quickEdit<T = Record<string, unknown>>(
  lsp: LspProcess,
  name: string,
  range: object,
  instruction?: string,
): Promise<T> {
  const target = { textDocument: { uri: uriOf(name) }, range };
  return command<T>(lsp, "spark.quickEdit", [
    instruction === undefined ? target : { ...target, instruction },
  ]);
}

/** Whole lines `from` up to (not including) line `to`. */
const wholeLines = (from: number, to: number): object => ({
  start: { line: from, character: 0 },
  end: { line: to, character: 0 },
});

async function rejection(promise: Promise<unknown>): Promise<ResponseError<Record<string, unknown>>> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ResponseError, `expected a ResponseError, got ${String(error)}`);
    return error as ResponseError<Record<string, unknown>>;
  }
  assert.fail("expected the request to fail");
}

/** The client's copy of the rewrite after each progress delta (keep `from` characters, append `text`). */
function rewritesSoFar(progress: Notification[]): string[] {
  let text = "";
  return progress.map((p) => {
    const from = p.params.from as number;
    assert.ok(
      Number.isInteger(from) && from >= 0 && from <= text.length,
      `from ${from} within ${text.length}`,
    );
    text = text.slice(0, from) + (p.params.text as string);
    return text;
  });
}

const completionsTo = (proxy: RecordingProxy): ProxiedRequest[] =>
  proxy.requests.filter((r) => r.path === "/v1/completions");

describe("spark lsp against a Spark server", () => {
  const scriptFile = file("lsp-script.jsonl", SCRIPT.map((line) => JSON.stringify(line)).join("\n"));
  let server: Cli & { url: string };
  let proxy: RecordingProxy;
  let lsp: LspProcess;

  before(async () => {
    server = await startServer(["serve", "--engine", "script", "--script", scriptFile, "--port", "0"]);
    proxy = await recordingProxy(server.url);
    lsp = spawnLsp(["--server", proxy.url, "--debounce", "0"]);
    const result = await initialize(lsp, { rootUri: pathToFileURL(workspace).href });
    const capabilities = result.capabilities as Record<string, unknown>;
    assert.deepEqual(capabilities.textDocumentSync, { openClose: true, change: 2 });
    assert.equal(capabilities.inlineCompletionProvider, true);
    assert.deepEqual(capabilities.executeCommandProvider, {
      commands: ["spark.quickEdit", "spark.toggleTier", "spark.setTier", "spark.status"],
    });
  });
  after(async () => {
    assert.equal(await lsp.close(), 0);
    await proxy.close();
    await stop(server);
  });

  test("a completion appears as ghost text, with the text around the cursor and other files' edits", async () => {
    await open(lsp, "other.ts", "export const a = 1;\nexport const b = 2;\n");
    await type(lsp, "other.ts", 2, 1, 19, "\nexport const edited = true;");
    await open(lsp, "add.ts", "function add(a, b) {\n  return \n}\n");
    const before = completionsTo(proxy).length;
    const status = lsp.nextNotification("spark/status", lsp.notifications.length);
    const result = await complete(lsp, "add.ts", 1, 9);
    assert.deepEqual(result, { items: [{ insertText: "a + b;" }] });
    const requests = completionsTo(proxy);
    assert.equal(requests.length, before + 1);
    const body = requests.at(-1)!.body;
    assert.equal(body.model, "spark");
    assert.equal(body.prompt, "function add(a, b) {\n  return ");
    assert.equal(body.suffix, "\n}\n");
    assert.equal(body.stream, true);
    assert.equal(typeof body.max_tokens, "number");
    assert.ok(Array.isArray(body.stop));
    const extra = body.input_extra as { filename: string; text: string }[];
    assert.equal(extra.length, 1);
    assert.equal(extra[0]!.filename, "other.ts");
    assert.match(extra[0]!.text, /export const edited = true;/);
    const { params } = await status;
    assert.equal(params.tier, "spark");
    assert.equal(params.server, proxy.url);
    assert.equal(typeof params.lastTtftMs, "number");
  });

  test("typing the shown suggestion's characters keeps the rest of it without a request", async () => {
    await open(lsp, "answer.ts", "let answer = \n");
    const first = await complete(lsp, "answer.ts", 0, 13);
    assert.deepEqual(first, { items: [{ insertText: "42;" }] });
    const count = completionsTo(proxy).length;
    await type(lsp, "answer.ts", 2, 0, 13, "4");
    assert.deepEqual(await complete(lsp, "answer.ts", 0, 14), { items: [{ insertText: "2;" }] });
    await type(lsp, "answer.ts", 3, 0, 14, "2");
    assert.deepEqual(await complete(lsp, "answer.ts", 0, 15), { items: [{ insertText: ";" }] });
    assert.equal(completionsTo(proxy).length, count, "cache hits send no request");
    // Typing something else is a miss: a new request.
    await type(lsp, "answer.ts", 4, 0, 15, "0");
    await complete(lsp, "answer.ts", 0, 16);
    assert.equal(completionsTo(proxy).length, count + 1);
  });

  test("a completion that writes the rest of the line again is cut before the repeat", async () => {
    await open(lsp, "hello.ts", 'hello("");\n');
    assert.deepEqual(await complete(lsp, "hello.ts", 0, 7), { items: [{ insertText: "world" }] });
  });

  test("the tier toggle changes the model of the next request and is notified", async () => {
    const from = lsp.notifications.length;
    assert.deepEqual(await command(lsp, "spark.toggleTier"), { tier: "deep" });
    const status = await lsp.nextNotification("spark/status", from);
    assert.equal(status.params.tier, "deep");
    await open(lsp, "tier.ts", "const answer = \n");
    await complete(lsp, "tier.ts", 0, 15);
    assert.equal(completionsTo(proxy).at(-1)!.body.model, "deep");
    assert.deepEqual(await command(lsp, "spark.setTier", ["spark"]), { tier: "spark" });
    await type(lsp, "tier.ts", 2, 0, 15, " ");
    await complete(lsp, "tier.ts", 0, 16);
    assert.equal(completionsTo(proxy).at(-1)!.body.model, "spark");
    const current = await command(lsp, "spark.status");
    assert.equal(current.tier, "spark");
    assert.equal(current.server, proxy.url);
    assert.ok(current.lastTtftMs === null || typeof current.lastTtftMs === "number");
    assert.ok(current.tokensPerSecond === null || typeof current.tokensPerSecond === "number");
  });

  test("didChangeConfiguration changes the tier live", async () => {
    const from = lsp.notifications.length;
    await lsp.connection.sendNotification("workspace/didChangeConfiguration", {
      settings: { spark: { tier: "deep" } },
    });
    assert.equal((await lsp.nextNotification("spark/status", from)).params.tier, "deep");
    assert.equal((await command(lsp, "spark.status")).tier, "deep");
    await command(lsp, "spark.setTier", ["spark"]);
  });

  test("quick edit streams the scripted rewrite, strips its fence and sends the selection as the prediction", async () => {
    const text = "// math\nfunction add(a, b) {\n  return a + b;\n}\n// end\n";
    await open(lsp, "quick.ts", text);
    const range = { start: { line: 1, character: 0 }, end: { line: 4, character: 0 } };
    const from = lsp.notifications.length;
    const result = await command(lsp, "spark.quickEdit", [
      { textDocument: { uri: uriOf("quick.ts") }, range, instruction: "add types" },
    ]);
    assert.equal(result.uri, uriOf("quick.ts"));
    assert.deepEqual(result.range, range);
    assert.equal(result.newText, REWRITE);
    assert.equal(typeof result.ttftMs, "number");
    const progress = lsp.notifications.slice(from).filter((n) => n.method === "spark/quickEditProgress");
    assert.ok(progress.length >= 2, "the rewrite streams in several progress notifications");
    const shown = rewritesSoFar(progress);
    for (const [i, p] of progress.entries()) {
      assert.equal(p.params.uri, uriOf("quick.ts"));
      assert.deepEqual(p.params.range, range);
      assert.ok(REWRITE.startsWith(shown[i]!), `progress is a prefix: ${shown[i]}`);
      assert.doesNotMatch(shown[i]!, /```/);
    }
    assert.equal(shown.at(-1), REWRITE, "after the last progress the client has the final text");
    const request = proxy.requests.filter((r) => r.path === "/v1/chat/completions").at(-1)!;
    assert.equal(request.body.model, "spark");
    assert.equal(request.body.stream, true);
    assert.deepEqual(request.body.prediction, {
      type: "content",
      content: "function add(a, b) {\n  return a + b;\n}\n",
    });
    const messages = request.body.messages as { role: string; content: string }[];
    assert.match(messages.at(-1)!.content, /add types/);
    const usage = request.response
      .split("\n")
      .filter((l) => l.startsWith("data: {"))
      .map((l) => JSON.parse(l.slice(6)) as { usage?: Record<string, Record<string, number>> })
      .find((chunk) => chunk.usage)?.usage;
    assert.ok(usage, "usage comes with the last chunk");
    assert.ok(usage.completion_tokens_details!.accepted_prediction_tokens! > 0);
    // The status notification follows a quick edit too.
    assert.ok(lsp.notifications.slice(from).some((n) => n.method === "spark/status"));
  });

  test("bad params are InvalidParams with a clear message", async () => {
    const noPosition = await rejection(
      lsp.connection.sendRequest("textDocument/inlineCompletion", { textDocument: { uri: uriOf("add.ts") } }),
    );
    assert.equal(noPosition.code, INVALID_PARAMS);
    assert.match(noPosition.message, /position/);
    const notOpen = await rejection(complete(lsp, "never-opened.ts", 0, 0));
    assert.equal(notOpen.code, INVALID_PARAMS);
    assert.match(notOpen.message, /not open/);
    const noInstruction = await rejection(quickEdit(lsp, "add.ts", wholeLines(0, 1)));
    assert.equal(noInstruction.code, INVALID_PARAMS);
    assert.match(noInstruction.message, /instruction/);
    const backwards = await rejection(quickEdit(lsp, "add.ts", wholeLines(2, 1), "x"));
    assert.equal(backwards.code, INVALID_PARAMS);
    const tier = await rejection(command(lsp, "spark.setTier", ["fast"]));
    assert.equal(tier.code, INVALID_PARAMS);
    assert.match(tier.message, /spark\.setTier/);
    const unknown = await rejection(command(lsp, "spark.nothing"));
    assert.equal(unknown.code, INVALID_PARAMS);
    // Still serving.
    assert.equal((await command(lsp, "spark.status")).tier, "spark");
  });
});

describe("spark lsp cancellation, with a slow engine", () => {
  const scriptFile = file("lsp-slow.jsonl", SCRIPT.map((line) => JSON.stringify(line)).join("\n"));
  let server: Cli & { url: string };
  let proxy: RecordingProxy;
  let lsp: LspProcess;

  before(async () => {
    server = await startScriptServe(scriptFile, ["--rate", "20"]);
    proxy = await recordingProxy(server.url);
    lsp = spawnLsp(["--server", proxy.url, "--debounce", "0"]);
    await initialize(lsp, { rootUri: pathToFileURL(workspace).href });
    await open(lsp, "slow.ts", "slow(\n");
  });
  after(async () => {
    await lsp.close();
    await proxy.close();
    await stop(server);
  });

  /** Waits until the Spark server has started streaming the latest completion. */
  const streaming = (): Promise<ProxiedRequest> =>
    proxy.until(() => {
      const last = completionsTo(proxy).at(-1);
      return last && last.response.includes("data:") ? last : undefined;
    });

  test("$/cancelRequest aborts the HTTP request and the server stops the engine", async () => {
    const cancelledBefore = await metric(server.url, "spark_cancellations_total");
    const source = new CancellationTokenSource();
    const pending = complete(lsp, "slow.ts", 0, 5, source);
    const request = await streaming();
    source.cancel();
    const error = await rejection(pending);
    assert.equal(error.code, REQUEST_CANCELLED);
    await proxy.until(() => request.aborted);
    assert.equal(request.finished, false);
    await metricReaches(server.url, "spark_cancellations_total", cancelledBefore + 1);
  });

  test("a document change aborts the completion in flight", async () => {
    const cancelledBefore = await metric(server.url, "spark_cancellations_total");
    const pending = complete(lsp, "slow.ts", 0, 5);
    const request = await streaming();
    await type(lsp, "slow.ts", 2, 0, 5, "x");
    assert.deepEqual(await pending, { items: [] });
    await proxy.until(() => request.aborted);
    await metricReaches(server.url, "spark_cancellations_total", cancelledBefore + 1);
  });

  test("a newer request makes the one in flight stale", async () => {
    const first = complete(lsp, "slow.ts", 0, 6);
    const request = await streaming();
    const second = complete(lsp, "slow.ts", 0, 0);
    assert.deepEqual(await first, { items: [] });
    await proxy.until(() => request.aborted);
    assert.deepEqual(await second, { items: [{ insertText: "// more" }] });
  });
});

describe("spark lsp errors from the server", () => {
  test("a server that is down gives a clear error, shown once", async () => {
    const port = await freePort();
    const lsp = spawnLsp(["--server", `http://127.0.0.1:${port}`, "--debounce", "0"]);
    try {
      await initialize(lsp);
      await open(lsp, "down.ts", "x = \n");
      const first = await rejection(complete(lsp, "down.ts", 0, 4));
      assert.equal(first.code, REQUEST_FAILED);
      assert.match(
        first.message,
        new RegExp(`cannot reach the Spark server at http://127\\.0\\.0\\.1:${port}`),
      );
      assert.equal(first.data!.code, "server_unreachable");
      await type(lsp, "down.ts", 2, 0, 4, "1");
      const second = await rejection(complete(lsp, "down.ts", 0, 5));
      assert.equal(second.data!.code, "server_unreachable");
      const quick = await rejection(
        command(lsp, "spark.quickEdit", [
          {
            textDocument: { uri: uriOf("down.ts") },
            range: { start: { line: 0, character: 0 }, end: { line: 0, character: 1 } },
            instruction: "rename",
          },
        ]),
      );
      assert.equal(quick.data!.code, "server_unreachable");
      const shown = lsp.notifications.filter((n) => n.method === "window/showMessage");
      assert.equal(shown.length, 1, "one message, not one per keystroke");
      assert.match(shown[0]!.params.message as string, /cannot reach the Spark server/);
    } finally {
      await lsp.close();
    }
  });

  test("401 and 429 come back with the server's message and code; the key is sent as Bearer", async () => {
    const key = "sk-spark-lsp-test-key";
    const limitedKey = "sk-spark-lsp-limited-key";
    const keyFile = file(
      "lsp-keys.json",
      JSON.stringify({
        keys: [
          { id: "lsp", hash: hashKey(key) },
          { id: "limited", hash: hashKey(limitedKey), limits: { spark: { requestsPerMinute: 1 } } },
        ],
      }),
    );
    const scriptFile = file("lsp-keys.jsonl", JSON.stringify(SCRIPT[0]));
    const server = await startScriptServe(scriptFile, ["--key-file", keyFile]);
    const edit = {
      textDocument: { uri: uriOf("keyed.ts") },
      range: { start: { line: 0, character: 0 }, end: { line: 1, character: 0 } },
      instruction: "types",
    };
    // The key from the variable named by --api-key-env works.
    const good = spawnLsp(["--server", server.url, "--api-key-env", "MY_SPARK_KEY"], { MY_SPARK_KEY: key });
    // initializationOptions.apiKey overrides it.
    const bad = spawnLsp(["--server", server.url, "--api-key-env", "MY_SPARK_KEY"], { MY_SPARK_KEY: key });
    const limited = spawnLsp(["--server", server.url], { SPARK_API_KEY: limitedKey });
    try {
      await initialize(good);
      await initialize(bad, { initializationOptions: { apiKey: "sk-wrong" } });
      await initialize(limited);
      for (const lsp of [good, bad, limited]) await open(lsp, "keyed.ts", "function add(a, b) {}\n");
      assert.equal((await command(good, "spark.quickEdit", [edit])).newText, REWRITE);
      const unauthorized = await rejection(command(bad, "spark.quickEdit", [edit]));
      assert.equal(unauthorized.code, REQUEST_FAILED);
      assert.equal(unauthorized.data!.status, 401);
      assert.equal(unauthorized.data!.code, "invalid_api_key");
      await command(limited, "spark.quickEdit", [edit]);
      const limitedError = await rejection(command(limited, "spark.quickEdit", [edit]));
      assert.equal(limitedError.data!.status, 429);
      assert.equal(limitedError.data!.code, "rate_limit_exceeded");
      const shown = await limited.nextNotification("window/showMessage");
      assert.equal(shown.params.message, `Spark: ${limitedError.message}`);
    } finally {
      await Promise.all([good.close(), bad.close(), limited.close()]);
      await stop(server);
    }
  });

  test("bad flags and initializationOptions are refused", async () => {
    const flags = await runToExit(["lsp", "--debounce", "soon"]);
    assert.equal(flags.code, 2);
    assert.match(flags.stderr, /--debounce soon/);
    const tier = await runToExit(["lsp", "--tier", "fast"]);
    assert.equal(tier.code, 2);
    assert.match(tier.stderr, /Allowed choices are spark, deep/);
    const lsp = spawnLsp([]);
    try {
      const error = await rejection(initialize(lsp, { initializationOptions: { tier: "fast" } }));
      assert.equal(error.code, INVALID_PARAMS);
      assert.match(error.message, /initializationOptions\.tier/);
    } finally {
      lsp.child.kill();
      await lsp.exited;
    }
  });
});

describe("spark lsp quick edit cancellation, with a slow engine", () => {
  test("$/cancelRequest during a quick edit aborts the HTTP request and the server stops the engine", async () => {
    const server = await startScriptServe(file("lsp-slow-chat.jsonl", JSON.stringify(SCRIPT[0])), [
      "--rate",
      "5",
    ]);
    const proxy = await recordingProxy(server.url);
    const lsp = spawnLsp(["--server", proxy.url]);
    try {
      await initialize(lsp);
      await open(lsp, "cancel.ts", "function add(a, b) {}\n");
      const source = new CancellationTokenSource();
      const from = lsp.notifications.length;
      const pending = lsp.connection.sendRequest(
        "workspace/executeCommand",
        {
          command: "spark.quickEdit",
          arguments: [
            {
              textDocument: { uri: uriOf("cancel.ts") },
              range: { start: { line: 0, character: 0 }, end: { line: 1, character: 0 } },
              instruction: "types",
            },
          ],
        },
        source.token,
      );
      await lsp.nextNotification("spark/quickEditProgress", from);
      source.cancel();
      const error = await rejection(pending);
      assert.equal(error.code, REQUEST_CANCELLED);
      const request = await proxy.until(() => proxy.requests.find((r) => r.aborted));
      assert.equal(request.path, "/v1/chat/completions");
      await metricReaches(server.url, "spark_cancellations_total", 1);
    } finally {
      await lsp.close();
      await proxy.close();
      await stop(server);
    }
  });
});

describe("spark lsp quick edit of 100 KB", () => {
  test("progress is sent as deltas: the editor gets under 2x the rewrite, not the rewrite so far per token", async () => {
    let rewrite = "";
    for (let i = 0; rewrite.length < 100 * 1024; i++) rewrite += `  const value${i} = compute(${i});\n`;
    const server = await startScriptServe(
      file("lsp-big-rewrite.jsonl", JSON.stringify({ output: [{ type: "message", text: rewrite }] })),
    );
    const lsp = spawnLsp(["--server", server.url]);
    try {
      await initialize(lsp);
      // A selection as big as the rewrite: the output cap (twice the selection) leaves room for it.
      const body = rewrite.replaceAll("compute", "calc");
      await open(lsp, "big.ts", `function big() {\n${body}}\n`);
      const from = lsp.notifications.length;
      const result = await command(lsp, "spark.quickEdit", [
        {
          textDocument: { uri: uriOf("big.ts") },
          range: {
            start: { line: 1, character: 0 },
            end: { line: 1 + body.split("\n").length - 1, character: 0 },
          },
          instruction: "write it out",
        },
      ]);
      assert.equal(result.newText, rewrite);
      const progress = lsp.notifications.slice(from).filter((n) => n.method === "spark/quickEditProgress");
      assert.equal(rewritesSoFar(progress).at(-1), rewrite, "the deltas add up to the rewrite");
      // Every progress notification was written before the command's answer.
      const written = lsp.bytesWritten("spark/quickEditProgress");
      const size = Buffer.byteLength(rewrite);
      assert.ok(written < 2 * size, `${written} bytes of progress for a ${size}-byte rewrite`);
    } finally {
      await lsp.close();
      await stop(server);
    }
  });
});

describe("spark lsp against hostile or odd input", () => {
  const frame = (body: string): string => `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;

  test("a body that is not JSON is reported on stderr and skipped; the server keeps serving", async () => {
    const lsp = spawnLsp([]);
    try {
      await initialize(lsp);
      lsp.child.stdin!.write(frame("{not json"));
      assert.equal((await command(lsp, "spark.status")).tier, "spark");
      await lsp.stderrMatches(/spark lsp: skipped a message that is not JSON/);
    } finally {
      await lsp.close();
    }
  });

  for (const [name, bytes, reported] of [
    [
      "a Content-Length that is not a number",
      "Content-Length: lots\r\n\r\n{}",
      /Content-Length is not a number/,
    ],
    ["a header without Content-Length", 'X-Other: 1\r\n\r\n{"jsonrpc":"2.0"}', /without Content-Length/],
    ["a header line that is not a header", "hello there\r\n\r\n", /header line without/],
  ] as const) {
    test(`a framing error (${name}) is reported on stderr and ends the process with 1, so the editor restarts it`, async () => {
      const lsp = spawnLsp([]);
      await initialize(lsp);
      lsp.child.stdin!.write(bytes);
      assert.equal(await lsp.exited, 1);
      assert.match(lsp.stderr(), reported);
      assert.match(lsp.stderr(), /cannot read the editor's messages any more.*exiting/);
    });
  }

  test("a message over --max-message-bytes is refused: a request is answered, a document is forgotten, and it keeps serving", async () => {
    const lsp = spawnLsp(["--max-message-bytes", "65536"]);
    try {
      await initialize(lsp);
      const big = await rejection(command(lsp, "spark.status", ["x".repeat(200_000)]));
      assert.equal(big.code, -32600);
      assert.match(big.message, /workspace\/executeCommand request is over spark lsp's limit of 65536 bytes/);
      await lsp.stderrMatches(/refused a \d+-byte message from the editor \(workspace\/executeCommand\)/);
      const first = await lsp.nextNotification("window/showMessage");
      assert.match(first.params.message as string, /refused a \d+-byte message from the editor/);
      await open(lsp, "huge.ts", "small\n");
      const from = lsp.notifications.length;
      await type(lsp, "huge.ts", 2, 0, 0, "y".repeat(100_000));
      const shown = await lsp.nextNotification("window/showMessage", from);
      assert.match(shown.params.message as string, /textDocument\/didChange .*huge\.ts/);
      const gone = await rejection(complete(lsp, "huge.ts", 0, 0));
      assert.match(gone.message, /not open/, "its text here is not the editor's any more");
      assert.equal((await command(lsp, "spark.status")).tier, "spark");
    } finally {
      await lsp.close();
    }
  });

  test("a 512 MiB Content-Length is refused from its header: its bytes are skipped, not held", async () => {
    const lsp = spawnLsp([]);
    try {
      await initialize(lsp);
      const rss = (): number =>
        Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${lsp.child.pid}/status`, "utf8"))?.[1]) * 1024;
      const before = rss();
      const stdin = lsp.child.stdin!;
      stdin.write(
        `Content-Length: ${512 * 1024 * 1024}\r\n\r\n{"jsonrpc":"2.0","id":"big","method":"spark/big","params":"`,
      );
      const chunk = Buffer.alloc(1024 * 1024, "a");
      // 192 MiB of it: held, it would grow RSS by at least that; skipped, only by what the garbage
      // collector has not yet reclaimed of the chunks read (up to ~55 MiB on a loaded machine).
      for (let i = 0; i < 192; i++) if (!stdin.write(chunk)) await once(stdin, "drain");
      await new Promise<void>((resolve) => stdin.write("", () => resolve()));
      // Refused at once, while nearly all of it is still to come.
      await lsp.stderrMatches(/refused a 536870912-byte message from the editor \(spark\/big\)/);
      const grown = rss() - before;
      assert.ok(grown < 96 * 1024 * 1024, `RSS grew by ${grown} bytes while 192 MiB of the message came`);
    } finally {
      lsp.child.kill();
      await lsp.exited;
    }
  });

  test("a quick edit over the server's body limit says 413 with the server's message, not EPIPE", async () => {
    const server = await startScriptServe(file("lsp-413.jsonl", JSON.stringify(SCRIPT[0])), [
      "--max-body-bytes",
      String(1024 * 1024),
    ]);
    const lsp = spawnLsp(["--server", server.url]);
    try {
      await initialize(lsp);
      // A quick edit that fits first, as in an editor: the large one then goes over a warm connection.
      await open(lsp, "small.ts", "function add(a, b) {}\n");
      const small = await quickEdit(lsp, "small.ts", wholeLines(0, 1), "types");
      assert.equal(small.newText, REWRITE);
      const text = "const x = 1;\n".repeat(700_000);
      await open(lsp, "large.ts", text);
      // Whether the upload or the answer comes first is a race: a few tries, each must say 413.
      for (let i = 0; i < 5; i++) {
        const error = await rejection(quickEdit(lsp, "large.ts", wholeLines(0, 700_000), "rename x"));
        assert.equal(error.code, REQUEST_FAILED);
        assert.equal(error.data!.code, "request_too_large", error.message);
        assert.equal(error.data!.status, 413);
        assert.match(error.message, /larger than the limit of 1048576 bytes/);
      }
    } finally {
      await lsp.close();
      await stop(server);
    }
  });

  test("odd file URIs (a host, an encoded /) get completions and never break another file's", async () => {
    const server = await startServer([
      "serve",
      "--engine",
      "script",
      "--script",
      file(
        "lsp-odd.jsonl",
        [{ completion: "42;", after: "answer = " }, { completion: "// more" }]
          .map((l) => JSON.stringify(l))
          .join("\n"),
      ),
      "--port",
      "0",
    ]);
    const proxy = await recordingProxy(server.url);
    const lsp = spawnLsp(["--server", proxy.url, "--debounce", "0"]);
    const odd = ["file://build-host/share/odd.ts", "file:///tmp/a%2Fb.ts"];
    try {
      await initialize(lsp, { rootUri: pathToFileURL(workspace).href });
      for (const uri of odd) {
        await lsp.connection.sendNotification("textDocument/didOpen", {
          textDocument: { uri, languageId: "typescript", version: 1, text: "let answer = \n" },
        });
        await lsp.connection.sendNotification("textDocument/didChange", {
          textDocument: { uri, version: 2 },
          contentChanges: [
            {
              range: { start: { line: 1, character: 0 }, end: { line: 1, character: 0 } },
              text: "// edited\n",
            },
          ],
        });
        const inOdd = await lsp.connection.sendRequest<Items>("textDocument/inlineCompletion", {
          textDocument: { uri },
          position: { line: 0, character: 13 },
          context: { triggerKind: 2 },
        });
        assert.deepEqual(inOdd, { items: [{ insertText: "42;" }] });
        assert.equal(
          (completionsTo(proxy).at(-1)!.body.input_extra as unknown[]).length,
          odd.indexOf(uri),
          "the other odd file's edit comes along",
        );
      }
      await open(lsp, "normal.ts", "let answer = \n");
      assert.deepEqual(await complete(lsp, "normal.ts", 0, 13), { items: [{ insertText: "42;" }] });
      const extra = completionsTo(proxy).at(-1)!.body.input_extra as { filename: string }[];
      assert.deepEqual(extra.map((chunk) => chunk.filename).sort(), [...odd].sort(), "named by their URIs");
      // Closed, they leave the ring.
      for (const uri of odd)
        await lsp.connection.sendNotification("textDocument/didClose", { textDocument: { uri } });
      await type(lsp, "normal.ts", 2, 0, 13, " ");
      assert.deepEqual(await complete(lsp, "normal.ts", 0, 14), { items: [{ insertText: "// more" }] });
      assert.deepEqual(completionsTo(proxy).at(-1)!.body.input_extra, []);
    } finally {
      await lsp.close();
      await proxy.close();
      await stop(server);
    }
  });
});

describe("spark lsp completion control and the quick-edit cap", () => {
  const LONG = Array.from({ length: 1500 }, (_, i) => `word${i}`).join(" ");
  const scriptFile = file(
    "lsp-control-script.jsonl",
    [{ output: [{ type: "message", text: LONG }] }, { completion: "done();" }]
      .map((line) => JSON.stringify(line))
      .join("\n"),
  );
  let server: Cli & { url: string };
  let proxy: RecordingProxy;
  let lsp: LspProcess;

  before(async () => {
    server = await startServer(["serve", "--engine", "script", "--script", scriptFile, "--port", "0"]);
    proxy = await recordingProxy(server.url);
    lsp = spawnLsp(["--server", proxy.url, "--debounce", "0"]);
    await initialize(lsp, {
      rootUri: pathToFileURL(workspace).href,
      initializationOptions: { completions: { disabledLanguages: ["markdown"] } },
    });
  });
  after(async () => {
    assert.equal(await lsp.close(), 0);
    await proxy.close();
    await stop(server);
  });

  const openAs = (name: string, languageId: string, text: string): Promise<void> =>
    lsp.connection.sendNotification("textDocument/didOpen", {
      textDocument: { uri: uriOf(name), languageId, version: 1, text },
    });

  test("a secrets file, a disabled language and completions switched off send no request", async () => {
    await openAs(".env.local", "dotenv", "API_KEY=sk-live-1234\nOTHER=");
    await openAs("id_rsa", "plaintext", "-----BEGIN OPENSSH PRIVATE KEY-----\n");
    await openAs("notes.md", "markdown", "# Notes\n");
    await openAs("main.ts", "typescript", "const x = ");
    assert.deepEqual(await complete(lsp, ".env.local", 1, 6), { items: [] });
    assert.deepEqual(await complete(lsp, "id_rsa", 1, 0), { items: [] });
    assert.deepEqual(await complete(lsp, "notes.md", 1, 0), { items: [] });
    assert.equal(completionsTo(proxy).length, 0, "nothing reached the server");

    await lsp.connection.sendNotification("workspace/didChangeConfiguration", {
      settings: { spark: { completions: { enabled: false } } },
    });
    assert.deepEqual(await complete(lsp, "main.ts", 0, 10), { items: [] });
    assert.equal(completionsTo(proxy).length, 0, "completions off: nothing reached the server");

    // Edits elsewhere are context (input_extra) of the next completion, but never a secrets file's.
    await type(lsp, ".env.local", 2, 1, 6, "sk-live-5678");
    await type(lsp, "notes.md", 2, 1, 0, "markdown is context");
    // Switched back on, the same document gets its completion: the filter was what held it back.
    await lsp.connection.sendNotification("workspace/didChangeConfiguration", {
      settings: { spark: { completions: { enabled: true } } },
    });
    assert.deepEqual(await complete(lsp, "main.ts", 0, 10), { items: [{ insertText: "done();" }] });
    assert.equal(completionsTo(proxy).length, 1);
    assert.ok(
      completionsTo(proxy).every((r) => !JSON.stringify(r.body).includes("sk-live")),
      "the secret never left the editor",
    );
    const extra = completionsTo(proxy)[0]!.body.input_extra as { filename: string; text: string }[];
    assert.deepEqual(
      extra.map((chunk) => chunk.filename),
      ["notes.md"],
      "the markdown edit is context, the .env edit is not",
    );
    // The patterns are a setting: without `.env*` in them the file gets completions.
    await lsp.connection.sendNotification("workspace/didChangeConfiguration", {
      settings: { spark: { completions: { excludePatterns: ["*.pem"] } } },
    });
    await complete(lsp, ".env.local", 1, 6);
    assert.equal(completionsTo(proxy).length, 2);
  });

  test("a quick edit's output is capped relative to the selection, so a wandering model stops", async () => {
    const selection = "let y = 1;";
    await openAs("cap.ts", "typescript", `${selection}\n`);
    const result = await command<{ newText: string }>(lsp, "spark.quickEdit", [
      {
        textDocument: { uri: uriOf("cap.ts") },
        range: { start: { line: 0, character: 0 }, end: { line: 0, character: selection.length } },
        instruction: "rename y",
      },
    ]);
    const request = proxy.requests.filter((r) => r.path === "/v1/chat/completions").at(-1)!;
    assert.equal(request.body.max_tokens, quickEditMaxTokens(selection));
    assert.equal(quickEditMaxTokens(selection), 2 * 4 + 256);
    assert.ok(result.newText.length > 0 && result.newText.length < LONG.length / 2, "the answer was cut");
    assert.ok(LONG.startsWith(result.newText.trimEnd()));
  });

  test("patterns match the file name, or the path's end when they name a folder", () => {
    const filter = { enabled: true, disabledLanguages: [], excludePatterns: DEFAULT_EXCLUDE_PATTERNS };
    const blocked = (path: string, languageId = "plaintext") =>
      completionsBlocked(filter, { path, languageId }) !== undefined;
    for (const path of [
      "/w/.env",
      "/w/.env.production",
      "C:\\w\\server.PEM",
      "/h/.ssh/id_rsa.pub",
      "/w/my-Secrets.json",
      "/w/tls.key",
    ])
      assert.ok(blocked(path), path);
    for (const path of ["/w/env.ts", "/w/keyboard.ts", "/w/src/main.ts"]) assert.ok(!blocked(path), path);
    assert.equal(matchesAny("/w/config/prod/db.json", ["config/**/*.json"]), "config/**/*.json");
    assert.equal(matchesAny("/w/config/db.json", ["config/**/*.json"]), "config/**/*.json");
    assert.equal(matchesAny("/w/other/db.json", ["config/**/*.json"]), undefined);
    assert.equal(completionsBlocked(filter, { path: undefined, languageId: "typescript" }), undefined);
  });
});

describe("spark lsp lifetime", () => {
  test("live settings: a new server is notified; a bad value is shown, not applied", async () => {
    const lsp = spawnLsp(["--server", "http://127.0.0.1:1"]);
    try {
      await initialize(lsp, { initializationOptions: { tier: "deep", debounceMs: 10 } });
      assert.equal(
        (await command(lsp, "spark.status")).tier,
        "deep",
        "initializationOptions override the flags",
      );
      let from = lsp.notifications.length;
      await lsp.connection.sendNotification("workspace/didChangeConfiguration", {
        settings: { spark: { server: "http://127.0.0.1:2" } },
      });
      const status = await lsp.nextNotification("spark/status", from);
      assert.deepEqual(status.params, {
        tier: "deep",
        server: "http://127.0.0.1:2",
        lastTtftMs: null,
        tokensPerSecond: null,
      });
      from = lsp.notifications.length;
      await lsp.connection.sendNotification("workspace/didChangeConfiguration", {
        settings: { spark: { tier: "fast" } },
      });
      const shown = await lsp.nextNotification("window/showMessage", from);
      assert.match(shown.params.message as string, /settings\.spark\.tier/);
      assert.equal((await command(lsp, "spark.status")).tier, "deep");
    } finally {
      await lsp.close();
    }
  });

  test("shutdown + exit ends it with 0; a closed pipe ends it too", async () => {
    const lsp = spawnLsp([]);
    await initialize(lsp);
    assert.equal(await lsp.close(), 0);
    const orphan = spawnLsp([]);
    await initialize(orphan);
    orphan.child.stdin!.end();
    assert.equal(await orphan.exited, 1, "exit code 1: no shutdown came first");
  });
});

describe("spark lsp internals", () => {
  test("clipping keeps whole lines around the cursor", () => {
    const lines = Array.from({ length: 10 }, (_, i) => `line ${i}`).join("\n");
    assert.equal(clipPrefix(lines + "\npartial", 3, 1000), "line 8\nline 9\npartial");
    assert.equal(clipPrefix("abc\ndef", 5, 1000), "abc\ndef");
    assert.equal(clipPrefix("aaaa\nbbbb\ncc", 10, 8), "bbbb\ncc");
    assert.equal(clipSuffix("rest\nline 1\nline 2\nline 3\n", 2, 1000), "rest\nline 1\n");
    assert.equal(clipSuffix("rest\nline 1\nline 2\n", 10, 8), "rest\n");
  });

  test("post-processing drops repeats of the suffix and cuts at the suffix's first line", () => {
    assert.equal(postProcess("   ", ")"), undefined);
    assert.equal(postProcess(");", ");\n"), undefined, "only repeats the suffix");
    assert.equal(postProcess("a, b);", ");\n"), "a, b");
    assert.equal(postProcess("a, b\nmore", ")\n"), "a, b", "mid-line: one line");
    assert.equal(postProcess('world")', '");\n'), "world", "closing characters that start the suffix");
    assert.equal(postProcess("x + y", "y + 1\n"), "x + y", "letters are not a closing overlap");
    assert.equal(postProcess("x = 1;\n  return x;\n}\nfunction other() {", "\n}\n"), "x = 1;\n  return x;");
    assert.equal(postProcess("x = 1;\ny = 2;", "\n\n}\n"), "x = 1;\ny = 2;");
  });

  test("the cache hits on the same text and while typing along a suggestion, and evicts the oldest", () => {
    const cache = new CompletionCache(2);
    cache.set("u", "let a = ", "\n", "42;");
    assert.equal(cache.get("u", "let a = ", "\n"), "42;");
    assert.equal(cache.get("u", "let a = 4", "\n"), "2;");
    assert.equal(cache.get("u", "let a = 42;", "\n"), undefined, "all typed: nothing left to show");
    assert.equal(cache.get("u", "let a = 5", "\n"), undefined);
    assert.equal(cache.get("u", "let a = 4", "x\n"), undefined, "another suffix");
    assert.equal(cache.get("v", "let a = ", "\n"), undefined, "another document");
    cache.set("u", "b", "", "1");
    cache.set("u", "c", "", "");
    assert.equal(cache.get("u", "c", ""), "");
    assert.equal(cache.get("u", "let a = ", "\n"), undefined, "evicted");
  });

  test("the edit ring keeps recent places of other files, newest first, within its budget", () => {
    const docs = new Map([
      ["a", "a0\na1\na2\na3\n"],
      ["b", "b0\nb1\n"],
    ]);
    const ring = new EditRing((uri, from, to) => docs.get(uri)?.split("\n").slice(from, to).join("\n"), {
      capacity: 4,
      radius: 1,
      budget: 100,
    });
    ring.record("a", 2);
    ring.record("b", 0);
    assert.deepEqual(
      ring.chunks("c", (u) => u),
      [
        { filename: "b", text: "b0\nb1" },
        { filename: "a", text: "a1\na2\na3" },
      ],
    );
    assert.deepEqual(
      ring.chunks("b", (u) => u).map((c) => c.filename),
      ["a"],
    );
    ring.close("a");
    docs.delete("a");
    assert.deepEqual(
      ring.chunks("c", (u) => u),
      [{ filename: "b", text: "b0\nb1" }],
      "a closed file leaves",
    );
  });

  test("progress deltas keep the common start, take back what changed, and never split a surrogate pair", () => {
    assert.deepEqual(progressDelta("", "abc"), { from: 0, text: "abc" });
    assert.deepEqual(progressDelta("abc", "abcdef"), { from: 3, text: "def" });
    assert.deepEqual(progressDelta("x = 1;\n`", "x = 1;\n"), { from: 7, text: "" });
    assert.deepEqual(progressDelta("  ``", ""), { from: 0, text: "" });
    assert.deepEqual(progressDelta("a\ud83d", "a\ud83d\ude00"), { from: 1, text: "\ud83d\ude00" });
  });

  test("the stdin reader frames messages however the bytes are split, and refuses big ones without holding them", () => {
    const messages: unknown[] = [];
    const refused: unknown[] = [];
    const skipped: string[] = [];
    const stream = new PassThrough();
    const reader = new BoundedMessageReader(stream, 64 * 1024, {
      refused: (message) => refused.push(message),
      skipped: (reason) => skipped.push(reason),
      broken: (reason) => assert.fail(reason),
    });
    reader.listen((message) => messages.push(message));
    const body = (value: unknown): string => {
      const json = JSON.stringify(value);
      return `Content-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`;
    };
    const big = {
      jsonrpc: "2.0",
      id: 7,
      method: "big/one",
      params: { textDocument: { uri: "file:///b.ts" }, x: "é".repeat(50_000) },
    };
    const framed = Buffer.from(
      body({ jsonrpc: "2.0", method: "a", params: "é" }) +
        body(big) +
        "Content-Length: 8\r\n\r\nnot json" +
        body({ jsonrpc: "2.0", id: 1, method: "b" }),
    );
    // One byte at a time: headers, their blank line and multi-byte characters all straddle chunks.
    for (let i = 0; i < framed.length; i++) stream.write(framed.subarray(i, i + 1));
    assert.deepEqual(messages, [
      { jsonrpc: "2.0", method: "a", params: "é" },
      {
        jsonrpc: "2.0",
        method: REFUSED_METHOD,
        params: {
          bytes: Buffer.byteLength(JSON.stringify(big)),
          id: 7,
          method: "big/one",
          uri: "file:///b.ts",
        },
      },
      { jsonrpc: "2.0", id: 1, method: "b" },
    ]);
    assert.equal(refused.length, 1);
    assert.equal(skipped.length, 1);
    assert.match(skipped[0]!, /not JSON/);
  });

  test("fences are stripped, also while the answer streams", () => {
    assert.equal(stripFence("```ts\nx = 1;\n```"), "x = 1;");
    assert.equal(stripFence("```ts"), "");
    assert.equal(stripFence("```ts\nx = 1;\n`"), "x = 1;");
    assert.equal(stripFence("x = 1;"), "x = 1;");
    assert.equal(finalRewrite("```\nx = 1;\n```", "y;\n"), "x = 1;\n");
    assert.equal(finalRewrite("x = 1;\n", "y;"), "x = 1;");
  });
});
