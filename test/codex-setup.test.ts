/**
 * `spark setup codex`: the Codex provider settings and model catalog as product files. The real
 * Codex CLI (`@openai/codex`), given nothing but what the command wrote into a fresh CODEX_HOME,
 * runs a task against a real Spark server (script engine): a shell command and an apply_patch.
 * Then the merge: a user's own config.toml keeps every line of its own, a setting that says
 * something else is refused (exit 2, nothing written) unless --force, and a second run changes nothing.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { generateKey, KeyRing } from "../src/core/keys.js";
import { freshDir, runToExit } from "./helpers/cli.js";
import { CODEX_SKIP, codexExec, codexTaskScript } from "./helpers/codex.js";
import { startScriptServer } from "./helpers/servers.js";

const SCRIPT = codexTaskScript("echo hello from spark > cmd-out.txt", "Done.");

/** Only CODEX_HOME: no config but what `spark setup codex` wrote, no API key in the environment. */
const codexRun = (home: string, workspace: string, prompt: string, env: Record<string, string> = {}) =>
  codexExec({ home, workspace, prompt, env });

describe("spark setup codex with the real Codex CLI", { skip: CODEX_SKIP }, () => {
  test("codex exec works against the server with only what spark setup codex wrote", async () => {
    const server = await startScriptServer(SCRIPT);
    try {
      const home = join(freshDir("codex-home-"), "codex");
      const workspace = freshDir("codex-ws-");
      const setup = await runToExit(["setup", "codex", "--server", server.url, "--codex-home", home]);
      assert.equal(setup.code, 0, setup.stderr);
      assert.ok(existsSync(join(home, "spark-models.json")), setup.stdout);
      assert.doesNotMatch(readFileSync(join(home, "config.toml"), "utf8"), /env_key/, "no keys: no env_key");

      const run = await codexRun(home, workspace, "Create hello.txt.");
      assert.equal(run.code, 0, `codex failed; stderr:\n${run.stderr}`);
      const items = run.events.filter((e) => e.type === "item.completed").map((e) => e.item!);
      assert.deepEqual(
        items.filter((item) => item.type === "error"),
        [],
        "no error items: the catalog knows the model",
      );
      assert.equal(items.find((item) => item.type === "command_execution")?.exit_code, 0);
      assert.equal(readFileSync(join(workspace, "cmd-out.txt"), "utf8"), "hello from spark\n");
      assert.equal(readFileSync(join(workspace, "hello.txt"), "utf8"), "hi\n", "apply_patch was offered");
      assert.equal(run.events.at(-1)?.type, "turn.completed");
    } finally {
      await server.close();
    }
  });

  test("a server that needs a key gets env_key, and codex sends the key from it", async () => {
    const { key, hash } = generateKey();
    const server = await startScriptServer(SCRIPT, undefined, {
      keys: new KeyRing([{ id: "tester", hash }]),
    });
    try {
      const home = join(freshDir("codex-home-"), "codex");
      const workspace = freshDir("codex-ws-");
      const setup = await runToExit(["setup", "codex", "--server", server.url, "--codex-home", home]);
      assert.equal(setup.code, 0, setup.stderr);
      assert.match(readFileSync(join(home, "config.toml"), "utf8"), /^env_key = "SPARK_API_KEY"$/m);
      assert.match(setup.stdout, /SPARK_API_KEY/);
      const run = await codexRun(home, workspace, "Create hello.txt.", { SPARK_API_KEY: key });
      assert.equal(run.code, 0, `codex failed; stderr:\n${run.stderr}`);
      assert.equal(readFileSync(join(workspace, "hello.txt"), "utf8"), "hi\n");
    } finally {
      await server.close();
    }
  });
});

describe("spark setup codex merges into an existing config.toml", () => {
  const USER_CONFIG = `# my settings
model = "gpt-5"
approval_policy = "on-request"

[tui]
notifications = true

[model_providers.spark]
base_url = "http://127.0.0.1:8484/v1"
request_max_retries = 2
`;

  test("a setting of the user's that says something else is refused (exit 2), nothing written", async () => {
    const home = freshDir("codex-home-");
    writeFileSync(join(home, "config.toml"), USER_CONFIG);
    const { code, stderr } = await runToExit([
      "setup",
      "codex",
      "--server",
      "http://127.0.0.1:9",
      "--codex-home",
      home,
    ]);
    assert.equal(code, 2, stderr);
    assert.match(stderr, /model = "gpt-5" \(yours\) would become model = "spark"/);
    assert.match(stderr, /base_url = "http:\/\/127\.0\.0\.1:8484\/v1" \(yours\) would become/);
    assert.match(stderr, /--force/);
    assert.equal(readFileSync(join(home, "config.toml"), "utf8"), USER_CONFIG);
    assert.ok(!existsSync(join(home, "spark-models.json")));
  });

  test("--dry-run prints the changes and writes nothing", async () => {
    const home = freshDir("codex-home-");
    const { code, stdout, stderr } = await runToExit([
      "setup",
      "codex",
      "--server",
      "http://127.0.0.1:9",
      "--codex-home",
      home,
      "--dry-run",
    ]);
    assert.equal(code, 0, stderr);
    assert.match(stdout, /would create .*config\.toml/);
    assert.match(stdout, /wire_api = "responses"/);
    assert.ok(!existsSync(join(home, "config.toml")));
  });

  test("--force replaces only the conflicting lines, keeps the rest and a backup; a second run changes nothing", async () => {
    const home = freshDir("codex-home-");
    writeFileSync(join(home, "config.toml"), USER_CONFIG);
    const args = ["setup", "codex", "--server", "http://127.0.0.1:9", "--codex-home", home];
    const forced = await runToExit([...args, "--force"]);
    assert.equal(forced.code, 0, forced.stderr);
    const text = readFileSync(join(home, "config.toml"), "utf8");
    for (const kept of [
      "# my settings",
      'approval_policy = "on-request"',
      "[tui]",
      "notifications = true",
      "request_max_retries = 2",
    ])
      assert.ok(text.includes(kept), `lost ${kept}:\n${text}`);
    assert.match(text, /^model = "spark"$/m);
    assert.doesNotMatch(text, /gpt-5/);
    assert.match(text, /^base_url = "http:\/\/127\.0\.0\.1:9\/v1"$/m);
    assert.match(text, /^wire_api = "responses"$/m);
    assert.equal(text.match(/^\[model_providers\.spark\]$/gm)?.length, 1);
    // Top-level keys stay above the first table (below it they would belong to [tui]).
    assert.ok(text.indexOf("model_provider =") < text.indexOf("[tui]"), text);
    assert.equal(readFileSync(join(home, "config.toml.spark-backup"), "utf8"), USER_CONFIG);

    const again = await runToExit(args);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.stdout, /already point Codex at/);
    assert.equal(readFileSync(join(home, "config.toml"), "utf8"), text);
  });
});
