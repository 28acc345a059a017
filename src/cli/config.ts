/**
 * Server settings from three sources, strongest first: command-line flags, SPARK_* environment
 * variables, a JSON config file (`--config` / `SPARK_CONFIG`). Every value is validated; errors
 * name where the bad value came from and what is expected.
 */
import { readFileSync } from "node:fs";
import { z } from "zod";

export const serveSettingsSchema = z.strictObject({
  host: z.string().min(1),
  port: z.coerce.number().int().min(0).max(65535),
  engine: z.enum(["llama", "openai", "script"]),
  model: z.string().min(1).optional(),
  download: z.boolean(),
  threads: z.coerce.number().int().min(1).max(512).optional(),
  contextSize: z.coerce.number().int().min(256).optional(),
  sequences: z.coerce.number().int().min(1).max(64).optional(),
  gpu: z.enum(["auto", "off"]),
  upstream: z.url().optional(),
  upstreamApiKeyEnv: z
    .string()
    .regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name")
    .optional(),
  upstreamApi: z.enum(["chat", "responses"]),
  upstreamModel: z.string().min(1).optional(),
  script: z.string().min(1).optional(),
  rate: z.coerce.number().min(0).optional(),
  maxBodyBytes: z.coerce.number().int().min(1024),
  websocket: z.boolean(),
  websocketMaxMinutes: z.coerce
    .number()
    .positive()
    .max(24 * 60),
});
export type ServeSettings = z.infer<typeof serveSettingsSchema>;
type SettingKey = keyof ServeSettings;

export const DEFAULT_SETTINGS = {
  host: "127.0.0.1",
  port: 8484,
  engine: "llama",
  download: true,
  gpu: "auto",
  upstreamApi: "chat",
  maxBodyBytes: 16 * 1024 * 1024,
  websocket: true,
  websocketMaxMinutes: 60,
} as const satisfies Partial<ServeSettings>;

/** Environment variable for each setting. */
export const ENV_NAMES: Record<SettingKey, string> = {
  host: "SPARK_HOST",
  port: "SPARK_PORT",
  engine: "SPARK_ENGINE",
  model: "SPARK_MODEL",
  download: "SPARK_DOWNLOAD",
  threads: "SPARK_THREADS",
  contextSize: "SPARK_CONTEXT_SIZE",
  sequences: "SPARK_SEQUENCES",
  gpu: "SPARK_GPU",
  upstream: "SPARK_UPSTREAM",
  upstreamApiKeyEnv: "SPARK_UPSTREAM_API_KEY_ENV",
  upstreamApi: "SPARK_UPSTREAM_API",
  upstreamModel: "SPARK_UPSTREAM_MODEL",
  script: "SPARK_SCRIPT",
  rate: "SPARK_RATE",
  maxBodyBytes: "SPARK_MAX_BODY_BYTES",
  websocket: "SPARK_WEBSOCKET",
  websocketMaxMinutes: "SPARK_WEBSOCKET_MAX_MINUTES",
};

const BOOLEAN_SETTINGS: readonly string[] = ["download", "websocket"];

export class ConfigError extends Error {}

function fromEnv(env: NodeJS.ProcessEnv): Record<string, unknown> {
  const values: Record<string, unknown> = {};
  for (const [key, name] of Object.entries(ENV_NAMES)) {
    const value = env[name];
    if (value === undefined || value === "") continue;
    values[key] = BOOLEAN_SETTINGS.includes(key) ? !/^(0|false|no|off)$/i.test(value) : value;
  }
  return values;
}

function fromFile(file: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(file, "utf8");
  } catch (error) {
    throw new ConfigError(
      `config file ${file}: cannot read it (${(error as NodeJS.ErrnoException).code ?? error})`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    throw new ConfigError(`config file ${file}: not valid JSON (${(error as Error).message})`);
  }
  if (typeof json !== "object" || json === null || Array.isArray(json)) {
    throw new ConfigError(`config file ${file}: must hold a JSON object of settings`);
  }
  const known = serveSettingsSchema.keyof().options as string[];
  for (const key of Object.keys(json)) {
    if (!known.includes(key))
      throw new ConfigError(`config file ${file}: unknown key "${key}" (known keys: ${known.join(", ")})`);
  }
  return json as Record<string, unknown>;
}

/** Merges the sources and validates the result, naming the source of any bad value. */
export function resolveSettings(
  flags: Record<string, unknown>,
  env: NodeJS.ProcessEnv = process.env,
): ServeSettings {
  const configFile = (flags.config as string | undefined) ?? env.SPARK_CONFIG;
  const sources: [string, Record<string, unknown>][] = [
    ["default", DEFAULT_SETTINGS],
    [configFile ? `config file ${configFile}` : "config", configFile ? fromFile(configFile) : {}],
    ["environment", fromEnv(env)],
    ["command line", flags],
  ];
  const merged: Record<string, unknown> = {};
  const origin: Record<string, string> = {};
  for (const [name, values] of sources) {
    for (const [key, value] of Object.entries(values)) {
      if (value === undefined || key === "config") continue;
      merged[key] = value;
      origin[key] = name;
    }
  }
  const parsed = serveSettingsSchema.safeParse(merged);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const key = String(issue.path[0] ?? "");
    const where =
      origin[key] === "environment"
        ? `environment variable ${ENV_NAMES[key as SettingKey]}`
        : (origin[key] ?? "settings");
    const flag = `--${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`;
    throw new ConfigError(`invalid ${key} (${flag}) from ${where}: ${issue.message}`);
  }
  return parsed.data;
}
