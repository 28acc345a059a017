/** Command-line options shared by `spark` (the TUI), `spark exec` and `spark resume`. */
import { InvalidArgumentError, Option, type Command } from "commander";
import type { ClientFlags } from "../client/agent-runtime.js";

function number(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n)) throw new InvalidArgumentError("expected a number");
  return n;
}

function integer(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n <= 0) throw new InvalidArgumentError("expected a positive integer");
  return n;
}

/** Server settings an in-process server takes from these commands (the rest come from --config or env). */
const SERVE_KEYS = [
  "engine",
  "model",
  "script",
  "rate",
  "config",
  "threads",
  "contextSize",
  "sequences",
  "gpu",
  "upstream",
  "upstreamApiKeyEnv",
  "upstreamApi",
  "upstreamModel",
  "download",
  "dataDir",
] as const;

/**
 * `approvalDefault`: the default `--approval` as the command's own help states it (`spark exec`
 * cannot ask, so its default is never; the TUI and the app ask).
 */
export function addClientOptions(command: Command, approvalDefault = "on-request"): Command {
  return command
    .option(
      "--server <url>",
      "Spark server to use, e.g. http://127.0.0.1:8484 (env SPARK_SERVER); default: start one in this process",
    )
    .option(
      "--api-key-env <name>",
      "environment variable holding the server's API key (default SPARK_API_KEY)",
    )
    .option(
      "--tier <tier>",
      "which of the server's models answers: spark (fast), deep (thorough) or auto (the server's router picks), or another name its /v1/models lists; default spark",
    )
    .addOption(
      new Option("--approval <mode>", `what runs without asking (default ${approvalDefault})`).choices([
        "never",
        "on-request",
        "untrusted",
      ]),
    )
    .addOption(
      new Option("--sandbox <mode>", "confine commands' writes to the workspace with bubblewrap").choices([
        "auto",
        "off",
      ]),
    )
    .option("--network", "let sandboxed commands use the network")
    .option(
      "--sandbox-allow-secrets",
      "let sandboxed commands see ~/.ssh, cloud credentials and host sockets (hidden by default)",
    )
    .option(
      "--allow-env <name>",
      "pass this secret-looking environment variable (*_KEY, *TOKEN*…; * globs) to commands; repeatable",
      (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
    )
    .option(
      "--auto-compact <fraction>",
      "compact the context past this fraction of the window; 0 = off (default 0.8)",
      number,
    )
    .option(
      "--context-window <tokens>",
      "context window for the meter (default: what the server reports)",
      integer,
    )
    .option("-C, --cd <dir>", "workspace directory (default: the current directory)")
    .addOption(
      new Option("--engine <engine>", "in-process server: inference engine (as spark serve)").choices([
        "llama",
        "openai",
        "script",
      ]),
    )
    .option("--model <file.gguf>", "in-process server: the GGUF model file (llama engine) (env SPARK_MODEL)")
    .option("--no-download", "in-process server: never download the default model (env SPARK_DOWNLOAD=0)")
    .option("--script <file>", "in-process server: JSON Lines script (script engine)")
    .option("--rate <tokens/s>", "in-process server: script streaming rate", number)
    .option("--upstream <url>", "in-process server: OpenAI-compatible upstream (openai engine)")
    .option(
      "--config <file>",
      'JSON config file: server settings, models, and client settings under "client"',
    )
    .option(
      "--data-dir <dir>",
      "where sessions are saved (env SPARK_DATA_DIR; default SPARK_HOME/data, ~/.spark/data)",
    );
}

/** Splits parsed options into the client's own flags and the in-process server's settings. */
export function clientFlags(options: Record<string, unknown>, command: Command): ClientFlags {
  const given = (key: string): unknown =>
    command.getOptionValueSource(key) === "cli" ? options[key] : undefined;
  const serve: Record<string, unknown> = {};
  for (const key of SERVE_KEYS) {
    const value = given(key);
    if (value !== undefined) serve[key] = value;
  }
  const flags: ClientFlags = { serve };
  const set = <K extends keyof ClientFlags>(key: K, value: unknown): void => {
    if (value !== undefined) flags[key] = value as ClientFlags[K];
  };
  set("server", given("server"));
  set("apiKeyEnv", given("apiKeyEnv"));
  set("tier", given("tier"));
  set("approval", given("approval"));
  set("sandbox", given("sandbox"));
  set("network", given("network"));
  set("sandboxAllowSecrets", given("sandboxAllowSecrets"));
  set("allowEnv", given("allowEnv"));
  set("autoCompact", given("autoCompact"));
  set("contextWindow", given("contextWindow"));
  set("cd", given("cd"));
  set("worktree", given("worktree"));
  return flags;
}
