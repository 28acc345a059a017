/**
 * `spark setup codex`'s edit of config.toml (issue 30, defect 10): a real TOML parser finds the keys
 * and tables, and only targeted edits are made, so a multi-line string whose lines start with `[`
 * is never taken for a table, CRLF files stay CRLF, comments and layout are kept; a symlinked
 * config.toml is written through to its target (the link stays). Every result is parsed back with
 * an independent TOML parser (smol-toml is not a dependency; toml-eslint-parser's static value is).
 */
import assert from "node:assert/strict";
import {
  lstatSync,
  readFileSync,
  readlinkSync,
  statSync,
  symlinkSync,
  writeFileSync,
  chmodSync,
} from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { getStaticTOMLValue, parseTOML } from "toml-eslint-parser";
import { planCodexConfig, type TomlValue } from "../src/cli/codex-toml.js";
import { ConfigError } from "../src/settings/setting-names.js";
import { freshDir, runToExit } from "./helpers/cli.js";

const TOP: [string, TomlValue][] = [
  ["model", "spark"],
  ["model_provider", "spark"],
  ["model_catalog_json", "/home/you/.codex/spark-models.json"],
];
const PROVIDER: [string, TomlValue][] = [
  ["name", "Spark"],
  ["base_url", "http://127.0.0.1:8484/v1"],
  ["wire_api", "responses"],
  ["supports_websockets", true],
];

function valueOf(text: string): Record<string, unknown> {
  return getStaticTOMLValue(parseTOML(text)) as Record<string, unknown>;
}

function provider(value: Record<string, unknown>): Record<string, unknown> {
  return (value.model_providers as Record<string, Record<string, unknown>>).spark!;
}

test("a multi-line string with lines that start with [ is kept whole and the keys land outside it", () => {
  const instructions = 'Checklist:\n[x] run tests\n[ ] update docs\nmodel = "not a key"\n';
  const existing = `approval_policy = "on-request"\ndeveloper_instructions = """\n${instructions}"""\n\n[tui]\nnotifications = true\n`;
  const plan = planCodexConfig(existing, TOP, PROVIDER, false);
  assert.deepEqual(plan.conflicts, []);
  const value = valueOf(plan.text);
  assert.equal(value.developer_instructions, instructions, plan.text);
  assert.equal(value.model, "spark");
  assert.equal(value.model_catalog_json, "/home/you/.codex/spark-models.json");
  assert.deepEqual(value.tui, { notifications: true }, "the top-level keys stay above [tui]");
  assert.equal(provider(value).wire_api, "responses");
  assert.ok(plan.text.startsWith(existing.split("\n\n[tui]")[0]!), plan.text);

  // The same string in the provider table: the keys Spark adds go after it, not inside it.
  const inTable = `[model_providers.spark]\nname = "Spark"\nhttp_headers_note = '''\n[model_providers.other]\nbase_url = "x"\n'''\n`;
  const second = planCodexConfig(inTable, TOP, PROVIDER, false);
  const parsed = valueOf(second.text);
  assert.equal(provider(parsed).http_headers_note, '[model_providers.other]\nbase_url = "x"\n');
  assert.equal(provider(parsed).base_url, "http://127.0.0.1:8484/v1");
  assert.equal((parsed.model_providers as Record<string, unknown>).other, undefined);
});

test("CRLF files stay CRLF, comments and the user's lines are kept byte for byte", () => {
  const existing =
    '# mine\r\nmodel = "spark" # the fast one\r\n\r\n# my table\r\n[tui]\r\nnotifications = true\r\n';
  const plan = planCodexConfig(existing, TOP, PROVIDER, false);
  assert.equal(plan.text.replace(/\r\n/g, "").includes("\n"), false, JSON.stringify(plan.text));
  for (const kept of ["# mine\r\n", 'model = "spark" # the fast one\r\n', "# my table\r\n[tui]\r\n"])
    assert.ok(plan.text.includes(kept), JSON.stringify(plan.text));
  assert.equal(valueOf(plan.text).model_provider, "spark");
  assert.ok(plan.text.indexOf("model_provider =") < plan.text.indexOf("[tui]"));
  assert.deepEqual(
    plan.changes.filter((change) => change.startsWith("add model")),
    ['add model_provider = "spark"', 'add model_catalog_json = "/home/you/.codex/spark-models.json"'],
  );
});

test("a file with only tables gets the top-level keys above the first table and its comments", () => {
  const existing = "# about tui\n[tui]\nnotifications = true\n";
  const plan = planCodexConfig(existing, TOP, PROVIDER, false);
  assert.ok(
    plan.text.endsWith(
      '# about tui\n[tui]\nnotifications = true\n\n[model_providers.spark]\nname = "Spark"\nbase_url = "http://127.0.0.1:8484/v1"\nwire_api = "responses"\nsupports_websockets = true\n',
    ),
    plan.text,
  );
  assert.ok(plan.text.startsWith('# Spark (spark setup codex)\nmodel = "spark"\n'), plan.text);
  assert.equal(valueOf(plan.text).model, "spark");
});

test("keys missing from an existing table go after its keys, before its sub-tables; quoted keys count", () => {
  const existing =
    '"model" = "spark"\nmodel_provider = \'spark\'\nmodel_catalog_json = "/home/you/.codex/spark-models.json"\n\n' +
    '[model_providers.spark]\n"name" = "Spark"\n\n[model_providers.spark.http_headers]\nX-Team = "core"\n';
  const plan = planCodexConfig(existing, TOP, PROVIDER, false);
  assert.deepEqual(plan.conflicts, []);
  const value = valueOf(plan.text);
  assert.deepEqual(provider(value).http_headers, { "X-Team": "core" });
  assert.equal(provider(value).supports_websockets, true);
  assert.equal(
    plan.changes.some((change) => change.startsWith("add model")),
    false,
    plan.changes.join("; "),
  );
  // Nothing to do: the same text back.
  assert.equal(planCodexConfig(plan.text, TOP, PROVIDER, false).text, plan.text);
});

test("a value that says something else is a conflict; --force replaces the value and keeps the comment", () => {
  const existing = 'model = "gpt-5" # mine\n\n[model_providers.spark]\nbase_url = "http://gpu:1/v1"\n';
  const plan = planCodexConfig(existing, TOP, PROVIDER, false);
  assert.deepEqual(plan.conflicts, [
    'model = "gpt-5" (yours) would become model = "spark"',
    '[model_providers.spark] base_url = "http://gpu:1/v1" (yours) would become base_url = "http://127.0.0.1:8484/v1"',
  ]);
  const forced = planCodexConfig(existing, TOP, PROVIDER, true);
  assert.match(forced.text, /^model = "spark" # mine$/m);
  assert.equal(provider(valueOf(forced.text)).base_url, "http://127.0.0.1:8484/v1");
});

test("forms it does not edit and invalid TOML are refused with the line and what to do", () => {
  assert.throws(
    () => planCodexConfig('model_providers.spark.base_url = "x"\n', TOP, PROVIDER, false),
    (error: unknown) =>
      error instanceof ConfigError && /line 1 defines model_providers\.spark/.test(error.message),
  );
  assert.throws(
    () => planCodexConfig('a = 1\n[model_providers]\nspark = { base_url = "x" }\n', TOP, PROVIDER, false),
    (error: unknown) =>
      error instanceof ConfigError &&
      /line 3 .*make it a \[model_providers\.spark\] table/.test(error.message),
  );
  assert.throws(
    () => planCodexConfig('model = "a\n', TOP, PROVIDER, false),
    (error: unknown) => error instanceof ConfigError && /not valid TOML \(line 1/.test(error.message),
  );
  // A multi-line string that merely mentions the dotted form is not a definition.
  const fine = planCodexConfig(
    'notes = """\nmodel_providers.spark.base_url = "x"\n"""\n',
    TOP,
    PROVIDER,
    false,
  );
  assert.equal(valueOf(fine.text).notes, 'model_providers.spark.base_url = "x"\n');
});

test("spark setup codex writes through a symlinked config.toml to its target and keeps its mode", async () => {
  const home = freshDir("codex-home-");
  const dotfiles = freshDir("dotfiles-");
  const target = join(dotfiles, "codex-config.toml");
  writeFileSync(target, '# dotfiles\r\napproval_policy = "never"\r\n');
  chmodSync(target, 0o640);
  symlinkSync(target, join(home, "config.toml"));
  const { code, stderr } = await runToExit([
    "setup",
    "codex",
    "--server",
    "http://127.0.0.1:9",
    "--codex-home",
    home,
  ]);
  assert.equal(code, 0, stderr);
  assert.ok(lstatSync(join(home, "config.toml")).isSymbolicLink(), "the link is still a link");
  assert.equal(readlinkSync(join(home, "config.toml")), target);
  const text = readFileSync(target, "utf8");
  assert.ok(text.startsWith('# dotfiles\r\napproval_policy = "never"\r\n'), text);
  assert.equal(text.replace(/\r\n/g, "").includes("\n"), false, "CRLF kept");
  assert.equal(provider(valueOf(text)).wire_api, "responses");
  assert.equal(statSync(target).mode & 0o777, 0o640);
});
