/**
 * Server settings from three sources, strongest first: command-line flags, SPARK_* environment
 * variables, a JSON config file (`--config` / `SPARK_CONFIG`). Every value is validated; errors
 * name where the bad value came from, the key, and what is expected.
 *
 * Only the config file can declare models (`models`), keys (`keys`) and per-tier limits (`limits`);
 * keys may also live in a separate key file (`keyFile`, written by `spark keys create`).
 */
import { readFileSync } from "node:fs";
import { z } from "zod";
import { ConfigError, DEFAULT_SETTINGS, ENV_NAMES } from "./setting-names.js";
import { hooksSchema } from "../agent/hooks/config.js";
import { mcpServersSchema } from "../agent/mcp/config.js";

export { ConfigError, DEFAULT_SETTINGS, ENV_NAMES };

const positiveInteger = z.number().int().positive();

/** A list of names: an array in the config file, comma-separated in the environment, repeated flags. */
const nameList = z
  .preprocess(
    (value) => (typeof value === "string" ? value.split(",").map((part) => part.trim()) : value),
    z.array(z.string().min(1, "must not be empty")),
  )
  .optional();

const tierLimitsSchema = z.strictObject({
  requestsPerMinute: positiveInteger.optional(),
  tokensPerMinute: positiveInteger.optional(),
  concurrent: positiveInteger.optional(),
});
export const limitsSchema = z.strictObject({
  spark: tierLimitsSchema.optional(),
  deep: tierLimitsSchema.optional(),
});

const environmentName = z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name");

/** One replica of an upstream: its URL, or `{url, weight?, apiKeyEnv?}`. */
const upstreamEntry = z.preprocess(
  (value) => (typeof value === "string" ? { url: value } : value),
  z.strictObject(
    {
      url: z.url({ protocol: /^https?$/, error: "must be an http or https URL" }),
      /** Share of new conversations and of the load, relative to the other replicas. */
      weight: z.number().positive().max(1000).optional(),
      /** Environment variable holding this replica's key (default: `upstreamApiKeyEnv`). */
      apiKeyEnv: environmentName.optional(),
    },
    {
      error: (issue) =>
        issue.code === "invalid_type" ? "must be a URL or {url, weight?, apiKeyEnv?}" : undefined,
    },
  ),
);
export type UpstreamEntry = z.infer<typeof upstreamEntry>;

/** Most replicas one model may name (the router keeps a bit per replica). */
const MAX_UPSTREAMS = 32;

/** Settings of one engine: the flat `serve` settings, or one entry of `models`. */
const engineSettings = {
  model: z.string().min(1).optional(),
  threads: z.coerce.number().int().min(1).max(512).optional(),
  contextSize: z.coerce.number().int().min(256).optional(),
  sequences: z.coerce.number().int().min(1).max(64).optional(),
  /** llama: a small model of the same vocabulary that drafts tokens for this one. */
  draftModel: z.string().min(1).optional(),
  /** llama: a GGUF model for /v1/embeddings (else the chat model embeds). */
  embeddingModel: z.string().min(1).optional(),
  /** llama: input lookup (prompt-lookup decoding) for requests that do not set it. */
  inputLookup: z.enum(["on", "off"]).optional(),
  /**
   * llama: run the model in this `llama-server` executable, supervised, instead of in process;
   * `auto`: the `llama-server` on the PATH when there is one.
   */
  llamaServer: z.string().min(1).optional(),
  /** llama with llamaServer: the model's multimodal projector (llama-server's --mmproj); it sees images. */
  mmproj: z.string().min(1).optional(),
  upstream: z.url().optional(),
  /** Replicas of the upstream, instead of `upstream`. */
  upstreams: z
    .array(upstreamEntry)
    .min(1, "must list at least one upstream")
    .max(MAX_UPSTREAMS, `at most ${MAX_UPSTREAMS} upstreams`)
    .refine(
      (list) => new Set(list.map((entry) => entry.url.replace(/\/+$/, ""))).size === list.length,
      "lists the same URL twice",
    )
    .optional(),
  upstreamApiKeyEnv: environmentName.optional(),
  upstreamModel: z.string().min(1).optional(),
  /** Seconds to wait for the upstream's response headers, and between two chunks of its body. */
  upstreamTimeout: z.coerce.number().positive().max(86_400).optional(),
  script: z.string().min(1).optional(),
  rate: z.coerce.number().min(0).optional(),
};

export const modelEntrySchema = z.strictObject({
  engine: z.enum(["llama", "openai", "script"]),
  /** Which limits and queue class apply; defaults to `deep` for `deep` and `gpt-5.3-codex`, else `spark`. */
  tier: z.enum(["spark", "deep"]).optional(),
  ...engineSettings,
  gpu: z.enum(["auto", "off"]).optional(),
  upstreamApi: z.enum(["chat", "responses"]).optional(),
  /** Responses generated at once before the queue holds new ones. */
  capacity: positiveInteger.optional(),
  /**
   * The model sees images (an openai upstream serving a vision model): requests with images go to
   * it (`auto`) or are refused by models without it (`image_unsupported`). llama cannot see.
   */
  vision: z.boolean().optional(),
  defaults: z
    .strictObject({
      temperature: z.number().min(0).max(2).optional(),
      topP: z.number().gt(0).max(1).optional(),
      maxOutputTokens: positiveInteger.optional(),
    })
    .optional(),
});
export type ModelEntrySettings = z.infer<typeof modelEntrySchema>;

export const keyRecordSchema = z.strictObject({
  id: z.string().regex(/^[A-Za-z0-9_.@-]{1,64}$/, "must be 1-64 letters, digits, '_', '.', '@' or '-'"),
  hash: z
    .string()
    .regex(/^sha256:[0-9a-fA-F]{64}$/, "must be 'sha256:' and 64 hex digits (from `spark keys create`)"),
  limits: limitsSchema.optional(),
});
export const keyFileSchema = z.strictObject({ keys: z.array(keyRecordSchema) });

const MODEL_ALIAS = /^(?!auto$)[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/;

/** Settings of the `spark` client (TUI, `exec`, `resume`); only a config file's `client` holds them. */
export const clientSettingsSchema = z.strictObject({
  server: z.url().optional(),
  apiKeyEnv: environmentName.optional(),
  tier: z.string().min(1).optional(),
  approval: z.enum(["never", "on-request", "untrusted"]).optional(),
  sandbox: z.enum(["auto", "off"]).optional(),
  autoCompact: z.number().min(0).max(1).optional(),
  contextWindow: positiveInteger.optional(),
  network: z.boolean().optional(),
  sandboxAllowSecrets: z.boolean().optional(),
  allowEnv: z.array(z.string().min(1)).optional(),
  /** Names tried after AGENTS.override.md and AGENTS.md in each directory (e.g. CLAUDE.md). */
  projectDocFallbackFilenames: z
    .array(
      z
        .string()
        .regex(/^[^/\\]+$/, "must be a file name, not a path")
        .refine((n) => n !== "." && n !== ".."),
    )
    .optional(),
  /** Byte cap of the AGENTS.md files together (default 32768); 0 loads none. */
  projectDocMaxBytes: z.number().int().min(0).optional(),
  /** `spark app`: tasks edit the workspace itself, as `--in-place` (default: a worktree per task). */
  appInPlace: z.boolean().optional(),
});
export type ClientSettings = z.infer<typeof clientSettingsSchema>;

/** `variants`: how best-of-N variants run (src/agent/variants/runner.ts). */
export const variantsSettingsSchema = z.strictObject({
  /** A command run in each variant's workspace when it ends, under the sandbox (e.g. "npm test"). */
  check: z.string().trim().min(1, "must be a command").optional(),
  /** The check's time limit in milliseconds (default 300000). */
  checkTimeoutMs: z.number().int().positive().max(3_600_000).optional(),
  /** Variants running at once (default 4); the rest queue. */
  concurrency: z.number().int().min(1).max(10).optional(),
});
export type VariantsSettings = z.infer<typeof variantsSettingsSchema>;

export const serveSettingsSchema = z.strictObject({
  host: z.string().min(1),
  port: z.coerce.number().int().min(0).max(65535),
  engine: z.enum(["llama", "openai", "script"]),
  ...engineSettings,
  download: z.boolean(),
  gpu: z.enum(["auto", "off"]),
  upstreamApi: z.enum(["chat", "responses"]),
  models: z
    .record(
      z
        .string()
        .regex(MODEL_ALIAS, "model aliases are 1-64 letters, digits, '.', '_', ':' or '-' (not 'auto')"),
      modelEntrySchema,
    )
    .optional(),
  keys: z.array(keyRecordSchema).optional(),
  client: clientSettingsSchema.optional(),
  keyFile: z.string().min(1).optional(),
  limits: limitsSchema.optional(),
  /** Output tokens of a request that sets none, for every model whose `defaults` do not say. */
  maxOutputTokens: z.coerce.number().int().positive().optional(),
  allowUnauthenticated: z.boolean(),
  queueLength: z.coerce.number().int().min(0).max(1_000_000),
  /** `sqlite` (embedded, the default), `memory`, or a `postgres://` URL that several instances share. */
  store: z
    .string()
    .refine(
      (value) => value === "sqlite" || value === "memory" || /^postgres(ql)?:\/\/./i.test(value),
      "must be sqlite, memory or a postgres://USER:PASSWORD@HOST:PORT/DATABASE URL",
    ),
  /** Postgres: seconds a statement, a lock or a wait for a connection may take (then 503). */
  storeTimeout: z.coerce.number().positive().max(3600),
  /** A Redis the instances share: limits across the fleet, key revocations, the queue view. */
  redis: z
    .string()
    .refine(
      (value) => /^rediss?:\/\/[^/]/i.test(value) && URL.canParse(value),
      "must be a redis://[USER:PASSWORD@]HOST:PORT[/DB] URL (rediss:// for TLS)",
    )
    .optional(),
  /** While Redis cannot be reached: `open` uses each instance's own limits, `closed` answers 503. */
  redisFailure: z.enum(["open", "closed"]),
  /** Seconds a concurrent slot outlives an instance that stopped renewing it (a crash). */
  redisLease: z.coerce.number().min(1).max(3600),
  /** Seconds SIGTERM waits for in-flight responses before ending them (`server_shutdown`). */
  drainTimeout: z.coerce.number().min(0).max(86_400),
  /** This instance's name in the store's background-response rows (default `HOSTNAME:PORT`). */
  instanceId: z.string().min(1).max(200).optional(),
  dataDir: z.string().min(1).optional(),
  maxBodyBytes: z.coerce.number().int().min(1024),
  websocket: z.boolean(),
  websocketMaxMinutes: z.coerce
    .number()
    .positive()
    .max(24 * 60),
  websocketHistoryMib: z.coerce.number().int().min(1).max(1_048_576),
  maxConnections: z.coerce.number().int().min(1).max(1_000_000),
  headerTimeout: z.coerce.number().positive().max(3600),
  requestTimeout: z.coerce.number().positive().max(86_400),
  allowedHosts: nameList,
  allowedOrigins: nameList,
  /** The agent's MCP servers (clients only; `serve` ignores them). */
  mcpServers: mcpServersSchema.optional(),
  /** The agent's hooks (clients only; `serve` ignores them). */
  hooks: hooksSchema.optional(),
  /** Best-of-N variants (clients only: the TUI's /variants, the app's variant cards). */
  variants: variantsSettingsSchema.optional(),
});
export type ServeSettings = z.infer<typeof serveSettingsSchema>;

// setting-names.ts keeps the defaults and environment names apart from the schema (and imports
// nothing, so no cycle): here the compiler checks them against it. Each default fits its setting,
// every setting outside FILE_ONLY has an environment variable, and neither names a stray setting.
type Stray<T> = [Exclude<keyof T, keyof ServeSettings>] extends [never] ? true : never;
const _defaultsFit: Partial<ServeSettings> = DEFAULT_SETTINGS;
const _defaultsKnown: Stray<typeof DEFAULT_SETTINGS> = true;
const _envNamesCover: Record<
  Exclude<
    keyof ServeSettings,
    "models" | "keys" | "limits" | "client" | "upstreams" | "mcpServers" | "hooks" | "variants"
  >,
  string
> = ENV_NAMES;
const _envNamesKnown: Stray<typeof ENV_NAMES> = true;

/** Repeatable flags, named in the singular (`--allowed-host`), whose settings are lists. */
const LIST_FLAGS: Record<string, string> = {
  allowedHosts: "--allowed-host",
  allowedOrigins: "--allowed-origin",
};

/** Settings only a config file can hold (structured values). */
const FILE_ONLY: readonly string[] = [
  "models",
  "keys",
  "limits",
  "client",
  "upstreams",
  "mcpServers",
  "hooks",
  "variants",
];

const BOOLEAN_SETTINGS: readonly string[] = ["download", "websocket", "allowUnauthenticated"];

function fromEnv(env: NodeJS.ProcessEnv): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const [key, name] of Object.entries(ENV_NAMES)) {
    const value = env[name];
    if (value === undefined || value === "") continue;
    values[key] = BOOLEAN_SETTINGS.includes(key) ? !/^(0|false|no|off)$/i.test(value) : value;
  }
  // SPARK_UPSTREAM may list several replicas, comma-separated.
  if (typeof values.upstream === "string" && values.upstream.includes(",")) {
    values.upstream = values.upstream.split(",").map((url) => url.trim());
  }
  return values;
}

/**
 * `upstream` and `upstreams` are one setting: a source that gives either replaces both. Several
 * `--upstream` flags (or a comma-separated SPARK_UPSTREAM) become `upstreams`; one stays `upstream`.
 */
function upstreamsOf(name: string, values: Record<string, unknown>): Record<string, unknown> {
  const { upstream, upstreams } = values;
  if (upstream !== undefined && upstreams !== undefined) {
    throw new ConfigError(`${name}: set either upstream or upstreams, not both`);
  }
  if (!Array.isArray(upstream)) return values;
  const { upstream: _list, ...rest } = values;
  return upstream.length === 1 ? { ...rest, upstream: upstream[0] } : { ...rest, upstreams: upstream };
}

/** Reads a JSON object from `file`; `what` names the file in errors ("config file", "key file"). */
export function readJsonObject(file: string, what: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new ConfigError(
      `${what} ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? error})`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(`${what} ${file}: not valid JSON (${(error as Error).message})`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new ConfigError(`${what} ${file}: must hold a JSON object`);
  }
  return json as Record<string, unknown>;
}

/**
 * The first problem zod found, as "path: message". A bad record key (`models.auto`) is reported by
 * zod as a generic "invalid key" wrapping the key check's own message; that inner message is shown.
 */
export function firstIssue(error: z.ZodError): { path: readonly PropertyKey[]; message: string } {
  const issue = error.issues[0]!;
  if (issue.code === "invalid_key") {
    const inner = issue.issues[0];
    return { path: issue.path, message: inner ? `invalid name: ${inner.message}` : issue.message };
  }
  return { path: issue.path, message: issue.message };
}

/** `models.deep.engine`, `keys[1].hash`: where in a file a problem is. */
export function issuePath(path: readonly PropertyKey[]): string {
  return path
    .map((part, i) => (typeof part === "number" ? `[${part}]` : `${i > 0 ? "." : ""}${String(part)}`))
    .join("");
}

/** Loads and validates a key file (`{"keys": [{"id", "hash", "limits"?}]}`). */
export function loadKeyFile(file: string): z.infer<typeof keyFileSchema>["keys"] {
  const parsed = keyFileSchema.safeParse(readJsonObject(file, "key file"));
  if (!parsed.success) {
    const issue = firstIssue(parsed.error);
    throw new ConfigError(`key file ${file}: ${issuePath(issue.path) || "(top level)"}: ${issue.message}`);
  }
  return parsed.data.keys;
}

function fromFile(file: string): Record<string, unknown> {
  const json = readJsonObject(file, "config file");
  const known = serveSettingsSchema.keyof().options as string[];
  for (const key of Object.keys(json)) {
    if (!known.includes(key))
      throw new ConfigError(`config file ${file}: unknown key "${key}" (known keys: ${known.join(", ")})`);
  }
  return json as Record<string, unknown>;
}

/** Merges the sources and validates the result, naming the source of any bad value. */
/** Validated settings, plus the config file they came from (for messages about its contents). */
export type ResolvedSettings = ServeSettings & { configFile?: string };

export function resolveSettings(
  flags: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
): ResolvedSettings {
  const configFile = (flags.config as string | undefined) ?? env.SPARK_CONFIG;
  const sources: [string, Record<string, unknown>][] = [
    ["default", DEFAULT_SETTINGS],
    [configFile ? `config file ${configFile}` : "config", configFile ? fromFile(configFile) : {}],
    ["environment", fromEnv(env)],
    ["command line", flags],
  ];
  const merged: Record<string, unknown> = {};
  const origin: Record<string, string> = {};
  for (const [name, given] of sources) {
    const values = upstreamsOf(name, given);
    if (values.upstream !== undefined || values.upstreams !== undefined) {
      delete merged.upstream;
      delete merged.upstreams;
    }
    for (const [key, value] of Object.entries(values)) {
      if (value === undefined || key === "config") continue;
      merged[key] = value;
      origin[key] = name;
    }
  }
  const parsed = serveSettingsSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = firstIssue(parsed.error);
    const key = String(issue.path[0] ?? "");
    if (key === "upstreams" && origin[key] !== undefined && !origin[key].startsWith("config")) {
      const where =
        origin[key] === "environment" ? `environment variable ${ENV_NAMES.upstream}` : origin[key];
      throw new ConfigError(
        `invalid upstream (--upstream) from ${where}: ${issuePath(issue.path)}: ${issue.message}`,
      );
    }
    const listFlag = LIST_FLAGS[key];
    if (listFlag !== undefined && origin[key] !== undefined && !origin[key].startsWith("config")) {
      const where =
        origin[key] === "environment"
          ? `environment variable ${ENV_NAMES[key as keyof typeof ENV_NAMES]}`
          : origin[key];
      throw new ConfigError(`invalid ${key} (${listFlag}) from ${where}: ${issue.message}`);
    }
    if (FILE_ONLY.includes(key) || issue.path.length > 1) {
      throw new ConfigError(`${origin[key] ?? "config"}: ${issuePath(issue.path)}: ${issue.message}`);
    }
    const where =
      origin[key] === "environment"
        ? `environment variable ${ENV_NAMES[key as keyof typeof ENV_NAMES]}`
        : (origin[key] ?? "settings");
    const flag = `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
    throw new ConfigError(`invalid ${key} (${flag}) from ${where}: ${issue.message}`);
  }
  return configFile ? { ...parsed.data, configFile } : parsed.data;
}
