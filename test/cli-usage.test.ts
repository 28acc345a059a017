/**
 * Usage errors and help texts of the `spark` command (real CLI processes): a mistyped subcommand
 * gets "did you mean" and exit 2 instead of becoming a prompt; an unknown option gets its error and
 * a one-line hint, not the whole help; `spark --help` names the TUI's commands and Spark's home.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { editDistance, mistypedSubcommand } from "../src/cli/usage-errors.js";
import { runToExit } from "./helpers/cli.js";

const NAMES = ["serve", "keys", "lsp", "mcp", "setup", "exec", "app", "resume"];

test("did you mean: one word of 3+ letters close to a subcommand; prompts stay prompts", () => {
  assert.equal(editDistance("srve", "serve"), 1);
  assert.equal(editDistance("sevre", "serve"), 1, "a swap of neighbours is one edit");
  assert.equal(mistypedSubcommand("srve", NAMES), "serve");
  assert.equal(mistypedSubcommand("Serv", NAMES), "serve");
  assert.equal(mistypedSubcommand("stup", NAMES), "setup");
  assert.equal(mistypedSubcommand("resme", NAMES), "resume");
  assert.equal(mistypedSubcommand("exce", NAMES), "exec");
  assert.equal(mistypedSubcommand("apps", NAMES), "app");
  for (const prompt of [
    "fix the tests",
    "hello",
    "yes",
    "exit",
    "ok",
    "hi",
    "refactor",
    "srve it",
    "srve!",
    "status",
  ])
    assert.equal(mistypedSubcommand(prompt, NAMES), undefined, prompt);
});

test("spark srve: did you mean `spark serve`?, exit 2, nothing started", async () => {
  const run = await runToExit(["srve"]);
  assert.equal(run.code, 2, run.stderr);
  assert.match(run.stderr, /did you mean `spark serve`\?/);
  assert.equal(run.stdout, "");
});

test("an unknown option: the error and a one-line hint, not the whole help (exit 2)", async () => {
  for (const args of [
    ["--bogus"],
    ["exec", "--bogus", "task"],
    ["serve", "--bogus"],
    ["mcp", "list", "--bogus"],
  ]) {
    const run = await runToExit(args);
    assert.equal(run.code, 2, `${args.join(" ")}: ${run.stderr}`);
    const lines = run.stderr.trimEnd().split("\n");
    assert.equal(lines.length, 2, run.stderr);
    assert.match(lines[0]!, /unknown option '--bogus'/);
    const path = ["spark", ...args.filter((arg) => !arg.startsWith("-") && arg !== "task")].join(" ");
    assert.equal(lines[1], `(see \`${path} --help\`)`);
  }
});

test("spark --help lists the TUI's commands", async () => {
  const { code, stdout } = await runToExit(["--help"]);
  assert.equal(code, 0);
  for (const command of ["/undo", "/redo", "/apply", "/discard", "/expand", "/skills", "/diff", "/variants"])
    assert.ok(stdout.includes(command), `${command} in spark --help`);
});
