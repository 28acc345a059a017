/**
 * MCP servers' start and names, against real server processes (test/fixtures/mcp/test-server.mjs,
 * built with the official SDK): a slow first start (an `npx -y` download) is waited for as long
 * as it takes while "starting…" is reported, a turn goes on without it after its wait; `spark mcp
 * list` exits 1 when an enabled server failed; a status is reported once; tool names never collide.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { test } from "node:test";
import { McpManager, type McpServerStatus } from "../src/agent/mcp/manager.js";
import { toolName, uniqueToolNames } from "../src/agent/mcp/tool-names.js";
import { file, freshDir, REPO_ROOT, runToExit } from "./helpers/cli.js";

const TEST_SERVER = join(REPO_ROOT, "test/fixtures/mcp/test-server.mjs");
const server = (mode: string) => ({ command: process.execPath, args: [TEST_SERVER, mode] });

function config(servers: Record<string, unknown>): string {
  return file(`mcp-${randomUUID()}.json`, JSON.stringify({ mcpServers: servers }));
}

test("a slow first start: the turn goes on without its tools after its wait; they join once it is ready", async () => {
  const statuses: McpServerStatus[] = [];
  const manager = new McpManager(
    { slow: server("slow-3000"), quick: server("tools") },
    { cwd: freshDir("ws-"), startupWaitMs: 500, onStatus: (status) => statuses.push(status) },
  );
  try {
    await manager.ready();
    const byName = new Map(manager.list().map((status) => [status.name, status]));
    assert.equal(byName.get("slow")!.state, "starting", "still starting: not failed, not killed");
    assert.ok(
      statuses.some((status) => status.name === "slow" && status.turnWentOn === true),
      "the user is told the turn goes on without it",
    );
    await manager.settled();
    assert.equal(manager.list().find((status) => status.name === "slow")!.state, "ready");
    const names = manager.definitions().map((definition) => definition.name);
    assert.ok(names.includes("mcp__slow__add") && names.includes("mcp__quick__add"), names.join(", "));
  } finally {
    await manager.close();
  }
});

test("spark mcp list waits for a slow start, saying starting… meanwhile; exit 0 when all started", async () => {
  const run = await runToExit(["mcp", "list", "--config", config({ slow: server("slow-7000") })]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stdout, /^slow {2}stdio {2}ready {2}5 tools$/m);
  assert.match(run.stderr, /MCP server slow: starting… \(\d+ s\)/);
});

test("spark mcp list exits 1 when an enabled server failed (a disabled one does not count)", async () => {
  const run = await runToExit([
    "mcp",
    "list",
    "--config",
    config({ good: server("tools"), bad: server("crash"), off: { ...server("crash"), enabled: false } }),
  ]);
  assert.equal(run.code, 1, run.stderr);
  assert.match(run.stdout, /^bad {2}stdio {2}failed: /m);
  assert.match(run.stdout, /^good {2}stdio {2}ready/m);
  assert.match(run.stdout, /^off {2}stdio {2}disabled/m);
  const disabledOnly = await runToExit([
    "mcp",
    "list",
    "--config",
    config({ off: { ...server("crash"), enabled: false } }),
  ]);
  assert.equal(disabledOnly.code, 0, disabledOnly.stderr);
});

test("a server that announces an unchanged tool list is reported once; a changed one again", async () => {
  const lines: string[] = [];
  let sixTools: () => void = () => {};
  const six = new Promise<void>((resolve) => (sixTools = resolve));
  const manager = new McpManager(
    { relist: server("relist") },
    {
      cwd: freshDir("ws-"),
      onStatus: (status) => {
        lines.push(`${status.state} ${status.tools.length}`);
        if (status.tools.length === 6) sixTools();
      },
    },
  );
  try {
    await manager.settled();
    await six;
    assert.deepEqual(
      lines.filter((line) => !line.startsWith("starting")),
      ["ready 5", "ready 6"],
    );
  } finally {
    await manager.close();
  }
});

test("a server name with '__' is refused: mcp__a__b__c would name two tools", async () => {
  const run = await runToExit(["mcp", "list", "--config", config({ a__b: server("tools") })]);
  assert.equal(run.code, 2, run.stderr);
  assert.match(run.stderr, /mcpServers\.a__b: .*must not contain '__'/);
});

test("tool names that meet after cleaning or cutting get a suffix: one name, one tool", () => {
  assert.equal(toolName("a", "b.c"), "mcp__a__b_c");
  const long = "x".repeat(80);
  assert.deepEqual(
    uniqueToolNames([
      { server: "a", tool: "b.c" },
      { server: "a", tool: "b_c" },
      { server: "a_", tool: "_b" },
      { server: "a", tool: "__b" },
      { server: "s", tool: `${long}1` },
      { server: "s", tool: `${long}2` },
    ]),
    [
      "mcp__a__b_c",
      "mcp__a__b_c_2",
      "mcp__a____b",
      "mcp__a____b_2",
      `mcp__s__${long}`.slice(0, 64),
      `${`mcp__s__${long}`.slice(0, 62)}_2`,
    ],
  );
});

test("colliding tools of two servers each reach their own server", async () => {
  // `mcp__p___add` starts with `mcp__p__` too: the exact name decides, not the prefix.
  const manager = new McpManager({ p: server("tools"), p_: server("tools") }, { cwd: freshDir("ws-") });
  try {
    await manager.settled();
    const names = manager.definitions().map((definition) => definition.name as string);
    assert.equal(new Set(names).size, names.length, names.join(", "));
    assert.equal(manager.serverOf("mcp__p__add"), "p");
    assert.equal(manager.serverOf("mcp__p___add"), "p_");
    const result = await manager.call("mcp__p___add", { a: 2, b: 3 }, new AbortController().signal);
    assert.equal(result.text, "5");
  } finally {
    await manager.close();
  }
});
