/**
 * `spark setup codex`: points OpenAI's Codex CLI at a Spark server. It writes two things into
 * CODEX_HOME (default ~/.codex):
 * - `spark-models.json`, the model catalog Codex needs for a custom provider's models (Codex does
 *   not read /v1/models from custom providers, and without a catalog entry it offers no
 *   apply_patch tool);
 * - in `config.toml`: `model`, `model_provider` and `model_catalog_json` at the top level, and a
 *   `[model_providers.spark]` table (base_url, wire_api = "responses", supports_websockets, and
 *   env_key when the server needs a key).
 *
 * Non-destructive: what is missing is added, what already says the same is left alone, the user's
 * other settings are kept byte for byte; a setting of the user's that says something else is a
 * conflict, listed, and nothing is written unless `--force` (then those lines are replaced and the
 * old file is kept as config.toml.spark-backup). `--dry-run` prints the plan and writes nothing.
 *
 * config.toml is parsed with a real TOML parser and edited only at the ranges it reports
 * (`codex-toml.ts`), so the user's comments, layout and line endings survive. A config.toml (or
 * catalog) that is a symbolic link (dotfiles) is written through to its target, which keeps its mode.
 */
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { Command } from "commander";
// The TOML parser loads only for `spark setup codex`: every other command starts without it.
import type { TomlValue } from "./codex-toml.js";
import { ConfigError } from "../settings/setting-names.js";

const PROVIDER = "spark";
const CATALOG_FILE = "spark-models.json";
const DEFAULT_SERVER = "http://127.0.0.1:8484";

/** Codex's catalog entry for one model: the smallest one Codex 0.169 accepts with apply_patch. */
function catalogEntry(slug: string, displayName: string, priority: number): Record<string, unknown> {
  const levels: [string, string][] = [
    ["low", "Fast responses with lighter reasoning"],
    ["medium", "Balances speed and reasoning depth for everyday tasks"],
    ["high", "Greater reasoning depth for complex problems"],
    ["xhigh", "Extra high reasoning depth for complex problems"],
  ];
  return {
    slug,
    display_name: displayName,
    apply_patch_tool_type: "freeform",
    shell_type: "shell_command",
    visibility: "list",
    supported_in_api: true,
    priority,
    supported_reasoning_levels: levels.map(([effort, description]) => ({ effort, description })),
    support_verbosity: true,
    truncation_policy: { mode: "tokens", limit: 10000 },
    experimental_supported_tools: [],
    base_instructions:
      "You are Codex, a coding agent running in the Codex CLI. Use exec_command to run shell commands and apply_patch to edit files.",
  };
}

/**
 * The catalog: Spark's tiers under their names and OpenAI's (`gpt-5.3-codex-spark` is the spark
 * tier, `gpt-5.3-codex` the deep tier), plus any other model the server lists.
 */
export function codexCatalog(serverModels: readonly string[] = []): { models: Record<string, unknown>[] } {
  const known: [string, string][] = [
    ["spark", "Spark (fast tier)"],
    ["deep", "Spark deep (thorough tier)"],
    ["auto", "Spark auto (the server's router picks a tier)"],
    ["gpt-5.3-codex-spark", "GPT-5.3-Codex-Spark (Spark's spark tier)"],
    ["gpt-5.3-codex", "GPT-5.3-Codex (Spark's deep tier)"],
  ];
  const names = new Set(known.map(([slug]) => slug));
  for (const id of serverModels) {
    if (names.has(id)) continue;
    known.push([id, `${id} (on Spark)`]);
    names.add(id);
  }
  return { models: known.map(([slug, name], i) => catalogEntry(slug, name, i + 1)) };
}

/**
 * Replaces `path`'s contents at once (a temporary file renamed over it). A symbolic link is written
 * through: its target is replaced, the link stays (dotfiles managers link ~/.codex/config.toml).
 * An existing file keeps its mode.
 */
function writeAtomically(path: string, text: string): void {
  const target = existsSync(path) ? realpathSync(path) : path;
  const mode = existsSync(target) ? statSync(target).mode & 0o7777 : 0o600;
  const temporary = join(dirname(target), `.${basename(target)}.${process.pid}.tmp`);
  writeFileSync(temporary, text, { mode });
  chmodSync(temporary, mode);
  renameSync(temporary, target);
}

/** What the server says about itself: its model ids, and whether it wants a key (401). */
async function probe(server: string): Promise<{ models: string[]; needsKey: boolean } | undefined> {
  try {
    const response = await fetch(`${server}/v1/models`, { signal: AbortSignal.timeout(3000) });
    if (response.status === 401) return { models: [], needsKey: true };
    if (!response.ok) return undefined;
    const body = (await response.json()) as { data?: { id?: unknown }[] };
    const models = (body.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === "string");
    return { models, needsKey: false };
  } catch {
    return undefined;
  }
}

interface CodexSetupOptions {
  server?: string;
  codexHome?: string;
  model: string;
  apiKeyEnv?: string;
  websockets: boolean;
  dryRun: boolean;
  force: boolean;
}

async function setupCodex(options: CodexSetupOptions): Promise<void> {
  const out = (line: string): boolean => process.stdout.write(`${line}\n`);
  const server = (options.server ?? process.env.SPARK_SERVER ?? DEFAULT_SERVER)
    .replace(/\/+$/, "")
    .replace(/\/v1$/, "");
  if (!/^https?:\/\/[^/]/.test(server))
    throw new ConfigError(`--server must be an http:// or https:// URL, got "${server}"`);
  const home = resolve(options.codexHome ?? process.env.CODEX_HOME ?? join(homedir(), ".codex"));
  const seen = await probe(server);
  // A key only when one is needed or asked for: Codex refuses to start when env_key's variable is unset.
  const keyEnv = options.apiKeyEnv ?? (seen?.needsKey ? "SPARK_API_KEY" : undefined);

  const catalogPath = join(home, CATALOG_FILE);
  const catalog = JSON.stringify(codexCatalog(seen?.models), null, 2) + "\n";
  const configPath = join(home, "config.toml");
  const existing = existsSync(configPath) ? readFileSync(configPath, "utf8") : undefined;
  const { planCodexConfig } = await import("./codex-toml.js");
  const plan = planCodexConfig(
    existing,
    [
      ["model", options.model],
      ["model_provider", PROVIDER],
      ["model_catalog_json", catalogPath],
    ],
    [
      ["name", "Spark"],
      ["base_url", `${server}/v1`],
      ["wire_api", "responses"],
      ["supports_websockets", options.websockets],
      ...(keyEnv ? ([["env_key", keyEnv]] as [string, TomlValue][]) : []),
    ],
    options.force,
  );
  const oldCatalog = existsSync(catalogPath) ? readFileSync(catalogPath, "utf8") : undefined;
  const catalogChange = oldCatalog === undefined ? "create" : oldCatalog === catalog ? undefined : "replace";
  if (catalogChange === "replace" && !options.force)
    plan.conflicts.push(`${catalogPath} differs from Spark's catalog (edited by hand?)`);

  if (plan.conflicts.length > 0 && !options.force) {
    throw new ConfigError(
      `${configPath} already has settings of its own; nothing was written:\n` +
        plan.conflicts.map((c) => `  ${c}`).join("\n") +
        `\nRun again with --force to replace them (the old config.toml is kept as config.toml.spark-backup), ` +
        `or with --dry-run to see every change.`,
    );
  }
  const configChanged = existing === undefined || plan.text !== existing;
  const prefix = options.dryRun ? "would " : "";
  if (catalogChange)
    out(`${prefix}${catalogChange} ${catalogPath} (the model catalog Codex needs for Spark's models)`);
  if (configChanged) {
    out(`${prefix}${existing === undefined ? "create" : "update"} ${configPath}:`);
    for (const change of plan.changes) out(`  ${change}`);
  }
  if (!catalogChange && !configChanged)
    out(`${configPath} and ${catalogPath} already point Codex at ${server}`);
  if (options.dryRun) {
    if (configChanged) out(`\n${configPath} would read:\n${plan.text}`);
    return;
  }
  mkdirSync(home, { recursive: true });
  if (catalogChange) writeAtomically(catalogPath, catalog);
  if (configChanged) {
    if (existing !== undefined && plan.conflicts.length > 0)
      copyFileSync(configPath, `${configPath}.spark-backup`);
    writeAtomically(configPath, plan.text);
  }
  if (!seen)
    out(
      `note: no Spark server answered at ${server}; start one with \`spark serve\` (or pass --server URL). ` +
        "If it needs API keys, run this again with --api-key-env NAME.",
    );
  if (keyEnv) out(`Codex sends the key in $${keyEnv}: set it to a key from \`spark keys create\`.`);
  out(
    `Codex now uses Spark by default: \`codex\` or \`codex exec "…"\` (model ${options.model}; --model deep for the deep tier).`,
  );
}

export function setupCommand(): Command {
  const setup = new Command("setup").description("configure other tools to use a Spark server");
  setup
    .command("codex")
    .description(
      "point OpenAI's Codex CLI at a Spark server: writes its provider settings into CODEX_HOME/config.toml (merged, never overwriting your own settings without --force) and the model catalog it needs",
    )
    .option("--server <url>", `the Spark server (env SPARK_SERVER; default ${DEFAULT_SERVER})`)
    .option("--codex-home <dir>", "Codex's settings folder (default: $CODEX_HOME or ~/.codex)")
    .option("--model <name>", "the model Codex uses by default: spark, deep or auto", "spark")
    .option(
      "--api-key-env <name>",
      "environment variable Codex reads the server's API key from (default: SPARK_API_KEY when the server needs keys, none otherwise)",
    )
    .option("--no-websockets", "talk HTTP+SSE instead of WebSocket")
    .option("--dry-run", "print what would change, write nothing")
    .option("--force", "replace settings of yours that say something else")
    .addHelpText(
      "after",
      `
Examples:
  spark setup codex                                # the server on ${DEFAULT_SERVER}
  spark setup codex --server http://gpu-box:8484 --api-key-env SPARK_API_KEY
  spark setup codex --dry-run                      # show the changes only`,
    )
    .action(async (options: Record<string, unknown>) => {
      await setupCodex({
        ...(typeof options.server === "string" ? { server: options.server } : {}),
        ...(typeof options.codexHome === "string" ? { codexHome: options.codexHome } : {}),
        ...(typeof options.apiKeyEnv === "string" ? { apiKeyEnv: options.apiKeyEnv } : {}),
        model: options.model as string,
        websockets: options.websockets !== false,
        dryRun: options.dryRun === true,
        force: options.force === true,
      });
    });
  return setup;
}
