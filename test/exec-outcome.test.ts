/**
 * `spark exec`'s outcome as a script sees it: the exit status and the last `--json` event tell a
 * finished turn (0, `turn.completed`) from a failed one (1, `turn.failed`), a cut-off answer (3,
 * `turn.incomplete` with its reason: the output token limit, a full context) and a stopped one
 * (130, reason `stopped`). Real CLI processes, the script engine as the model.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { file, freshDir, jsonLines, runToExit, spawnCli, waitForStdout } from "./helpers/cli.js";

interface ExecEvent {
  type: string;
  reason?: string;
  message?: string;
  usage?: { input_tokens: number; output_tokens: number };
}

const LONG = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen";

/** A config whose spark model is the script engine saying `text`, at most `maxOutputTokens`. */
function config(text: string, maxOutputTokens?: number, rate?: number): string {
  const script = file(
    `script-${randomUUID()}.jsonl`,
    `${JSON.stringify({ output: [{ type: "message", text }] })}\n`,
  );
  const path = join(freshDir("config-"), "spark.json");
  writeFileSync(
    path,
    JSON.stringify({
      models: {
        spark: {
          engine: "script",
          script,
          ...(rate === undefined ? {} : { rate }),
          ...(maxOutputTokens === undefined ? {} : { defaults: { maxOutputTokens } }),
        },
      },
    }),
  );
  return path;
}

function exec(configPath: string, ...extra: string[]): ReturnType<typeof runToExit> {
  return runToExit(["exec", "--json", "-C", freshDir("ws-"), "--config", configPath, ...extra, "tell me"]);
}

test("a finished answer exits 0 and ends with turn.completed", async () => {
  const run = await exec(config("short answer"));
  assert.equal(run.code, 0, run.stderr);
  assert.equal(jsonLines<ExecEvent>(run.stdout).at(-1)!.type, "turn.completed");
});

test("an answer cut off by the output token limit exits 3 and ends with turn.incomplete, reason output_limit", async () => {
  const run = await exec(config(LONG, 4));
  assert.equal(run.code, 3, run.stderr);
  const events = jsonLines<ExecEvent>(run.stdout);
  const last = events.at(-1)!;
  assert.equal(last.type, "turn.incomplete");
  assert.equal(last.reason, "output_limit");
  assert.match(last.message ?? "", /output token limit/);
  assert.ok(last.usage && last.usage.output_tokens > 0, JSON.stringify(last));
  assert.ok(!events.some((event) => event.type === "turn.completed"), "no turn.completed");
});

test("an answer cut off by a full context exits 3 with reason context_full", async () => {
  // A 24-token window: the request and the 12 tokens allowed fill it.
  const run = await exec(config(LONG, 12), "--context-window", "24");
  assert.equal(run.code, 3, run.stderr);
  const last = jsonLines<ExecEvent>(run.stdout).at(-1)!;
  assert.equal(last.type, "turn.incomplete");
  assert.equal(last.reason, "context_full");
  assert.match(last.message ?? "", /cut off \(context full/);
});

test("SIGTERM stops the turn: exit 130 and turn.incomplete with reason stopped", async () => {
  const long = Array.from({ length: 3_000 }, (_, i) => `w${i}`).join(" ");
  const cli = spawnCli([
    "exec",
    "--json",
    "-C",
    freshDir("ws-"),
    "--config",
    config(long, undefined, 50),
    "go",
  ]);
  await waitForStdout(cli, /"item\.started".*"agent_message"/);
  cli.child.kill("SIGTERM");
  assert.equal(await cli.exited, 130, cli.stderr());
  const last = jsonLines<ExecEvent>(cli.stdout()).at(-1)!;
  assert.equal(last.type, "turn.incomplete");
  assert.equal(last.reason, "stopped");
});

test("spark exec --help documents the exit codes and exec's own approval default", async () => {
  const { code, stdout } = await runToExit(["exec", "--help"]);
  assert.equal(code, 0);
  assert.match(stdout, /Exit status:/);
  for (const status of ["0", "1", "2", "3", "130"])
    assert.match(stdout, new RegExp(`^  ${status} +\\S`, "m"));
  assert.match(stdout, /turn\.incomplete/);
  assert.doesNotMatch(stdout, /exec: never/);
  assert.match(stdout, /--approval <mode>\s+what runs without asking \(default never/);
});
