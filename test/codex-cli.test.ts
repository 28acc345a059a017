/**
 * OpenAI's Codex CLI (`@openai/codex` 0.171, unmodified) end to end against Spark with the script
 * engine: `codex exec --json` runs a shell command through its `exec_command` tool and adds a file
 * through its `apply_patch` tool, over WebSocket (`supports_websockets = true`) and over HTTP, and
 * calls an MCP server's tool, which Codex 0.171 offers inside a `namespace` tool.
 *
 * Codex needs a model catalog entry for a custom model (without one it offers no `apply_patch`);
 * the catalog is the one `spark setup codex` writes (`codexCatalog()`), for `spark` and for
 * OpenAI's names of the tiers (`gpt-5.3-codex-spark`, `gpt-5.3-codex`), which Spark serves too.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { codexCatalog } from "../src/cli/setup-command.js";
import type { SparkServer } from "../src/server/http-server.js";
import { CODEX_SKIP, codexExec, codexTaskScript, type CodexExec } from "./helpers/codex.js";
import { startScriptServer } from "./helpers/servers.js";

const CATALOG = join(mkdtempSync(join(tmpdir(), "spark-codex-catalog-")), "spark-models.json");
writeFileSync(CATALOG, JSON.stringify(codexCatalog()));

/** The model's side of the task: run a command, add a file with apply_patch (a freeform tool), report. */
const SCRIPT = codexTaskScript(
  "echo hello from spark > cmd-out.txt && echo hello",
  "Done: ran echo and created hello.txt.",
);

/** An MCP server's tool: Codex offers `add` in the namespace `mcp__fixture`; the model calls it by its qualified name. */
const MCP_SCRIPT = [
  {
    output: [{ type: "function_call", name: "mcp__fixture__add", arguments: JSON.stringify({ a: 2, b: 3 }) }],
  },
  { output: [{ type: "message", text: "2 + 3 = 5." }] },
];
const MCP_FIXTURE = fileURLToPath(new URL("./fixtures/mcp/test-server.mjs", import.meta.url));

function config(baseUrl: string, websockets: boolean, extra = ""): string {
  return `model = "spark"
model_provider = "spark"
model_catalog_json = ${JSON.stringify(CATALOG)}
approval_policy = "never"
sandbox_mode = "danger-full-access"
check_for_update_on_startup = false
web_search = "disabled"

[model_providers.spark]
name = "Spark"
base_url = "${baseUrl}/v1"
wire_api = "responses"
env_key = "SPARK_API_KEY"
supports_websockets = ${websockets}
request_max_retries = 0
stream_max_retries = 0

# Nothing may reach OpenAI, GitHub or ChatGPT, and a dead server must fail instead of retrying forever.
[features]
plugins = false
apps = false
remote_plugin = false
image_generation = false
goals = false
browser_use = false
computer_use = false
tool_suggest = false
unbounded_connection_retries = false

[analytics]
enabled = false

[agents]
enabled = false
${extra}`;
}

interface CodexRun extends CodexExec {
  workspace: string;
}

const dirs: string[] = [dirname(CATALOG)];
after(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

async function runCodex(
  server: SparkServer,
  websockets: boolean,
  prompt: string,
  args: readonly string[] = [],
  extraConfig = "",
): Promise<CodexRun> {
  const home = mkdtempSync(join(tmpdir(), "spark-codex-home-"));
  const workspace = mkdtempSync(join(tmpdir(), "spark-codex-ws-"));
  dirs.push(home, workspace);
  writeFileSync(join(home, "config.toml"), config(server.url, websockets, extraConfig));
  const run = await codexExec({ home, workspace, prompt, args, env: { SPARK_API_KEY: "sk-spark-test" } });
  return { ...run, workspace };
}

function completed(run: CodexRun, type: string): Record<string, unknown>[] {
  return run.events.filter((e) => e.type === "item.completed" && e.item?.type === type).map((e) => e.item!);
}

function counter(metrics: string, name: string, labels = ""): number {
  const line = metrics.split("\n").find((l) => l.startsWith(`${name}${labels} `));
  return Number(line?.split(" ")[1] ?? 0);
}

describe("Codex CLI end to end", { skip: CODEX_SKIP }, () => {
  for (const websockets of [true, false]) {
    test(`codex exec --json runs a command and applies a patch over ${websockets ? "WebSocket" : "HTTP"}`, async () => {
      const server = await startScriptServer(SCRIPT);
      try {
        const run = await runCodex(server, websockets, "Say hello, then create hello.txt.");
        assert.equal(run.code, 0, `codex failed; stderr:\n${run.stderr}`);
        assert.deepEqual(completed(run, "error"), [], "no error items (no fallback message)");
        assert.doesNotMatch(run.stderr, /falling back/i);

        const [command] = completed(run, "command_execution");
        assert.match(String(command?.command), /echo hello from spark > cmd-out\.txt/);
        assert.equal(command?.exit_code, 0);
        assert.equal(command?.aggregated_output, "hello\n");
        const [change] = completed(run, "file_change");
        assert.equal((change?.changes as { kind: string }[] | undefined)?.[0]?.kind, "add");
        const messages = completed(run, "agent_message").map((m) => m.text);
        assert.deepEqual(messages, ["Running a command.", "Done: ran echo and created hello.txt."]);
        assert.equal(run.events.at(-1)?.type, "turn.completed");

        assert.equal(readFileSync(join(run.workspace, "cmd-out.txt"), "utf8"), "hello from spark\n");
        assert.equal(readFileSync(join(run.workspace, "hello.txt"), "utf8"), "hi\n");

        const metrics = await server.metrics.text();
        const upgrades = counter(metrics, "spark_websocket_connections_total");
        const posts = counter(metrics, "spark_http_requests_total", '{route="/v1/responses",status="200"}');
        if (websockets) {
          assert.ok(upgrades >= 1, "Codex connected over WebSocket");
          assert.equal(posts, 0, "and never fell back to HTTP");
        } else {
          assert.equal(upgrades, 0);
          assert.equal(posts, 3, "one POST per model turn");
        }
      } finally {
        await server.close();
      }
    });
  }

  for (const websockets of [true, false])
    test(`an MCP server's tool, offered in a namespace, is called by namespace and name, and the turn goes on over ${websockets ? "WebSocket" : "HTTP"}`, async () => {
      const server = await startScriptServer(MCP_SCRIPT);
      try {
        const mcp = `\n[mcp_servers.fixture]\ncommand = ${JSON.stringify(process.execPath)}\nargs = [${JSON.stringify(MCP_FIXTURE)}, "tools"]\n`;
        const run = await runCodex(server, websockets, "Add 2 and 3 with the fixture's tool.", [], mcp);
        assert.equal(run.code, 0, `codex failed; stderr:\n${run.stderr}`);
        assert.deepEqual(completed(run, "error"), [], "no error items");
        const [call] = completed(run, "mcp_tool_call");
        assert.equal(call?.server, "fixture", JSON.stringify(run.events));
        assert.equal(call?.tool, "add");
        assert.equal(call?.status, "completed");
        assert.match(JSON.stringify(call?.result), /"text":"5"/);
        assert.deepEqual(
          completed(run, "agent_message").map((m) => m.text),
          ["2 + 3 = 5."],
        );
        assert.equal(run.events.at(-1)?.type, "turn.completed");
      } finally {
        await server.close();
      }
    });

  test("codex exec --model gpt-5.3-codex-spark (OpenAI's name) is served by the spark tier", async () => {
    const server = await startScriptServer(SCRIPT);
    try {
      const run = await runCodex(server, true, "Say hello, then create hello.txt.", [
        "--model",
        "gpt-5.3-codex-spark",
      ]);
      assert.equal(run.code, 0, `codex failed; stderr:\n${run.stderr}`);
      assert.doesNotMatch(run.stderr, /model_not_found/);
      assert.deepEqual(completed(run, "error"), [], "no error items (the catalog knows the name)");
      assert.equal(completed(run, "command_execution")[0]?.exit_code, 0);
      assert.equal(readFileSync(join(run.workspace, "hello.txt"), "utf8"), "hi\n");
      assert.deepEqual(
        completed(run, "agent_message").map((m) => m.text),
        ["Running a command.", "Done: ran echo and created hello.txt."],
      );
      assert.equal(run.events.at(-1)?.type, "turn.completed");
      const metrics = await server.metrics.text();
      assert.ok(counter(metrics, "spark_websocket_connections_total") >= 1, "over WebSocket");
    } finally {
      await server.close();
    }
  });
});
