/**
 * The settings' defaults, environment variable names and error class, apart from their schema so
 * that commands which do not read settings (the TUI's first paint, `--help`) do not load zod.
 * This module imports nothing: config.ts, which holds the schema, checks these against it.
 */

export class ConfigError extends Error {}

export const DEFAULT_SETTINGS = {
  host: "127.0.0.1",
  port: 8484,
  engine: "llama",
  download: true,
  gpu: "auto",
  upstreamApi: "chat",
  allowUnauthenticated: false,
  queueLength: 256,
  store: "sqlite",
  storeTimeout: 10,
  redisFailure: "open",
  redisLease: 30,
  drainTimeout: 30,
  maxBodyBytes: 16 * 1024 * 1024,
  websocket: true,
  websocketMaxMinutes: 60,
  websocketHistoryMib: 256,
  maxConnections: 4096,
  headerTimeout: 15,
  requestTimeout: 120,
} as const;

/** Environment variable for each setting (but those only a config file can hold: config.ts checks). */
const envNames = {
  host: "SPARK_HOST",
  port: "SPARK_PORT",
  engine: "SPARK_ENGINE",
  model: "SPARK_MODEL",
  download: "SPARK_DOWNLOAD",
  threads: "SPARK_THREADS",
  contextSize: "SPARK_CONTEXT_SIZE",
  sequences: "SPARK_SEQUENCES",
  inputLookup: "SPARK_INPUT_LOOKUP",
  draftModel: "SPARK_DRAFT_MODEL",
  embeddingModel: "SPARK_EMBEDDING_MODEL",
  llamaServer: "SPARK_LLAMA_SERVER",
  mmproj: "SPARK_MMPROJ",
  gpu: "SPARK_GPU",
  upstream: "SPARK_UPSTREAM",
  upstreamApiKeyEnv: "SPARK_UPSTREAM_API_KEY_ENV",
  upstreamApi: "SPARK_UPSTREAM_API",
  upstreamModel: "SPARK_UPSTREAM_MODEL",
  upstreamTimeout: "SPARK_UPSTREAM_TIMEOUT",
  script: "SPARK_SCRIPT",
  rate: "SPARK_RATE",
  keyFile: "SPARK_KEY_FILE",
  maxOutputTokens: "SPARK_MAX_OUTPUT_TOKENS",
  allowUnauthenticated: "SPARK_ALLOW_UNAUTHENTICATED",
  queueLength: "SPARK_QUEUE_LENGTH",
  store: "SPARK_STORE",
  storeTimeout: "SPARK_STORE_TIMEOUT",
  redis: "SPARK_REDIS",
  redisFailure: "SPARK_REDIS_FAILURE",
  redisLease: "SPARK_REDIS_LEASE",
  drainTimeout: "SPARK_DRAIN_TIMEOUT",
  instanceId: "SPARK_INSTANCE_ID",
  dataDir: "SPARK_DATA_DIR",
  maxBodyBytes: "SPARK_MAX_BODY_BYTES",
  websocket: "SPARK_WEBSOCKET",
  websocketMaxMinutes: "SPARK_WEBSOCKET_MAX_MINUTES",
  websocketHistoryMib: "SPARK_WEBSOCKET_HISTORY_MIB",
  maxConnections: "SPARK_MAX_CONNECTIONS",
  headerTimeout: "SPARK_HEADER_TIMEOUT",
  requestTimeout: "SPARK_REQUEST_TIMEOUT",
  allowedHosts: "SPARK_ALLOWED_HOSTS",
  allowedOrigins: "SPARK_ALLOWED_ORIGINS",
};
/** Environment variable for each setting (the names above: a string each). */
export const ENV_NAMES: Record<keyof typeof envNames, string> = envNames;
