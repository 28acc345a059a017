/**
 * The one place where a concrete engine is chosen and built from the settings. Nothing else in
 * Spark imports a concrete engine.
 */
import type { Engine } from "../engine/types.js";
import { LlamaEngine } from "../engines/llama/llama-engine.js";
import {
  DEFAULT_MODEL,
  defaultCacheDir,
  progressBar,
  resolveModelPath,
} from "../engines/llama/model-source.js";
import { OpenAIEngine } from "../engines/openai/openai-engine.js";
import { loadScript, ScriptEngine } from "../engines/script/script-engine.js";
import { ConfigError, type ServeSettings } from "./config.js";

export async function createEngine(settings: ServeSettings, log: (line: string) => void): Promise<Engine> {
  switch (settings.engine) {
    case "script": {
      if (!settings.script)
        throw new ConfigError("the script engine needs a script: --script FILE (JSON Lines)");
      // A missing or malformed script is a usage error (exit 2), like a bad flag.
      const lines = await loadScript(settings.script).catch((error: unknown) => {
        throw new ConfigError(error instanceof Error ? error.message : String(error));
      });
      return new ScriptEngine(settings.rate !== undefined ? { lines, rate: settings.rate } : { lines });
    }
    case "openai": {
      if (!settings.upstream) {
        throw new ConfigError(
          "the openai engine needs an upstream: --upstream URL (e.g. http://127.0.0.1:8000/v1)",
        );
      }
      let apiKey: string | undefined;
      if (settings.upstreamApiKeyEnv) {
        apiKey = process.env[settings.upstreamApiKeyEnv];
        if (!apiKey)
          throw new ConfigError(
            `--upstream-api-key-env names ${settings.upstreamApiKeyEnv}, which is not set`,
          );
      }
      return new OpenAIEngine({
        baseUrl: settings.upstream,
        api: settings.upstreamApi,
        ...(apiKey ? { apiKey } : {}),
        ...(settings.upstreamModel ? { model: settings.upstreamModel } : {}),
      });
    }
    case "llama": {
      return new LlamaEngine({
        modelPath: async () => {
          const bar = progressBar(process.stderr);
          const resolved = await resolveModelPath({
            ...(settings.model ? { explicitPath: settings.model } : {}),
            cacheDir: defaultCacheDir(),
            defaultModel: DEFAULT_MODEL,
            download: settings.download,
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
      });
    }
  }
}
