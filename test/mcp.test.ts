/**
 * The agent's MCP client end to end: `spark exec --json` (a real CLI process) with MCP servers from
 * the config file: the reference server `@modelcontextprotocol/server-everything` over stdio, a
 * streamable-HTTP server built with the SDK in this test, and test/fixtures/mcp/test-server.mjs
 * (the SDK over stdio; also a server that crashes at start and one that never answers). The model
 * is scripted: a fake OpenAI-compatible upstream that records what it is sent (to see the tools
 * and the tool outputs the model gets), or the script engine.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { once } from "node:events";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";
import { decideMcpTool } from "../src/agent/tools/approval.js";
import type { ThreadItem } from "../src/agent/tools/index.js";
import WebSocket from "ws";
import type { LogEntry, ServerMessage } from "../src/app/protocol.js";
import {
  file,
  firstLine,
  freshDir,
  jsonLines,
  REPO_ROOT,
  runToExit,
  spawnCli,
  startScriptServe,
  stop,
} from "./helpers/cli.js";
import { scriptAppArgs } from "./helpers/app.js";
import { distMissing, TmuxServer, tmuxMissing } from "./helpers/tmux.js";

const EVERYTHING = join(REPO_ROOT, "node_modules/@modelcontextprotocol/server-everything/dist/index.js");
const TEST_SERVER = join(REPO_ROOT, "test/fixtures/mcp/test-server.mjs");

interface ExecEvent {
  type: string;
  item?: ThreadItem;
  error?: { message: string };
}

type Turn = { text: string } | { call: string; args: Record<string, unknown> };

/** A fake Chat Completions upstream: answers request N with turn N, and records every request. */
async function scriptedUpstream(turns: readonly Turn[]): Promise<{
  url: string;
  requests: Record<string, unknown>[];
  close(): void;
}> {
  const requests: Record<string, unknown>[] = [];
  const chunk = (delta: Record<string, unknown>, finish: string | null = null): string =>
    `data: ${JSON.stringify({ id: "u1", object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
  const server = http.createServer((req, res) => {
    if (req.url === "/v1/models") {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ object: "list", data: [{ id: "fake-model", object: "model" }] }));
      return;
    }
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.on("end", () => {
      requests.push(JSON.parse(body) as Record<string, unknown>);
      const turn = turns[requests.length - 1] ?? { text: "done" };
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.write(chunk({ role: "assistant", content: "" }));
      if ("text" in turn) {
        res.write(chunk({ content: turn.text }));
        res.write(chunk({}, "stop"));
      } else {
        res.write(
          chunk({
            tool_calls: [
              {
                index: 0,
                id: `call_${requests.length}`,
                type: "function",
                function: { name: turn.call, arguments: JSON.stringify(turn.args) },
              },
            ],
          }),
        );
        res.write(chunk({}, "tool_calls"));
      }
      res.end("data: [DONE]\n\n");
    });
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

/** A script-engine script: one model turn per entry (text, or one function call). */
function script(turns: readonly Turn[]): string {
  const lines = turns.map((turn) =>
    JSON.stringify({
      output: [
        "text" in turn
          ? { type: "message", text: turn.text }
          : { type: "function_call", name: turn.call, arguments: JSON.stringify(turn.args) },
      ],
    }),
  );
  return file(`mcp-script-${randomUUID()}.jsonl`, lines.join("\n") + "\n");
}

function config(body: Record<string, unknown>): string {
  return file(`mcp-config-${randomUUID()}.json`, JSON.stringify(body));
}

async function exec(
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<{ code: number | string; stderr: string; events: ExecEvent[] }> {
  const workspace = freshDir("ws-");
  const run = await runToExit(["exec", "--json", "-C", workspace, ...args], {
    SPARK_HOME: freshDir("home-"),
    ...env,
  });
  return { code: run.code, stderr: run.stderr, events: jsonLines<ExecEvent>(run.stdout) };
}

function toolItems(events: readonly ExecEvent[]): (ThreadItem & { type: "tool_call" })[] {
  return events
    .filter((e) => e.type === "item.completed" && e.item?.type === "tool_call")
    .map((e) => e.item as ThreadItem & { type: "tool_call" });
}

/** The text of the tool-role messages of a Chat Completions request (the tool outputs the model saw). */
function toolOutputs(request: Record<string, unknown>): string[] {
  const messages = request.messages as { role: string; content: unknown }[];
  return messages.filter((m) => m.role === "tool").map((m) => String(m.content));
}

/** Resolves once no process of `pids` is alive (fails after a generous safety limit). */
async function allGone(pids: readonly number[]): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const alive = pids.filter((pid) => {
      try {
        process.kill(pid, 0);
        return true;
      } catch {
        return false;
      }
    });
    if (alive.length === 0) return;
    if (Date.now() > deadline) {
      for (const pid of alive) process.kill(pid, "SIGKILL");
      assert.fail(`MCP server processes outlived the session: ${alive.join(", ")}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function pidsIn(path: string): number[] {
  return existsSync(path)
    ? readFileSync(path, "utf8")
        .split("\n")
        .filter((l) => l !== "")
        .map(Number)
    : [];
}

describe("MCP servers in spark exec", { timeout: 240_000 }, () => {
  test("server-everything over stdio: its tools reach the model with their schemas, echo and get-sum run, their output is the tool output", async () => {
    const upstream = await scriptedUpstream([
      { call: "mcp__everything__echo", args: { message: "hello from spark" } },
      { call: "mcp__everything__get-sum", args: { a: 2, b: 40 } },
      { text: "The sum is 42." },
    ]);
    try {
      const cfg = config({
        mcpServers: { everything: { command: process.execPath, args: [EVERYTHING], trusted: true } },
      });
      const run = await exec([
        "--engine",
        "openai",
        "--upstream",
        upstream.url,
        "--config",
        cfg,
        "use the tools",
      ]);
      assert.equal(run.code, 0, run.stderr);
      const tools = upstream.requests[0]!.tools as {
        type: string;
        function: { name: string; parameters: Record<string, unknown> };
      }[];
      const echo = tools.find((t) => t.function.name === "mcp__everything__echo");
      assert.ok(echo, `the model is offered the echo tool: ${tools.map((t) => t.function.name).join(", ")}`);
      assert.deepEqual(Object.keys((echo.function.parameters.properties ?? {}) as object), ["message"]);
      assert.deepEqual(echo.function.parameters.required, ["message"]);
      const sum = tools.find((t) => t.function.name === "mcp__everything__get-sum");
      assert.deepEqual(Object.keys((sum!.function.parameters.properties ?? {}) as object).sort(), ["a", "b"]);
      // The first request already carries the shell tool too: MCP tools are added, not swapped in.
      assert.ok(tools.some((t) => t.function.name === "shell"));

      assert.match(toolOutputs(upstream.requests[1]!).join("\n"), /hello from spark/);
      assert.match(toolOutputs(upstream.requests[2]!).at(-1)!, /\b42\b/);
      const items = toolItems(run.events);
      assert.deepEqual(
        items.map((i) => [i.tool, i.status]),
        [
          ["mcp__everything__echo", "completed"],
          ["mcp__everything__get-sum", "completed"],
        ],
      );
      assert.match(run.stderr, /MCP server everything: \d+ tools/);
    } finally {
      upstream.close();
    }
  });

  describe("a streamable-HTTP server built with the SDK", () => {
    let server: http.Server;
    let url = "";
    const seenAuth: (string | undefined)[] = [];

    before(async () => {
      server = http.createServer((req, res) => {
        seenAuth.push(req.headers.authorization);
        // Stateless: one MCP server and transport per request, as the SDK's examples do.
        const mcp = new McpServer({ name: "remote", version: "1.0.0" });
        mcp.registerTool(
          "multiply",
          { description: "Multiplies two numbers", inputSchema: { a: z.number(), b: z.number() } },
          async ({ a, b }) => ({ content: [{ type: "text", text: `product: ${a * b}` }] }),
        );
        const transport = new StreamableHTTPServerTransport({});
        res.on("close", () => {
          void transport.close();
          void mcp.close();
        });
        let body = "";
        req.on("data", (c: Buffer) => (body += c.toString()));
        req.on("end", () => {
          void mcp
            .connect(transport)
            .then(() => transport.handleRequest(req, res, body === "" ? undefined : JSON.parse(body)));
        });
      });
      server.listen(0, "127.0.0.1");
      await once(server, "listening");
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
    });
    after(() => {
      server.closeAllConnections();
      server.close();
    });

    test("its tool is called with the configured headers and its result comes back", async () => {
      const cfg = config({
        mcpServers: { remote: { url, headers: { authorization: "Bearer remote-token" }, trusted: true } },
      });
      const run = await exec([
        "--engine",
        "script",
        "--script",
        script([{ call: "mcp__remote__multiply", args: { a: 6, b: 7 } }, { text: "42" }]),
        "--config",
        cfg,
        "multiply",
      ]);
      assert.equal(run.code, 0, run.stderr);
      const [item] = toolItems(run.events);
      assert.equal(item?.status, "completed", JSON.stringify(item));
      assert.equal(item?.result, "product: 42");
      assert.ok(seenAuth.length > 0 && seenAuth.every((a) => a === "Bearer remote-token"), String(seenAuth));
    });
  });

  test("a server that crashes at start and one that never answers cost only their own tools; nothing outlives the session", async () => {
    const pidFile = join(freshDir("pids-"), "pids");
    const marker = join(freshDir("marks-"), "called");
    const cfg = config({
      mcpServers: {
        good: { command: process.execPath, args: [TEST_SERVER, "tools", pidFile], trusted: true },
        crashy: { command: process.execPath, args: [TEST_SERVER, "crash", pidFile], trusted: true },
        stuck: {
          command: process.execPath,
          args: [TEST_SERVER, "hang", pidFile],
          trusted: true,
          // Long enough for a node process to start on a loaded machine (it records its pid).
          startupTimeoutMs: 5000,
        },
      },
    });
    const run = await exec([
      "--engine",
      "script",
      "--script",
      script([
        { call: "mcp__crashy__anything", args: {} },
        { call: "mcp__stuck__anything", args: {} },
        { call: "mcp__good__mark", args: { path: marker } },
        { text: "done" },
      ]),
      "--config",
      cfg,
      "go",
    ]);
    assert.equal(run.code, 0, `the session goes on: ${run.stderr}`);
    const [crashy, stuck, good] = toolItems(run.events);
    assert.equal(crashy?.status, "failed");
    assert.match(crashy!.result!, /MCP server "crashy" is not available: .*cannot open its database/);
    assert.equal(stuck?.status, "failed");
    assert.match(stuck!.result!, /MCP server "stuck" is not available: did not start within 5000 ms/);
    assert.equal(good?.status, "completed", JSON.stringify(good));
    assert.ok(existsSync(marker), "the healthy server's tool ran");
    // The user is told why (stderr in exec; a line in the TUI).
    assert.match(
      run.stderr,
      /MCP server crashy failed, its tools are unavailable: .*cannot open its database/,
    );
    assert.match(run.stderr, /MCP server stuck failed/);
    assert.equal(run.stderr.match(/MCP server crashy failed/g)?.length, 1, "said once");
    const pids = pidsIn(pidFile);
    assert.equal(pids.length, 3, "each server started once");
    await allGone(pids);
  });

  test("a server that crashes during a call, or whose call hangs past toolTimeoutMs, fails that call with a clear error", async () => {
    const pidFile = join(freshDir("pids-"), "pids");
    const cfg = config({
      mcpServers: {
        fragile: { command: process.execPath, args: [TEST_SERVER, "tools", pidFile], trusted: true },
        slow: {
          command: process.execPath,
          args: [TEST_SERVER, "tools", pidFile],
          trusted: true,
          toolTimeoutMs: 1000,
        },
      },
    });
    const run = await exec([
      "--engine",
      "script",
      "--script",
      script([
        { call: "mcp__slow__sleep", args: {} },
        { call: "mcp__fragile__die", args: {} },
        { call: "mcp__fragile__add", args: { a: 1, b: 2 } },
        { call: "mcp__slow__add", args: { a: 1, b: 2 } },
        { call: "mcp__slow__picture", args: {} },
        { text: "done" },
      ]),
      "--config",
      cfg,
      "go",
    ]);
    assert.equal(run.code, 0, run.stderr);
    const [sleep, die, afterCrash, stillThere, picture] = toolItems(run.events);
    assert.equal(sleep?.status, "failed");
    assert.match(sleep!.result!, /MCP server "slow" did not answer sleep within 1000 ms \(toolTimeoutMs\)/);
    assert.equal(die?.status, "failed");
    assert.match(die!.result!, /MCP server "fragile"/);
    assert.equal(afterCrash?.status, "failed");
    assert.match(afterCrash!.result!, /MCP server "fragile" is not available: .*crashing on purpose/);
    assert.equal(stillThere?.status, "completed", "the other server's tools still work");
    assert.equal(stillThere?.result, "3");
    assert.equal(
      picture?.result,
      "here it is\n[image/png, 70 bytes: not shown, no model on this server can see images]",
    );
    assert.match(run.stderr, /MCP server fragile failed/);
    await allGone(pidsIn(pidFile));
  });

  test("a tool's image goes to the model as an image part when the tier sees (auto routes it), else a placeholder says why", async () => {
    const pixel =
      "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";
    const run = async (tier: string) => {
      // The text-only model calls the tool; the one that sees answers once the image is in.
      const text = await scriptedUpstream([{ call: "mcp__pics__picture", args: {} }, { text: "unseen" }]);
      const eyes = await scriptedUpstream([{ text: "a single pixel" }]);
      try {
        const cfg = config({
          models: {
            spark: { engine: "openai", upstream: text.url },
            deep: { engine: "openai", upstream: text.url, tier: "deep" },
            eyes: { engine: "openai", upstream: eyes.url, vision: true },
          },
          mcpServers: { pics: { command: process.execPath, args: [TEST_SERVER, "tools"], trusted: true } },
        });
        const result = await exec(["--config", cfg, "--tier", tier, "show me the picture"]);
        return { ...result, text: text.requests, eyes: eyes.requests };
      } finally {
        text.close();
        eyes.close();
      }
    };

    const auto = await run("auto");
    assert.equal(auto.code, 0, auto.stderr);
    assert.equal(auto.text.length, 1, "the request without an image went to the text-only model");
    assert.equal(auto.eyes.length, 1, "the tool result with the image went to the model that sees");
    const messages = auto.eyes[0]!.messages as { role: string; content: unknown }[];
    assert.deepEqual(toolOutputs(auto.eyes[0]!), ["here it is"]);
    assert.ok(
      messages.some(
        (m) =>
          Array.isArray(m.content) &&
          (m.content as unknown[]).some(
            (part) =>
              JSON.stringify(part) === JSON.stringify({ type: "image_url", image_url: { url: pixel } }),
          ),
      ),
      JSON.stringify(messages),
    );
    const [shown] = toolItems(auto.events);
    assert.equal(shown?.result, "here it is\n[image/png, 70 bytes: sent to the model]");

    const spark = await run("spark");
    assert.equal(spark.code, 0, spark.stderr);
    assert.equal(spark.eyes.length, 0);
    assert.equal(spark.text.length, 2, "no 400: the turn went on with the placeholder");
    const reason =
      "here it is\n[image/png, 70 bytes: not shown, the spark tier cannot see images; /tier auto routes to a model that can]";
    assert.deepEqual(toolOutputs(spark.text[1]!), [reason]);
    assert.ok(!JSON.stringify(spark.text[1]).includes("image_url"));
  });

  test("under approval never, an untrusted server's tool is refused with a clear tool error and never runs", async () => {
    const marker = join(freshDir("marks-"), "called");
    const cfg = config({
      mcpServers: { plain: { command: process.execPath, args: [TEST_SERVER, "tools"] } },
    });
    const run = await exec([
      "--engine",
      "script",
      "--script",
      script([{ call: "mcp__plain__mark", args: { path: marker } }, { text: "ok" }]),
      "--config",
      cfg,
      "--approval",
      "never",
      "go",
    ]);
    assert.equal(run.code, 0, run.stderr);
    const [item] = toolItems(run.events);
    assert.equal(item?.status, "failed");
    assert.match(
      item!.result!,
      /MCP server "plain" is not trusted.*not possible in non-interactive mode.*"trusted": true/s,
    );
    assert.equal(existsSync(marker), false, "the tool did not run");
  });

  test("the user config SPARK_HOME/config.json is read when no config is given; enabled: false starts nothing", async () => {
    const home = freshDir("home-");
    const pidFile = join(freshDir("pids-"), "pids");
    writeFileSync(
      join(home, "config.json"),
      JSON.stringify({
        mcpServers: {
          mine: { command: process.execPath, args: [TEST_SERVER, "tools"], trusted: true },
          off: { command: process.execPath, args: [TEST_SERVER, "tools", pidFile], enabled: false },
        },
      }),
    );
    const run = await exec(
      [
        "--engine",
        "script",
        "--script",
        script([
          { call: "mcp__mine__add", args: { a: 20, b: 22 } },
          { call: "mcp__off__add", args: { a: 1, b: 1 } },
          { text: "ok" },
        ]),
        "go",
      ],
      { SPARK_HOME: home },
    );
    assert.equal(run.code, 0, run.stderr);
    const [mine, off] = toolItems(run.events);
    assert.equal(mine?.result, "42");
    assert.match(off!.result!, /MCP server "off" is disabled in the config/);
    assert.deepEqual(pidsIn(pidFile), []);
  });
});

test("approvals of MCP tools: trusted runs; otherwise ask where someone can answer, refuse under never", () => {
  const server = "s";
  assert.deepEqual(decideMcpTool("never", { server, trusted: true, interactive: false }), { action: "run" });
  assert.deepEqual(decideMcpTool("untrusted", { server, trusted: true, interactive: true }), {
    action: "run",
  });
  assert.equal(decideMcpTool("on-request", { server, trusted: false, interactive: true }).action, "ask");
  assert.equal(decideMcpTool("untrusted", { server, trusted: false, interactive: true }).action, "ask");
  const never = decideMcpTool("never", { server, trusted: false, interactive: true });
  assert.equal(never.action, "refuse");
  assert.match((never as { reason: string }).reason, /approval mode `never` does not ask/);
});

describe("spark mcp list and the config", { timeout: 120_000 }, () => {
  test("shows each server, its state and its tools", async () => {
    const cfg = config({
      mcpServers: {
        everything: { command: process.execPath, args: [EVERYTHING], trusted: true },
        broken: { command: "spark-test-no-such-command" },
        off: { url: "http://127.0.0.1:9/mcp", enabled: false },
      },
    });
    const run = await runToExit(["mcp", "list", "--config", cfg], { SPARK_HOME: freshDir("home-") });
    assert.equal(run.code, 1, `an enabled server failed: ${run.stderr}`);
    assert.match(run.stdout, /^everything {2}stdio {2}ready {2}trusted {2}\d+ tools$/m);
    assert.match(run.stdout, /^ {2}mcp__everything__echo {2}Echoes back the input string$/m);
    assert.match(run.stdout, /^ {2}mcp__everything__get-sum /m);
    assert.match(
      run.stdout,
      /^broken {2}stdio {2}failed: cannot run spark-test-no-such-command: not found$/m,
    );
    assert.match(run.stdout, /^off {2}http {2}disabled$/m);
    const json = await runToExit(["mcp", "list", "--json", "--config", cfg], {
      SPARK_HOME: freshDir("home-"),
    });
    assert.equal(json.code, 1, json.stderr);
    const list = JSON.parse(json.stdout) as { name: string; state: string }[];
    assert.deepEqual(
      list.map((s) => [s.name, s.state]),
      [
        ["everything", "ready"],
        ["broken", "failed"],
        ["off", "disabled"],
      ],
    );
  });

  test("a bad server entry is a config error naming it; spark serve accepts and ignores mcpServers and hooks", async () => {
    const bad = await runToExit(
      ["mcp", "list", "--config", config({ mcpServers: { "bad name!": { command: "x" } } })],
      { SPARK_HOME: freshDir("home-") },
    );
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /mcpServers.*server names are 1-32 letters/);
    const noCommand = await runToExit(
      ["mcp", "list", "--config", config({ mcpServers: { x: { args: ["y"] } } })],
      { SPARK_HOME: freshDir("home-") },
    );
    assert.equal(noCommand.code, 2);
    assert.match(noCommand.stderr, /mcpServers\.x: must be \{"command"/);
    const badArgs = await runToExit(
      ["mcp", "list", "--config", config({ mcpServers: { x: { command: "y", args: "--flag" } } })],
      { SPARK_HOME: freshDir("home-") },
    );
    assert.equal(badArgs.code, 2);
    assert.match(badArgs.stderr, /mcpServers\.x\.args: .*expected array/);
    const cfg = config({
      mcpServers: { everything: { command: process.execPath, args: [EVERYTHING] } },
      hooks: { Stop: [{ command: "true" }] },
    });
    const server = await startScriptServe(script([{ text: "hi" }]), ["--config", cfg]);
    await stop(server);
  });
});

describe("MCP servers in spark app", { timeout: 240_000 }, () => {
  test("a task calls a server's tool; a server that failed is a notice in the task; nothing outlives the app", async () => {
    const pidFile = join(freshDir("pids-"), "pids");
    const cfg = config({
      mcpServers: {
        tools: { command: process.execPath, args: [TEST_SERVER, "tools", pidFile], trusted: true },
        crashy: { command: process.execPath, args: [TEST_SERVER, "crash", pidFile], trusted: true },
      },
    });
    const answers = script([{ call: "mcp__tools__add", args: { a: 40, b: 2 } }, { text: "it is 42" }]);
    const app = spawnCli(["app", ...scriptAppArgs(freshDir("ws-"), answers, "--config", cfg)], {
      SPARK_HOME: freshDir("home-"),
    });
    try {
      const line = await firstLine(app);
      const url = new URL(/^spark app on (\S+) /.exec(line)![1]!);
      const socket = new WebSocket(`ws://${url.host}/app/ws`, { headers: { origin: url.origin } });
      const messages: ServerMessage[] = [];
      let changed: () => void = () => {};
      socket.on("message", (data) => {
        messages.push(JSON.parse(String(data)) as ServerMessage);
        changed();
      });
      await once(socket, "open");
      const until = (predicate: () => boolean): Promise<void> =>
        new Promise((resolve) => {
          if (predicate()) return resolve();
          changed = () => {
            if (predicate()) resolve();
          };
        });
      socket.send(JSON.stringify({ type: "task.create", model: "spark", text: "add them" }));
      const entries = (): LogEntry[] =>
        messages.flatMap((m) => (m.type === "entry" ? [m.entry] : m.type === "task.log" ? m.entries : []));
      const toolDone = (): boolean =>
        entries().some(
          (e) => e.kind === "item" && e.item.type === "tool_call" && e.item.status === "completed",
        );
      const notice = (): boolean =>
        entries().some((e) => e.kind === "notice" && /MCP server crashy failed/.test(e.text));
      await until(() => toolDone() && notice());
      const tool = entries().findLast(
        (e) => e.kind === "item" && e.item.type === "tool_call" && e.item.status === "completed",
      );
      assert.equal(tool?.kind === "item" && tool.item.type === "tool_call" ? tool.item.result : "", "42");
      const failure = entries().find((e) => e.kind === "notice" && /MCP server crashy/.test(e.text));
      assert.match(failure?.kind === "notice" ? failure.text : "", /cannot open its database/);
      socket.terminate();
    } finally {
      await stop(app);
    }
    await allGone(pidsIn(pidFile));
  });

  test("an app task on auto: the tool's image reaches the model that sees", async () => {
    const text = await scriptedUpstream([{ call: "mcp__pics__picture", args: {} }, { text: "unseen" }]);
    const eyes = await scriptedUpstream([{ text: "a single pixel" }]);
    const cfg = config({
      models: {
        spark: { engine: "openai", upstream: text.url },
        deep: { engine: "openai", upstream: text.url, tier: "deep" },
        eyes: { engine: "openai", upstream: eyes.url, vision: true },
      },
      mcpServers: { pics: { command: process.execPath, args: [TEST_SERVER, "tools"], trusted: true } },
    });
    const app = spawnCli(
      ["app", freshDir("ws-"), "--port", "0", "--quiet", "--sandbox", "off", "--config", cfg],
      { SPARK_HOME: freshDir("home-") },
    );
    try {
      const line = await firstLine(app);
      const url = new URL(/^spark app on (\S+) /.exec(line)![1]!);
      const socket = new WebSocket(`ws://${url.host}/app/ws`, { headers: { origin: url.origin } });
      const messages: ServerMessage[] = [];
      let changed: () => void = () => {};
      socket.on("message", (data) => {
        messages.push(JSON.parse(String(data)) as ServerMessage);
        changed();
      });
      await once(socket, "open");
      const entries = (): LogEntry[] =>
        messages.flatMap((m) => (m.type === "entry" ? [m.entry] : m.type === "task.log" ? m.entries : []));
      const answered = (): boolean =>
        entries().some((e) => e.kind === "assistant" && !e.streaming && e.text === "a single pixel");
      socket.send(JSON.stringify({ type: "task.create", model: "auto", text: "show me the picture" }));
      await new Promise<void>((resolve) => {
        if (answered()) return resolve();
        changed = () => {
          if (answered()) resolve();
        };
      });
      const tool = entries().findLast((e) => e.kind === "item" && e.item.type === "tool_call");
      assert.equal(
        tool?.kind === "item" && tool.item.type === "tool_call" ? tool.item.result : "",
        "here it is\n[image/png, 70 bytes: sent to the model]",
      );
      assert.equal(eyes.requests.length, 1);
      assert.match(JSON.stringify(eyes.requests[0]), /"image_url":\{"url":"data:image\/png;base64,/);
      socket.terminate();
    } finally {
      await stop(app);
      text.close();
      eyes.close();
    }
  });
});

describe("MCP servers in the TUI", { skip: tmuxMissing ?? false, timeout: 240_000 }, () => {
  test("an untrusted server's tool asks first (on-request), a failed server is a line on the screen, and quitting stops them all", async (t) => {
    const missing = distMissing();
    if (missing) return t.skip(missing);
    const tmux = new TmuxServer();
    try {
      const pidFile = join(freshDir("pids-"), "pids");
      const cfg = config({
        mcpServers: {
          tools: { command: process.execPath, args: [TEST_SERVER, "tools", pidFile] },
          crashy: { command: process.execPath, args: [TEST_SERVER, "crash", pidFile] },
        },
      });
      const ui = tmux.start({
        args: [
          "--engine",
          "script",
          "--script",
          script([{ call: "mcp__tools__add", args: { a: 19, b: 23 } }, { text: "the sum is 42" }]),
          "--config",
          cfg,
        ],
        cwd: freshDir("ws-"),
        dataDir: freshDir("data-"),
        env: { SPARK_HOME: freshDir("home-") },
      });
      await ui.ready();
      // The UI wraps long lines itself: match across them.
      await ui.waitFor(
        /MCP server crashy failed, its tools are unavailable:[\s\S]*cannot open\s+its\s+database/,
      );
      ui.type("add them");
      ui.press("Enter");
      await ui.waitFor(/Call: mcp__tools__add \{"a":19,"b":23\}/);
      await ui.waitFor(/MCP server "tools" is not trusted/);
      ui.type("y");
      await ui.waitFor("the sum is 42");
      ui.press("C-c");
      ui.press("C-c");
      await ui.waitFor("EXITED");
      await allGone(pidsIn(pidFile));
    } finally {
      tmux.kill();
    }
  });
});
