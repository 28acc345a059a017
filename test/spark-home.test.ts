/**
 * One home: the user config and the data (saved sessions, the app's tasks, stored responses) live
 * in SPARK_HOME (`~/.spark`, data in `~/.spark/data`), shown by `spark --help`; sandboxed commands
 * see neither the sessions nor config.json. Real CLI processes, a fresh HOME, the script engine.
 */
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { detectSandbox } from "../src/agent/sandbox/sandbox.js";
import { file, freshDir, jsonLines, runToExit } from "./helpers/cli.js";

/** A fresh HOME with Spark's home at its default place, and no SPARK_DATA_DIR. */
function freshHome(): { env: Record<string, string>; home: string; sparkHome: string } {
  const home = freshDir("home-");
  const sparkHome = join(home, ".spark");
  return { env: { HOME: home, SPARK_HOME: sparkHome, SPARK_DATA_DIR: "" }, home, sparkHome };
}

test("spark --help names Spark's home and its data folder", async () => {
  const { env, sparkHome } = freshHome();
  const run = await runToExit(["--help"], env);
  assert.equal(run.code, 0, run.stderr);
  const files = run.stdout.slice(run.stdout.indexOf("Files:")).replace(/\s+/g, " ");
  assert.ok(files.includes(`Spark's home is ${sparkHome} (SPARK_HOME): config.json`), files);
  assert.ok(files.includes(`data: ${join(sparkHome, "data")} (SPARK_DATA_DIR or --data-dir)`), files);
});

test("sessions are saved in SPARK_HOME/data; sandboxed commands see neither them nor config.json", async (t) => {
  const sandbox = await detectSandbox({ network: false });
  if (sandbox.kind !== "bubblewrap") return t.skip("bubblewrap does not work here");
  const { env, sparkHome } = freshHome();
  mkdirSync(sparkHome, { recursive: true });
  writeFileSync(join(sparkHome, "config.json"), JSON.stringify({ client: { approval: "never" } }));
  const probe = `cat "$HOME/.spark/config.json"; ls "$HOME/.spark/data/sessions"; echo probed`;
  const script = file(
    `home-${randomUUID()}.jsonl`,
    [
      { output: [{ type: "function_call", name: "shell", arguments: JSON.stringify({ command: probe }) }] },
      { output: [{ type: "message", text: "probed" }] },
    ]
      .map((line) => JSON.stringify(line))
      .join("\n") + "\n",
  );
  const run = await runToExit(
    ["exec", "--json", "-C", freshDir("ws-"), "--engine", "script", "--script", script, "look"],
    env,
  );
  assert.equal(run.code, 0, run.stderr);
  const sessions = readdirSync(join(sparkHome, "data", "sessions"));
  assert.equal(sessions.length, 1, "the session is saved in SPARK_HOME/data/sessions");
  const output = jsonLines<{ type: string; item?: { type: string; aggregated_output?: string } }>(run.stdout)
    .filter((event) => event.type === "item.completed")
    .map((event) => event.item)
    .find((item) => item?.type === "command_execution")!.aggregated_output!;
  assert.match(output, /probed/);
  assert.doesNotMatch(output, /approval/, "config.json reads as empty");
  assert.doesNotMatch(output, new RegExp(sessions[0]!.replace(".", "\\.")), "the session is not listed");
  assert.equal(existsSync(join(env.HOME!, ".local", "share", "spark")), false, "nothing in the old place");
});
