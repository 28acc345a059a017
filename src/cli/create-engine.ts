/**
 * The one place where concrete engines are chosen and built from the settings, and bound to the
 * model aliases clients use. Nothing else in Spark imports a concrete engine.
 */
import { defaultTierOf, ModelRegistry, type ModelEntry, type Tier } from "../core/model-registry.js";
import type { Registry as PromRegistry } from "prom-client";
import type { Engine } from "../engine/types.js";
import { ConfigError, type ModelEntrySettings, type ResolvedSettings } from "../settings/config.js";

/** What building one engine needs: the flat serve settings or one `models` entry. */
type EngineSettings = Omit<ModelEntrySettings, "tier" | "capacity" | "defaults" | "vision"> & {
  download?: boolean;
};

/** Responses an engine generates at once unless a model entry sets `capacity`. */
function defaultCapacity(settings: EngineSettings): number {
  if (settings.engine === "llama") return settings.sequences ?? 4;
  return settings.engine === "openai" ? 256 : 1024;
}

/**
 * The models a server offers. Without `models` in the config, one engine from the flat settings
 * serves both `spark` and `deep`. With it, each entry gets an engine (entries with the same engine
 * settings share one), and a missing `spark` or `deep` alias serves from the other's engine.
 */
export async function createModels(
  settings: ResolvedSettings,
  log: (line: string) => void,
  /** The server's Prometheus registry, for engines with metrics of their own (upstream replicas). */
  metrics?: PromRegistry,
): Promise<ModelRegistry> {
  // `maxOutputTokens` is every model's default unless its own `defaults` say otherwise.
  const outputDefault =
    settings.maxOutputTokens !== undefined ? { maxOutputTokens: settings.maxOutputTokens } : {};
  if (!settings.models) {
    const engine = await createEngine(settings, log, "", metrics);
    const registry = ModelRegistry.single(engine, defaultCapacity(settings));
    if (settings.maxOutputTokens === undefined) return registry;
    // The two tiers with the default; the built-in aliases follow them again.
    return new ModelRegistry(
      registry
        .entries()
        .filter((entry) => entry.alias === "spark" || entry.alias === "deep")
        .map((entry) => ({ ...entry, defaults: { ...entry.defaults, ...outputDefault } })),
    );
  }
  const declared = Object.entries(settings.models);
  const source = settings.configFile ? `config file ${settings.configFile}` : "config";
  const engines = new Map<string, Engine>();
  const entries: ModelEntry[] = [];
  for (const [alias, entry] of declared) {
    const { tier, capacity, defaults, vision, ...engineSettings } = entry;
    // The llama engine in process renders text prompts only: a "vision" llama model would answer
    // unseen images. In llama-server with a projector (mmproj) it sees.
    if (vision === true && engineSettings.engine === "llama" && engineSettings.mmproj === undefined)
      throw new ConfigError(
        `${source}: models.${alias}: the llama engine cannot see images in process; "vision": true needs "llamaServer" with a projector ("mmproj"), or an openai upstream that can see`,
      );
    // A top-level upstream timeout applies to every entry that does not set its own.
    const inherited =
      settings.upstreamTimeout !== undefined ? { upstreamTimeout: settings.upstreamTimeout } : {};
    const merged: EngineSettings = { download: settings.download, ...inherited, ...engineSettings };
    const identity = JSON.stringify(Object.entries(merged).sort());
    let engine = engines.get(identity);
    if (!engine) {
      engine = await createEngine(merged, log, `${source}: models.${alias}: `, metrics);
      engines.set(identity, engine);
    }
    entries.push({
      alias,
      tier: tier ?? defaultTierOf(alias),
      engine,
      engineModel: "spark",
      capacity: capacity ?? defaultCapacity(merged),
      defaults: { ...outputDefault, ...defaults },
      ...(vision !== undefined ? { vision } : {}),
    });
  }
  for (const [tier, other] of [
    ["spark", "deep"],
    ["deep", "spark"],
  ] as [Tier, Tier][]) {
    if (entries.some((e) => e.alias === tier)) continue;
    const source = entries.find((e) => e.alias === other) ?? entries[0];
    if (!source) throw new ConfigError("config models: declare at least one model (spark or deep)");
    log(`models: no "${tier}" declared; it uses the engine of "${source.alias}"`);
    entries.push({ ...source, alias: tier, tier });
  }
  return new ModelRegistry(entries);
}

/** Builds one engine; `where` prefixes configuration errors ("config models.deep: "). */
export async function createEngine(
  settings: EngineSettings,
  log: (line: string) => void,
  where: string,
  metrics?: PromRegistry,
): Promise<Engine> {
  switch (settings.engine) {
    // Each engine's module loads only when it is used: node-llama-cpp alone takes longer to import
    // than the script engine takes to start.
    case "script": {
      const { loadScript, ScriptEngine } = await import("../engines/script/script-engine.js");
      if (!settings.script)
        throw new ConfigError(`${where}the script engine needs a script: --script FILE (JSON Lines)`);
      // A missing or malformed script is a usage error (exit 2), like a bad flag.
      const lines = await loadScript(settings.script).catch((error: unknown) => {
        throw new ConfigError(where + (error instanceof Error ? error.message : String(error)));
      });
      return new ScriptEngine(settings.rate !== undefined ? { lines, rate: settings.rate } : { lines });
    }
    case "openai": {
      if (!settings.upstream && !settings.upstreams) {
        throw new ConfigError(
          `${where}the openai engine needs an upstream: --upstream URL (e.g. http://127.0.0.1:8000/v1)`,
        );
      }
      if (settings.upstream && settings.upstreams) {
        throw new ConfigError(`${where}set either upstream or upstreams, not both`);
      }
      const keyFrom = (name: string, setting: string): string => {
        const value = process.env[name];
        if (!value) throw new ConfigError(`${where}${setting} names ${name}, which is not set`);
        return value;
      };
      let apiKey: string | undefined;
      if (settings.upstreamApiKeyEnv) apiKey = keyFrom(settings.upstreamApiKeyEnv, "upstreamApiKeyEnv");
      const upstreams = (settings.upstreams ?? [{ url: settings.upstream! }]).map((entry, i) => {
        const key = entry.apiKeyEnv ? keyFrom(entry.apiKeyEnv, `upstreams[${i}].apiKeyEnv`) : apiKey;
        return {
          url: entry.url,
          ...(entry.weight !== undefined ? { weight: entry.weight } : {}),
          ...(key ? { apiKey: key } : {}),
        };
      });
      const { OpenAIEngine } = await import("../engines/openai/openai-engine.js");
      return new OpenAIEngine({
        upstreams,
        api: settings.upstreamApi ?? "chat",
        log,
        ...(metrics ? { registry: metrics } : {}),
        ...(settings.upstreamModel ? { model: settings.upstreamModel } : {}),
        ...(settings.upstreamTimeout !== undefined ? { timeoutMs: settings.upstreamTimeout * 1000 } : {}),
      });
    }
    case "llama": {
      const llamaServer = await llamaServerOf(settings, log, where);
      if (llamaServer) {
        const [{ LlamaServerEngine }, { DEFAULT_MODEL, defaultCacheDir, resolveModelPath }] =
          await Promise.all([
            import("../engines/llama/llama-server-engine.js"),
            import("../engines/llama/model-source.js"),
          ]);
        return new LlamaServerEngine({
          binary: llamaServer,
          modelPath: async () =>
            (
              await resolveModelPath({
                ...(settings.model ? { explicitPath: settings.model } : {}),
                cacheDir: defaultCacheDir(),
                defaultModel: DEFAULT_MODEL,
                download: settings.download ?? true,
              })
            ).path,
          log,
          ...(settings.threads !== undefined ? { threads: settings.threads } : {}),
          ...(settings.contextSize !== undefined ? { contextSize: settings.contextSize } : {}),
          ...(settings.sequences !== undefined ? { sequences: settings.sequences } : {}),
          ...(settings.mmproj !== undefined ? { mmproj: settings.mmproj } : {}),
          ...(settings.inputLookup !== undefined ? { inputLookup: settings.inputLookup === "on" } : {}),
          ...(settings.draftModel !== undefined ? { draftModelPath: settings.draftModel } : {}),
        });
      }
      const [{ LlamaEngine }, { DEFAULT_MODEL, defaultCacheDir, progressBar, resolveModelPath }] =
        await Promise.all([
          import("../engines/llama/llama-engine.js"),
          import("../engines/llama/model-source.js"),
        ]);
      return new LlamaEngine({
        modelPath: async () => {
          const bar = progressBar(process.stderr);
          const resolved = await resolveModelPath({
            ...(settings.model ? { explicitPath: settings.model } : {}),
            cacheDir: defaultCacheDir(),
            defaultModel: DEFAULT_MODEL,
            download: settings.download ?? true,
            progress: (p) => bar(p),
          });
          if (resolved.source === "download") bar.done();
          log(`model: ${resolved.path} (from ${resolved.source})`);
          return resolved.path;
        },
        gpu: settings.gpu === "off" ? false : "auto",
        log,
        ...(settings.threads !== undefined ? { threads: settings.threads } : {}),
        ...(settings.contextSize !== undefined ? { contextSize: settings.contextSize } : {}),
        ...(settings.sequences !== undefined ? { sequences: settings.sequences } : {}),
        ...(settings.inputLookup !== undefined ? { inputLookup: settings.inputLookup === "on" } : {}),
        ...(settings.draftModel !== undefined ? { draftModelPath: settings.draftModel } : {}),
        ...(settings.embeddingModel !== undefined ? { embeddingModelPath: settings.embeddingModel } : {}),
      });
    }
  }
}

/**
 * The llama-server executable a llama engine runs in, or undefined for in process. `auto` looks
 * for `llama-server` on the PATH and says at start which it found, or that the model runs in process.
 */
async function llamaServerOf(
  settings: EngineSettings,
  log: (line: string) => void,
  where: string,
): Promise<string | undefined> {
  let binary = settings.llamaServer;
  if (binary === "auto") {
    const { findOnPath } = await import("../engines/llama/llama-server-child.js");
    const found = findOnPath(process.platform === "win32" ? "llama-server.exe" : "llama-server");
    if (found) log(`llama: --llama-server auto: using ${found}`);
    else
      log(
        "llama: --llama-server auto: no llama-server on the PATH, so the model runs in process " +
          "(install llama.cpp's llama-server, e.g. brew install llama.cpp, for its own speed)",
      );
    binary = found ?? undefined;
  }
  if (settings.mmproj !== undefined && binary === undefined)
    throw new ConfigError(
      `${where}--mmproj needs the model in llama-server (--llama-server PATH, or auto with llama-server on the PATH): in process the llama engine cannot see images`,
    );
  return binary;
}
