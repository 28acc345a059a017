/**
 * The settings of the clients (`spark`, `spark exec`, `spark resume`, `spark app`): flags, then the
 * environment (SPARK_SERVER, SPARK_API_KEY), then the config file's `client`, over the serve
 * settings of an in-process server.
 *
 * Start-up contract: nothing here touches the network, and the settings' schema (zod, the largest
 * module of the start path) is loaded only when there is something to validate: a config file, a
 * SPARK_* setting in the environment or a serve flag. Without any, the settings are the defaults,
 * which are valid by construction (a test compares them with what the schema makes of nothing).
 * `peekServer` reads where the server is without validating anything, so a client can open its
 * connection while the rest loads (see `startRuntime`).
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { ApprovalMode } from "../agent/tools/approval.js";
import { sparkHome } from "../agent/context/spark-home.js";
import { defaultDataDir } from "../store/data-dir.js";
import type { ResolvedSettings } from "../settings/config.js";
import { ConfigError, DEFAULT_SETTINGS, ENV_NAMES } from "../settings/setting-names.js";

/** The client's own flags, and the serve settings given on its command line (see `clientFlags`). */
export interface ClientFlags {
  server?: string;
  apiKeyEnv?: string;
  tier?: string;
  approval?: ApprovalMode;
  sandbox?: "auto" | "off";
  network?: boolean;
  /** `--sandbox-allow-secrets`: sandboxed commands see the home directory's secrets and host sockets. */
  sandboxAllowSecrets?: boolean;
  /** `--allow-env`: secret-looking variables (names or `*` globs) commands may see. */
  allowEnv?: string[];
  autoCompact?: number;
  contextWindow?: number;
  cd?: string;
  /**
   * `--worktree`: the session works in a TaskWorkspace of its own (a git worktree on
   * `spark/<id>`, a copy outside git); nothing lands in the directory until `/apply`.
   */
  worktree?: boolean;
  /** Serve settings for an in-process server (--engine, --model, --script, --rate, --config…). */
  serve: Record<string, unknown>;
}

export interface ResolvedClient {
  settings: ResolvedSettings;
  server: string | undefined;
  apiKey: string | undefined;
  tier: string;
  approval: ApprovalMode;
  sandbox: "auto" | "off";
  network: boolean;
  sandboxAllowSecrets: boolean;
  allowEnv: string[];
  autoCompact: number;
  contextWindow: number | undefined;
  dataDir: string;
}

/**
 * The config file the clients read: `--config`, else SPARK_CONFIG, else the user config
 * `SPARK_HOME/config.json` (`~/.spark/config.json`) when there is one. (`spark serve` reads only
 * the first two.) A workspace's own files are never read as config: hooks and MCP servers run
 * commands, and a cloned repository must not run commands on open.
 */
export function withUserConfig(serve: Record<string, unknown>): Record<string, unknown> {
  if (serve.config !== undefined || process.env.SPARK_CONFIG) return serve;
  const file = join(sparkHome(), "config.json");
  return existsSync(file) ? { ...serve, config: file } : serve;
}

/**
 * The validated settings: the schema's verdict on flags, environment and config file, or the
 * defaults when none of them says anything (no zod loaded then).
 */
export async function loadSettings(
  serve: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
): Promise<ResolvedSettings> {
  const given =
    Object.keys(serve).length > 0 ||
    env.SPARK_CONFIG !== undefined ||
    Object.values(ENV_NAMES).some((name) => env[name] !== undefined);
  if (!given) return { ...DEFAULT_SETTINGS } as ResolvedSettings;
  const { resolveSettings } = await import("../settings/config.js");
  return resolveSettings(serve, env);
}

/** Flags, then environment (SPARK_SERVER, SPARK_API_KEY), then the config file's `client`. */
export async function resolveClient(flags: ClientFlags, interactive: boolean): Promise<ResolvedClient> {
  const settings = await loadSettings(withUserConfig(flags.serve));
  const fromFile = settings.client ?? {};
  const apiKeyEnv = flags.apiKeyEnv ?? fromFile.apiKeyEnv ?? "SPARK_API_KEY";
  const server = flags.server ?? (process.env.SPARK_SERVER || undefined) ?? fromFile.server;
  if (server !== undefined) {
    try {
      new URL(server);
    } catch {
      throw new ConfigError(`--server ${server}: not a URL (e.g. http://127.0.0.1:8484)`);
    }
  }
  const autoCompact = flags.autoCompact ?? fromFile.autoCompact ?? 0.8;
  if (!(autoCompact >= 0 && autoCompact <= 1)) {
    throw new ConfigError(`--auto-compact ${autoCompact}: expected a fraction from 0 (off) to 1`);
  }
  return {
    settings,
    server,
    apiKey: process.env[apiKeyEnv] || undefined,
    tier: flags.tier ?? fromFile.tier ?? "spark",
    // Nobody can answer a question in `spark exec`: it defaults to running without asking.
    approval: flags.approval ?? fromFile.approval ?? (interactive ? "on-request" : "never"),
    sandbox: flags.sandbox ?? fromFile.sandbox ?? "auto",
    network: flags.network ?? fromFile.network ?? false,
    sandboxAllowSecrets: flags.sandboxAllowSecrets ?? fromFile.sandboxAllowSecrets ?? false,
    allowEnv: flags.allowEnv ?? fromFile.allowEnv ?? [],
    autoCompact,
    contextWindow: flags.contextWindow ?? fromFile.contextWindow,
    dataDir: settings.dataDir ?? defaultDataDir(),
  };
}

/**
 * Where the server is and which key to use, as `resolveClient` will find them, read without
 * validating anything (the config file as plain JSON; anything unreadable: undefined). A guess to
 * start connecting early: the caller checks it against the validated settings and reconnects when
 * they disagree. Undefined when no server is named (an in-process server will be started).
 */
export function peekServer(flags: ClientFlags): { url: string; apiKey: string | undefined } | undefined {
  let fromFile: { server?: unknown; apiKeyEnv?: unknown } = {};
  const file = withUserConfig(flags.serve).config;
  if (typeof file === "string") {
    try {
      const json = JSON.parse(readFileSync(file, "utf8")) as { client?: typeof fromFile };
      if (json.client && typeof json.client === "object") fromFile = json.client;
    } catch {
      return undefined;
    }
  }
  const url =
    flags.server ??
    (process.env.SPARK_SERVER || undefined) ??
    (typeof fromFile.server === "string" ? fromFile.server : undefined);
  if (url === undefined || !URL.canParse(url)) return undefined;
  const keyEnv =
    flags.apiKeyEnv ?? (typeof fromFile.apiKeyEnv === "string" ? fromFile.apiKeyEnv : "SPARK_API_KEY");
  return { url, apiKey: process.env[keyEnv] || undefined };
}
