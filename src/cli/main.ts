/** The `spark` command line. */
import { Command, InvalidArgumentError, Option } from "commander";
import { KeyRing } from "../core/keys.js";
import { MemoryResponseStore, type ResponseStore } from "../core/response-store.js";
import { SparkServer } from "../server/http-server.js";
import { defaultDataDir, SqliteResponseStore, StoreOpenError } from "../store/sqlite-store.js";
import {
  ConfigError,
  DEFAULT_SETTINGS,
  ENV_NAMES,
  loadKeyFile,
  resolveSettings,
  type ResolvedSettings,
} from "./config.js";
import { createModels } from "./create-engine.js";
import { keysCommand } from "./keys-command.js";

const log = (line: string): void => {
  process.stderr.write(`spark: ${line}\n`);
};

function env(key: keyof typeof ENV_NAMES): string {
  return `(env ${ENV_NAMES[key]})`;
}

function integer(value: string): number {
  const n = Number(value);
  if (!Number.isInteger(n)) throw new InvalidArgumentError("expected an integer");
  return n;
}

const DEFAULT_KEY_FILE = "spark-keys.json";

function number(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n)) throw new InvalidArgumentError("expected a number");
  return n;
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** Keys from the config and the key file, checked for duplicates; the server never sees a key itself. */
function loadKeys(settings: ResolvedSettings): KeyRing {
  const sources: [string, ReturnType<typeof loadKeyFile>][] = [
    [settings.configFile ? `config file ${settings.configFile}` : "the config", settings.keys ?? []],
  ];
  if (settings.keyFile) sources.push([`key file ${settings.keyFile}`, loadKeyFile(settings.keyFile)]);
  const seen = new Map<string, string>();
  for (const [source, records] of sources) {
    for (const record of records) {
      const first = seen.get(record.id);
      if (first !== undefined) {
        throw new ConfigError(
          `API key id "${record.id}" is declared twice: in ${first} and in ${source}; ids must be unique`,
        );
      }
      seen.set(record.id, source);
    }
  }
  return new KeyRing(
    sources.flatMap(([, records]) => records),
    settings.limits ?? {},
  );
}

function openStore(settings: ResolvedSettings): ResponseStore {
  if (settings.store === "memory") return new MemoryResponseStore();
  try {
    return SqliteResponseStore.open(settings.dataDir ?? defaultDataDir());
  } catch (error) {
    if (error instanceof StoreOpenError) throw new ConfigError(error.message);
    throw error;
  }
}

async function serve(flags: Record<string, unknown>): Promise<void> {
  const settings = resolveSettings(flags);
  const keys = loadKeys(settings);
  if (!keys.required && !isLoopback(settings.host) && !settings.allowUnauthenticated) {
    throw new ConfigError(
      `no API keys are configured, so Spark only listens on loopback; --host ${settings.host} needs keys ` +
        `(spark keys create --name NAME, then --key-file) or --allow-unauthenticated`,
    );
  }
  const models = await createModels(settings, log);
  const store = openStore(settings);
  const server = new SparkServer({
    models,
    keys,
    store,
    admission: { maxQueue: settings.queueLength },
    host: settings.host,
    port: settings.port,
    maxBodyBytes: settings.maxBodyBytes,
    websocket: settings.websocket && { maxConnectionMs: settings.websocketMaxMinutes * 60_000 },
  });
  const url = await server.listen();
  process.stdout.write(`spark listening on ${url}\n`);
  const engines = models.engines();
  log(
    `models ${models
      .entries()
      .map((e) => `${e.alias} (${e.tier}, ${e.engine.kind}, ${e.capacity} at once)`)
      .join(", ")} and auto; ` +
      `POST ${url}/v1/responses, ${url}/v1/chat/completions; GET /v1/models, /healthz, /metrics; ` +
      (settings.websocket ? `WebSocket ${url.replace(/^http/, "ws")}/v1/responses` : "WebSocket mode off"),
  );
  log(
    keys.required
      ? `${keys.size} API key(s) configured: requests need 'Authorization: Bearer KEY'`
      : `no API keys configured: anyone who can reach ${settings.host} can use this server` +
          (isLoopback(settings.host) ? " (loopback only; add keys with `spark keys create`)" : ""),
  );
  log(
    settings.store === "memory"
      ? "responses stored in memory only (--store memory)"
      : `responses stored in ${settings.dataDir ?? defaultDataDir()}`,
  );

  let stopping = false;
  const stop = (signal: string): void => {
    if (stopping) {
      log(`${signal} again: exiting now`);
      process.exit(130);
    }
    stopping = true;
    log(`${signal}: finishing in-flight responses and shutting down`);
    server.close().then(
      () => process.exit(0),
      (error: unknown) => {
        log(`shutdown error: ${String(error)}`);
        process.exit(1);
      },
    );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));

  // The server answers 503 while the engines load, so clients see progress instead of a refused port.
  const started = performance.now();
  for (const engine of engines) {
    engine.start().then(
      () => log(`${engine.kind} engine ready in ${Math.round(performance.now() - started)} ms`),
      (error: unknown) => {
        log(
          `the ${engine.kind} engine failed to start: ${error instanceof Error ? error.message : String(error)}`,
        );
        void server.close().finally(() => process.exit(1));
      },
    );
  }
}

export function buildProgram(): Command {
  const program = new Command("spark")
    .description("Spark: an open, real-time coding model server speaking the OpenAI Responses API")
    .showHelpAfterError();
  program
    .command("serve")
    .description(
      "start the OpenAI-compatible server (Responses API over HTTP+SSE and WebSocket, Chat Completions, /v1/models)",
    )
    .option("--host <host>", `address to bind ${env("host")}`, DEFAULT_SETTINGS.host)
    .option("--port <port>", `port to listen on; 0 picks a free port ${env("port")}`, integer)
    .addOption(
      new Option("--engine <engine>", `inference engine ${env("engine")}`).choices([
        "llama",
        "openai",
        "script",
      ]),
    )
    .option(
      "--config <file>",
      "JSON config file: any of these settings in camelCase, plus models, keys and limits (env SPARK_CONFIG)",
    )
    .option("--key-file <file>", `API keys (hashed) written by \`spark keys create\` ${env("keyFile")}`)
    .option(
      "--allow-unauthenticated",
      `without keys, listen on a non-loopback --host anyway ${env("allowUnauthenticated")}`,
    )
    .option(
      "--queue-length <n>",
      `responses that may wait per engine before 429 queue_full (default 256) ${env("queueLength")}`,
      integer,
    )
    .addOption(
      new Option("--store <kind>", `where store:true responses go ${env("store")}`).choices([
        "sqlite",
        "memory",
      ]),
    )
    .option(
      "--data-dir <dir>",
      `directory of the response database (default ~/.local/share/spark) ${env("dataDir")}`,
    )
    .option(
      "--model <path>",
      `llama: GGUF model file; default: cached or downloaded small coder model ${env("model")}`,
    )
    .option("--no-download", `llama: never download the default model ${env("download")}`)
    .option("--threads <n>", `llama: decode threads; default: measured at start ${env("threads")}`, integer)
    .option(
      "--context-size <tokens>",
      `llama: context per sequence (default 8192) ${env("contextSize")}`,
      integer,
    )
    .option("--sequences <n>", `llama: parallel sequences (default 4) ${env("sequences")}`, integer)
    .addOption(
      new Option("--gpu <mode>", `llama: use a GPU when available ${env("gpu")}`).choices(["auto", "off"]),
    )
    .option("--upstream <url>", `openai: upstream base URL, e.g. http://127.0.0.1:8000/v1 ${env("upstream")}`)
    .option(
      "--upstream-api-key-env <name>",
      `openai: env variable holding the upstream API key ${env("upstreamApiKeyEnv")}`,
    )
    .addOption(
      new Option("--upstream-api <api>", `openai: upstream wire API ${env("upstreamApi")}`).choices([
        "chat",
        "responses",
      ]),
    )
    .option("--upstream-model <id>", `openai: upstream model for the alias "spark" ${env("upstreamModel")}`)
    .option("--script <file>", `script: JSON Lines file, one model response per line ${env("script")}`)
    .option("--rate <tokens/s>", `script: streaming rate; default unlimited ${env("rate")}`, number)
    .option(
      "--max-body-bytes <n>",
      `largest request body or WebSocket frame accepted ${env("maxBodyBytes")}`,
      integer,
    )
    .option(
      "--no-websocket",
      `answer WebSocket upgrades with 426 (clients fall back to HTTP) ${env("websocket")}`,
    )
    .option(
      "--websocket-max-minutes <n>",
      `lifetime of one WebSocket connection (default 60) ${env("websocketMaxMinutes")}`,
      number,
    )
    .addHelpText(
      "after",
      `
Precedence: command-line flags, then SPARK_* environment variables, then the config file.
The first line on stdout is "spark listening on http://HOST:PORT".

Models: "spark" (fast tier) and "deep" (thorough tier) always exist; "auto" lets the router pick
one per request (see the x-spark-route response header). Declare models per alias in the config
file: {"models": {"deep": {"engine": "openai", "upstream": "http://gpu:8000/v1"}}}.

Examples:
  spark serve                                   # embedded llama.cpp with the default model
  spark serve --model ./qwen2.5-coder-1.5b.gguf --port 0
  spark serve --engine openai --upstream http://127.0.0.1:8000/v1 --upstream-api-key-env VLLM_KEY
  spark serve --engine script --script demo.jsonl --rate 1000
  spark serve --host 0.0.0.0 --key-file keys.json  # shared server: keys required`,
    )
    .action(async (options: Record<string, unknown>, command: Command) => {
      // Only values the user gave count as flags; commander defaults would hide env and config values.
      const flags: Record<string, unknown> = {};
      for (const [key, value] of Object.entries(options)) {
        if (command.getOptionValueSource(key) === "cli") flags[key] = value;
      }
      await serve(flags);
    });
  program.addCommand(keysCommand(DEFAULT_KEY_FILE));
  return program;
}

buildProgram()
  .parseAsync(process.argv)
  .catch((error: unknown) => {
    if (
      error instanceof ConfigError ||
      error instanceof StoreOpenError ||
      (error instanceof Error && error.name === "SparkError")
    ) {
      log(error.message);
      process.exit(2);
    }
    throw error;
  });
