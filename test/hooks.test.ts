/**
 * Hooks end to end: `spark exec --json` (a real CLI process, the script engine as the model) with
 * hooks in the user's config file, real `bash` hook commands in a real workspace. What is checked:
 * the JSON each hook reads on stdin, a PreToolUse hook that blocks (the command never runs and the
 * model is told why, in the transcript it is sent), failing and timed-out hooks reported without
 * stopping the task, and that a workspace's own files never add hooks.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import type { ThreadItem } from "../src/agent/tools/index.js";
import { file, freshDir, jsonLines, runToExit } from "./helpers/cli.js";

interface ExecEvent {
  type: string;
  thread_id?: string;
  item?: ThreadItem;
  error?: { message: string; code?: string };
}

type Turn = { text: string } | { call: string; args: Record<string, unknown> } | { patch: string };

function script(turns: readonly Turn[]): string {
  const lines = turns.map((turn) =>
    JSON.stringify({
      output: [
        "text" in turn
          ? { type: "message", text: turn.text }
          : "patch" in turn
            ? {
                type: "custom_tool_call",
                name: "apply_patch",
                input: `*** Begin Patch\n${turn.patch}\n*** End Patch`,
              }
            : { type: "function_call", name: turn.call, arguments: JSON.stringify(turn.args) },
      ],
    }),
  );
  return file(`hooks-script-${randomUUID()}.jsonl`, lines.join("\n") + "\n");
}

async function exec(
  workspace: string,
  turns: readonly Turn[],
  hooks: Record<string, unknown> | undefined,
  task = "go",
): Promise<{ code: number | string; stderr: string; events: ExecEvent[]; dataDir: string }> {
  const home = freshDir("home-");
  if (hooks) writeFileSync(join(home, "config.json"), JSON.stringify({ hooks }));
  const dataDir = freshDir("data-");
  const run = await runToExit(
    ["exec", "--json", "-C", workspace, "--engine", "script", "--script", script(turns), task],
    { SPARK_HOME: home, SPARK_DATA_DIR: dataDir },
  );
  return { code: run.code, stderr: run.stderr, events: jsonLines<ExecEvent>(run.stdout), dataDir };
}

function completed(events: readonly ExecEvent[]): ThreadItem[] {
  return events.filter((e) => e.type === "item.completed").map((e) => e.item!);
}

/** The outputs of tool calls in the saved session (what the model was sent back). */
function toolOutputs(dataDir: string, id: string): string[] {
  const lines = jsonLines<{ type: string; items?: Record<string, unknown>[] }>(
    readFileSync(join(dataDir, "sessions", `${id}.jsonl`), "utf8"),
  );
  return lines
    .flatMap((line) => line.items ?? [])
    .filter((item) => typeof item.type === "string" && (item.type as string).endsWith("_call_output"))
    .map((item) => String(item.output));
}

describe("hooks", { timeout: 180_000 }, () => {
  test("each event's hook reads the event as JSON on stdin and runs in the workspace", async () => {
    const workspace = freshDir("ws-");
    const log = join(workspace, "hook-log.jsonl");
    // One JSON line per event, written by the hook from the workspace (its cwd).
    const record = { command: `(cat; echo) >> hook-log.jsonl; test "$PWD" = "$SPARK_PROJECT_DIR"` };
    const run = await exec(
      workspace,
      [{ call: "shell", args: { command: "echo hello" } }, { text: "done" }],
      {
        UserPromptSubmit: [record],
        PreToolUse: [{ matcher: "shell", ...record }],
        PostToolUse: [{ matcher: "shell|apply_patch", ...record }],
        Stop: [{ hooks: [{ type: "command", command: record.command }] }],
      },
      "say hello",
    );
    assert.equal(run.code, 0, run.stderr);
    assert.deepEqual(
      completed(run.events).filter((i) => i.type === "error"),
      [],
      "no hook failed",
    );
    const events = jsonLines<Record<string, unknown>>(readFileSync(log, "utf8"));
    assert.deepEqual(
      events.map((e) => e.hook_event_name),
      ["UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"],
    );
    const [prompt, pre, post, stop] = events;
    assert.equal(prompt!.prompt, "say hello");
    assert.equal(prompt!.cwd, workspace);
    assert.equal(prompt!.session_id, run.events[0]!.thread_id);
    assert.equal(pre!.tool_name, "shell");
    assert.deepEqual(pre!.tool_input, { command: "echo hello" });
    assert.match(String(post!.tool_response), /hello/);
    assert.equal(stop!.status, "completed");
  });

  test("a PreToolUse hook that exits 2 blocks the call: it never runs and the model sees the hook's reason", async () => {
    const workspace = freshDir("ws-");
    const run = await exec(
      workspace,
      [
        { call: "shell", args: { command: "touch blocked.txt" } },
        { call: "shell", args: { command: "touch allowed.txt" } },
        { text: "ok" },
      ],
      {
        PreToolUse: [
          {
            matcher: "shell",
            command: `grep -q blocked && { echo "touching blocked.txt is not allowed here" >&2; exit 2; }; exit 0`,
          },
        ],
      },
    );
    assert.equal(run.code, 0, run.stderr);
    assert.equal(existsSync(join(workspace, "blocked.txt")), false, "the blocked command did not run");
    assert.equal(existsSync(join(workspace, "allowed.txt")), true, "the other command ran");
    const commands = completed(run.events).filter((i) => i.type === "command_execution");
    assert.deepEqual(
      commands.map((c) => c.status),
      ["declined", "completed"],
    );
    const outputs = toolOutputs(run.dataDir, run.events[0]!.thread_id!);
    assert.equal(
      outputs[0],
      "Blocked by the user's PreToolUse hook: touching blocked.txt is not allowed here",
    );
  });

  test("a PreToolUse hook may block with a JSON decision; the matcher picks the tools", async () => {
    const workspace = freshDir("ws-");
    const deny = JSON.stringify({
      hookSpecificOutput: { permissionDecision: "deny", permissionDecisionReason: "patches are frozen" },
    });
    const run = await exec(
      workspace,
      [
        { patch: "*** Add File: new.txt\n+hi" },
        { call: "shell", args: { command: "touch ran.txt" } },
        { text: "ok" },
      ],
      { PreToolUse: [{ matcher: "apply_patch", command: `echo '${deny}'` }] },
    );
    assert.equal(run.code, 0, run.stderr);
    assert.equal(existsSync(join(workspace, "new.txt")), false);
    assert.equal(existsSync(join(workspace, "ran.txt")), true, "shell does not match apply_patch");
    const outputs = toolOutputs(run.dataDir, run.events[0]!.thread_id!);
    assert.equal(outputs[0], "Blocked by the user's PreToolUse hook: patches are frozen");
  });

  test("a hook that fails or times out is reported, and the task goes on", async () => {
    const workspace = freshDir("ws-");
    const run = await exec(
      workspace,
      [{ call: "shell", args: { command: "touch ran.txt" } }, { text: "ok" }],
      {
        PreToolUse: [{ command: "echo 'lint config missing' >&2; exit 1" }],
        PostToolUse: [{ command: "sleep 30", timeoutMs: 500 }],
        Stop: [{ command: "spark-test-no-such-hook-command" }],
      },
    );
    assert.equal(run.code, 0, run.stderr);
    assert.equal(existsSync(join(workspace, "ran.txt")), true, "a failing hook does not block");
    const errors = completed(run.events)
      .filter((i) => i.type === "error")
      .map((i) => (i as { message: string }).message);
    assert.equal(errors.length, 3, errors.join("\n"));
    assert.match(
      errors[0]!,
      /^PreToolUse hook `echo 'lint config missing' >&2; exit 1` failed: exit code 1: lint config missing$/,
    );
    assert.match(errors[1]!, /^PostToolUse hook `sleep 30` failed: timed out after 500 ms$/);
    assert.match(errors[2]!, /^Stop hook `spark-test-no-such-hook-command` failed: exit code 127/);
    assert.equal(run.events.at(-1)!.type, "turn.completed");
  });

  test("a UserPromptSubmit hook that exits 2 stops the turn before the model is asked", async () => {
    const workspace = freshDir("ws-");
    const run = await exec(
      workspace,
      [{ call: "shell", args: { command: "touch ran.txt" } }, { text: "ok" }],
      {
        UserPromptSubmit: [
          { command: "grep -q secret && { echo 'no secrets in prompts' >&2; exit 2; }; exit 0" },
        ],
      },
      "the secret is 42",
    );
    assert.equal(run.code, 1);
    const failed = run.events.find((e) => e.type === "turn.failed");
    assert.equal(failed?.error?.code, "hook_blocked");
    assert.match(failed!.error!.message, /no secrets in prompts/);
    assert.equal(existsSync(join(workspace, "ran.txt")), false);
  });

  test("a workspace's own files never add hooks (a cloned repository runs nothing on open)", async () => {
    const workspace = freshDir("ws-");
    const marker = join(freshDir("marks-"), "ran");
    const hooks = {
      hooks: { UserPromptSubmit: [{ command: `touch ${marker}` }], Stop: [{ command: `touch ${marker}` }] },
    };
    for (const dir of [".spark", ".codex", ".claude"]) mkdirSync(join(workspace, dir));
    writeFileSync(join(workspace, ".spark", "config.json"), JSON.stringify(hooks));
    writeFileSync(join(workspace, ".codex", "hooks.json"), JSON.stringify(hooks));
    writeFileSync(join(workspace, ".claude", "settings.json"), JSON.stringify(hooks));
    writeFileSync(join(workspace, "spark.json"), JSON.stringify(hooks));
    const run = await exec(workspace, [{ text: "ok" }], undefined);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(existsSync(marker), false);
  });
});
