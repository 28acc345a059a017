/**
 * Hooks that would run code the sandboxed agent can write (a script in the workspace, the
 * project's package.json scripts, a Makefile, an interpreter in the workspace) are refused unless
 * the user's config says `"trustWorkspace": true` for that hook, with a warning at start; hooks
 * that run programs outside the workspace run as before. The judgement on a table of commands,
 * then end to end: `spark exec` with hooks in the user's config, real bash, a real workspace.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { chmodSync, existsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { workspaceCodeOf } from "../src/agent/hooks/workspace-code.js";
import { file, freshDir, runToExit } from "./helpers/cli.js";

test("which hook commands run code from the workspace", () => {
  const workspace = "/home/u/project";
  const refused = [
    "./scripts/guard.sh",
    "scripts/guard.sh --strict",
    "npm run lint --silent",
    "npx eslint .",
    "make check",
    "cargo clippy",
    "pytest -q",
    "bash scripts/check.sh",
    "sh",
    "python3 tools/check.py",
    "python3 -c 'import check'",
    "node -e 'require(\"./x\")'",
    '"$CLAUDE_PROJECT_DIR"/.claude/hooks/check.sh',
    "$SPARK_PROJECT_DIR/hooks/check.sh",
    "timeout 5 ./guard.sh",
    "FOO=1 env -i ./guard.sh",
    "echo start && ./guard.sh",
    "cat | ./guard.sh",
    "bash -c './guard.sh'",
    "echo $(./guard.sh)",
    'echo "$(make -s x)"',
    "/home/u/project/bin/check",
    ". ./env.sh",
    "./gradlew check",
  ];
  for (const command of refused)
    assert.notEqual(workspaceCodeOf(command, workspace), undefined, `refused: ${command}`);
  const allowed = [
    "logger -t spark",
    "~/bin/guard.sh",
    "$HOME/bin/guard.sh",
    "/usr/local/bin/check --strict",
    "jq -r .tool_name >> /tmp/tools.log",
    "notify-send 'Spark is done'",
    'test "$PWD" = "$SPARK_PROJECT_DIR"',
    "(cat; echo) >> hook-log.jsonl",
    "bash -c 'logger -t spark'",
    "grep -q secret && { echo 'no secrets' >&2; exit 2; }; exit 0",
    "/home/u/other/check.sh",
  ];
  for (const command of allowed)
    assert.equal(workspaceCodeOf(command, workspace), undefined, `allowed: ${command}`);
  assert.match(workspaceCodeOf("npm run lint", workspace)!, /npm runs code from the workspace/);
  assert.match(
    workspaceCodeOf("./scripts/guard.sh", workspace)!,
    /\.\/scripts\/guard\.sh, a file in the workspace/,
  );
});

describe("hooks and the workspace, end to end", { timeout: 180_000 }, () => {
  /** `spark exec` in `workspace` with `hooks` in the user's config; the model just answers. */
  async function exec(workspace: string, hooks: Record<string, unknown>) {
    const home = freshDir("home-");
    writeFileSync(join(home, "config.json"), JSON.stringify({ hooks }));
    const script = file(
      `script-${randomUUID()}.jsonl`,
      `${JSON.stringify({ output: [{ type: "message", text: "ok" }] })}\n`,
    );
    return runToExit(["exec", "-C", workspace, "--engine", "script", "--script", script, "go"], {
      SPARK_HOME: home,
      SPARK_DATA_DIR: freshDir("data-"),
    });
  }

  /** An executable script at `path` that creates `marker` when it runs. */
  function markerScript(path: string, marker: string): void {
    writeFileSync(path, `#!/bin/sh\ntouch '${marker}'\n`);
    chmodSync(path, 0o755);
  }

  test("a Stop hook running a workspace script is refused with a warning; trustWorkspace runs it", async () => {
    const workspace = freshDir("ws-");
    const marker = join(freshDir("markers-"), "ran");
    markerScript(join(workspace, "guard.sh"), marker);
    const refused = await exec(workspace, { Stop: [{ command: "./guard.sh" }] });
    assert.equal(refused.code, 0, refused.stderr);
    assert.equal(existsSync(marker), false, "the workspace script did not run");
    const warnings = refused.stderr.split("\n").filter((line) => line.includes("not run"));
    assert.equal(warnings.length, 1, refused.stderr);
    assert.match(
      warnings[0]!,
      /^spark: warning: Stop hook `\.\/guard\.sh` not run: .*"trustWorkspace": true/,
    );

    const trusted = await exec(workspace, { Stop: [{ command: "./guard.sh", trustWorkspace: true }] });
    assert.equal(trusted.code, 0, trusted.stderr);
    assert.ok(existsSync(marker), "a trusted hook runs");
    assert.doesNotMatch(trusted.stderr, /not run/);
  });

  test("a hook running a program outside the workspace runs as before, in Claude's shape too", async () => {
    const workspace = freshDir("ws-");
    const tools = freshDir("tools-");
    const marker = join(freshDir("markers-"), "ran");
    markerScript(join(tools, "guard.sh"), marker);
    const run = await exec(workspace, {
      Stop: [{ hooks: [{ type: "command", command: join(tools, "guard.sh") }] }],
    });
    assert.equal(run.code, 0, run.stderr);
    assert.ok(existsSync(marker), "the hook outside the workspace ran");
    assert.doesNotMatch(run.stderr, /not run/);
  });
});
