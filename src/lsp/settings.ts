/**
 * Settings of `spark lsp`: flags and environment first, then `initializationOptions`, then live
 * `workspace/didChangeConfiguration` updates (`settings.spark`). Each later source overrides only
 * the keys it sets.
 */
import { z } from "zod";
import { DEFAULT_COMPLETION_FILTER, type CompletionFilter } from "./file-filter.js";
import { DEFAULT_MAX_MESSAGE_BYTES } from "./message-reader.js";

export type Tier = "spark" | "deep";
export const TIERS: readonly Tier[] = ["spark", "deep"];

export const DEFAULT_SERVER = "http://127.0.0.1:8484";
export const DEFAULT_DEBOUNCE_MS = 75;
export const DEFAULT_API_KEY_ENV = "SPARK_API_KEY";

export interface LspSettings {
  server: string;
  apiKey: string | undefined;
  tier: Tier;
  debounceMs: number;
  /** Which documents get completions (`completions` of the options and live settings). */
  completions: CompletionFilter;
  /** The largest message read from the editor (flag or environment only: the reader starts first). */
  maxMessageBytes: number;
}

export interface LspFlags {
  server?: string | undefined;
  apiKeyEnv?: string | undefined;
  tier?: string | undefined;
  debounce?: number | string | undefined;
  maxMessageBytes?: number | string | undefined;
}

const serverUrl = z.string().refine((value) => {
  try {
    return ["http:", "https:", "ws:", "wss:"].includes(new URL(value).protocol);
  } catch {
    return false;
  }
}, "expected an http:// or https:// URL");
const tier = z.enum(["spark", "deep"]);
const debounceMs = z.number().int().min(0).max(10_000);
const maxMessageBytes = z
  .number()
  .int()
  .min(64 * 1024)
  .max(2 ** 31);

/** `completions`: each key optional, the others keep their values. */
const completions = z
  .object({
    enabled: z.boolean().optional(),
    disabledLanguages: z.array(z.string()).optional(),
    excludePatterns: z.array(z.string().min(1)).optional(),
  })
  .optional();

/** `initializationOptions`: every key optional. */
const initializationOptions = z
  .object({
    server: serverUrl.optional(),
    apiKey: z.string().optional(),
    tier: tier.optional(),
    debounceMs: debounceMs.optional(),
    completions,
  })
  .nullish();

/** `settings.spark` of `workspace/didChangeConfiguration`. */
const liveSettings = z
  .object({
    server: serverUrl.optional(),
    tier: tier.optional(),
    debounceMs: debounceMs.optional(),
    completions,
  })
  .nullish();

type Overrides = Partial<Omit<LspSettings, "completions">> & { completions?: Partial<CompletionFilter> };

export class SettingsError extends Error {
  override name = "SettingsError";
}

function describe(error: z.ZodError, where: string): string {
  return error.issues
    .map((issue) => `${[where, ...issue.path.map(String)].join(".")}: ${issue.message}`)
    .join("; ");
}

export function settingsFromFlags(flags: LspFlags, env: NodeJS.ProcessEnv = process.env): LspSettings {
  const server = flags.server ?? env.SPARK_SERVER ?? DEFAULT_SERVER;
  if (!serverUrl.safeParse(server).success) {
    throw new SettingsError(`--server ${server}: expected an http:// or https:// URL`);
  }
  const tierValue = flags.tier ?? "spark";
  if (!tier.safeParse(tierValue).success)
    throw new SettingsError(`--tier ${tierValue}: expected spark or deep`);
  const debounce = flags.debounce === undefined ? DEFAULT_DEBOUNCE_MS : Number(flags.debounce);
  if (!debounceMs.safeParse(debounce).success) {
    throw new SettingsError(`--debounce ${String(flags.debounce)}: expected milliseconds from 0 to 10000`);
  }
  const limitValue = flags.maxMessageBytes ?? env.SPARK_LSP_MAX_MESSAGE_BYTES;
  const limit =
    limitValue === undefined || limitValue === "" ? DEFAULT_MAX_MESSAGE_BYTES : Number(limitValue);
  if (!maxMessageBytes.safeParse(limit).success) {
    throw new SettingsError(
      `--max-message-bytes ${String(limitValue)}: expected bytes from 65536 to 2147483648`,
    );
  }
  const keyEnv = flags.apiKeyEnv ?? DEFAULT_API_KEY_ENV;
  const apiKey = env[keyEnv];
  return {
    server,
    apiKey: apiKey === undefined || apiKey === "" ? undefined : apiKey,
    tier: tierValue as Tier,
    debounceMs: debounce,
    completions: DEFAULT_COMPLETION_FILTER,
    maxMessageBytes: limit,
  };
}

function merge(settings: LspSettings, overrides: Overrides): LspSettings {
  const next = { ...settings };
  if (overrides.server !== undefined) next.server = overrides.server;
  if (overrides.apiKey !== undefined) next.apiKey = overrides.apiKey === "" ? undefined : overrides.apiKey;
  if (overrides.tier !== undefined) next.tier = overrides.tier;
  if (overrides.debounceMs !== undefined) next.debounceMs = overrides.debounceMs;
  if (overrides.completions !== undefined) {
    const { enabled, disabledLanguages, excludePatterns } = overrides.completions;
    next.completions = {
      enabled: enabled ?? settings.completions.enabled,
      disabledLanguages: disabledLanguages ?? settings.completions.disabledLanguages,
      excludePatterns: excludePatterns ?? settings.completions.excludePatterns,
    };
  }
  return next;
}

/** Applies `initializationOptions`; throws SettingsError naming the bad key. */
export function withInitializationOptions(settings: LspSettings, options: unknown): LspSettings {
  const parsed = initializationOptions.safeParse(options);
  if (!parsed.success) throw new SettingsError(describe(parsed.error, "initializationOptions"));
  return parsed.data ? merge(settings, parsed.data as Overrides) : settings;
}

/** Applies `settings.spark` of a configuration change; throws SettingsError naming the bad key. */
export function withLiveSettings(settings: LspSettings, spark: unknown): LspSettings {
  const parsed = liveSettings.safeParse(spark);
  if (!parsed.success) throw new SettingsError(describe(parsed.error, "settings.spark"));
  return parsed.data ? merge(settings, parsed.data as Overrides) : settings;
}
