/**
 * `spark serve`: builds the models, keys and store from the settings and runs the server until a
 * signal. SIGTERM drains (a rolling restart: in-flight responses finish, for up to
 * `--drain-timeout`); SIGINT, or a second signal, ends what is left with `server_shutdown`.
 */
import { KeyRing, type KeyRecord } from "../core/keys.js";
import { Metrics } from "../core/metrics.js";
import { MemoryResponseStore, type ResponseStore } from "../core/response-store.js";
import { SparkServer } from "../server/http-server.js";
import { StoreOpenError } from "../store/open-error.js";
import { defaultDataDir, SqliteResponseStore } from "../store/sqlite-store.js";
import { ConfigError, loadKeyFile, resolveSettings, type ResolvedSettings } from "../settings/config.js";
import { createModels } from "./create-engine.js";
import { mountApp, type MountedApp } from "./app-command.js";
import { describePortHolder } from "./port-holder.js";
import type { Fleet } from "./fleet.js";
import { watchKeyFile } from "./key-file-watch.js";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";

const MIB = 1024 * 1024;

const log = (line: string): void => {
  // Once stderr has failed (see `guardStdio`) there is nowhere to write: the line is dropped.
  if (!process.stderr.destroyed) process.stderr.write(`spark: ${line}\n`);
};

/**
 * A reader of stdout or stderr that went away (`spark serve 2>&1 | head -3`, a dead log collector)
 * must neither stop the server nor loop: the failed write (EPIPE) arrives as an 'error' event, which
 * without a listener is an uncaught exception whose handler logs it to the same broken stream, which
 * fails again, for ever. The error is swallowed here; the stream is destroyed by it, and `log`
 * writes nothing after that. The server goes on serving and still exits on a signal.
 */
function guardStdio(): void {
  for (const stream of [process.stdout, process.stderr]) stream.on("error", () => {});
}

function detail(error: unknown): string {
  return error instanceof Error ? (error.stack ?? error.message) : String(error);
}

function isLoopback(host: string): boolean {
  return host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/** Keys from the config and the key file, checked for duplicates; the server never sees a key itself. */
function loadKeys(settings: ResolvedSettings): KeyRecord[] {
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
  return sources.flatMap(([, records]) => records);
}

/**
 * Re-reads the keys when the key file changes: all of the new file or none of it (a file that does
 * not load keeps the last good keys, and the log says why). A key the new file no longer lists is
 * revoked for the whole fleet when Redis is shared, so instances with another copy of the file
 * refuse it too.
 */
function reloadKeys(
  settings: ResolvedSettings,
  keys: KeyRing,
  current: { records: KeyRecord[] },
  fleet: Fleet | undefined,
): void {
  let records: KeyRecord[];
  try {
    records = loadKeys(settings);
  } catch (error) {
    log(
      `${error instanceof Error ? error.message : String(error)}; keeping the last good keys (${current.records.length})`,
    );
    return;
  }
  const kept = new Set(records.map((record) => record.hash.toLowerCase()));
  const removed = current.records.filter((record) => !kept.has(record.hash.toLowerCase()));
  const before = new Set(current.records.map((record) => record.hash.toLowerCase()));
  const added = records.filter((record) => !before.has(record.hash.toLowerCase()));
  keys.replace(records, settings.limits ?? {});
  current.records = records;
  log(
    `key file ${settings.keyFile} reloaded: ${records.length} key(s)` +
      (added.length > 0 ? `, added ${added.map((r) => `"${r.id}"`).join(", ")}` : "") +
      (removed.length > 0 ? `, removed ${removed.map((r) => `"${r.id}"`).join(", ")} (401 from now on)` : ""),
  );
  for (const record of removed) {
    keys.revoke(record.hash);
    void fleet?.revoke(record.hash, record.id);
  }
}

/** `--store`: memory, a Postgres database several instances share (its driver loaded only then), or SQLite. */
async function openStore(settings: ResolvedSettings): Promise<ResponseStore> {
  if (settings.store === "memory") return new MemoryResponseStore();
  try {
    if (/^postgres(ql)?:\/\//i.test(settings.store)) {
      const { PostgresResponseStore } = await import("../store/postgres-store.js");
      return await PostgresResponseStore.open(settings.store, {
        timeoutMs: Math.round(settings.storeTimeout * 1000),
      });
    }
    return SqliteResponseStore.open(settings.dataDir ?? defaultDataDir());
  } catch (error) {
    if (error instanceof StoreOpenError) throw new ConfigError(error.message);
    throw error;
  }
}

function storeDescription(settings: ResolvedSettings, store: ResponseStore): string {
  if (settings.store === "memory") return "responses stored in memory only (--store memory)";
  if ("url" in store && typeof store.url === "string")
    return `responses stored in PostgreSQL at ${store.url}, shared with every instance that uses it`;
  return `responses stored in ${settings.dataDir ?? defaultDataDir()}`;
}

/**
 * Binds the port; a port that cannot be bound is the user's to fix (exit 2 through ConfigError),
 * not an internal error: the message says who holds it, when that can be found cheaply, and what
 * to do instead.
 */
async function listenOrExplain(server: SparkServer, settings: ResolvedSettings): Promise<string> {
  try {
    return await server.listen();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const where = `${settings.host}:${settings.port}`;
    if (code === "EADDRINUSE") {
      const holder = describePortHolder(settings.port);
      throw new ConfigError(
        `port ${settings.port} on ${settings.host} is in use` +
          (holder ? ` by ${holder}: stop it,` : " (another spark serve?):") +
          ` or pass --port 0 for a free port (or --port N for another one)`,
      );
    }
    if (code === "EACCES")
      throw new ConfigError(
        `not allowed to listen on ${where} (ports below 1024 need privileges): pass --port 0 for a free port, or a port above 1023`,
      );
    if (code === "EADDRNOTAVAIL" || code === "ENOTFOUND" || code === "EAI_AGAIN")
      throw new ConfigError(
        `cannot listen on ${where}: --host ${settings.host} is not an address of this machine`,
      );
    throw new ConfigError(`cannot listen on ${where}: ${(error as Error).message}`);
  }
}

export async function serve(allFlags: Record<string, unknown>): Promise<void> {
  const { app: appDir, ...flags } = allFlags;
  guardStdio();
  const settings = resolveSettings(flags);
  const keyRecords = { records: loadKeys(settings) };
  const keys = new KeyRing(keyRecords.records, settings.limits ?? {});
  if (!keys.required && !isLoopback(settings.host) && !settings.allowUnauthenticated) {
    throw new ConfigError(
      `no API keys are configured, so Spark only listens on loopback; --host ${settings.host} needs keys ` +
        `(spark keys create --name NAME, then --key-file) or --allow-unauthenticated`,
    );
  }
  // Process metrics too (heap, RSS, event-loop lag): what an operator watches for the bounds.
  const metrics = new Metrics({ processMetrics: true });
  const models = await createModels(settings, log, metrics.registry);
  const store = await openStore(settings);
  // `--redis`: limits, revocations and the queue view shared with the other instances (the client
  // loaded only then).
  const fleet = settings.redis
    ? await (
        await import("./fleet.js")
      ).Fleet.open({
        url: settings.redis,
        failure: settings.redisFailure,
        leaseMs: settings.redisLease * 1000,
        keys,
        log,
      })
    : undefined;
  // `--app DIR`: the web app beside the API, created once the server's URL is known. Until it is,
  // its pages answer 503 (not the API's 404, which a browser would keep showing), and the
  // "listening" line, the sign that the server is ready, waits for it.
  let app: MountedApp | undefined;
  const mount =
    typeof appDir === "string"
      ? {
          claims: (path: string) => app?.claims(path) ?? (path === "/" || path.startsWith("/app/")),
          request: (request: IncomingMessage, response: ServerResponse) => {
            if (app) return app.request(request, response);
            response.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
            response.end(
              JSON.stringify({
                error: {
                  message: "the web app is starting; retry in a moment",
                  type: "server_error",
                  code: "app_starting",
                },
              }),
            );
          },
          upgrade: (request: IncomingMessage, socket: Socket, head: Buffer) => {
            if (app) return app.upgrade(request, socket, head);
            socket.end("HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n");
          },
        }
      : undefined;
  const server = new SparkServer({
    ...(mount ? { mount } : {}),
    metrics,
    models,
    keys,
    store,
    admission: { maxQueue: settings.queueLength },
    ...(fleet ? { shared: fleet.shared } : {}),
    host: settings.host,
    port: settings.port,
    maxBodyBytes: settings.maxBodyBytes,
    log,
    websocket: settings.websocket && {
      maxConnectionMs: settings.websocketMaxMinutes * 60_000,
      historyBytesTotal: settings.websocketHistoryMib * MIB,
      limits: {
        historyBytes: Math.min(64 * MIB, Math.floor((settings.websocketHistoryMib * MIB) / 4)),
        maxQueued: Math.max(1, settings.queueLength),
      },
    },
    maxConnections: settings.maxConnections,
    ...(settings.instanceId ? { instanceId: settings.instanceId } : {}),
    headersTimeoutMs: settings.headerTimeout * 1000,
    requestTimeoutMs: settings.requestTimeout * 1000,
    ...(settings.allowedHosts ? { allowedHosts: settings.allowedHosts } : {}),
    ...(settings.allowedOrigins ? { allowedOrigins: settings.allowedOrigins } : {}),
  });
  fleet?.attach(server, metrics);
  const stopWatching = settings.keyFile
    ? watchKeyFile(settings.keyFile, () => reloadKeys(settings, keys, keyRecords, fleet), log)
    : () => {};
  // Handlers before listening: a signal that arrives once the port is announced must not find the
  // default disposition (which kills the process without a terminal event or exit 0).
  // SIGTERM (a rolling restart, systemd, docker stop) drains; SIGINT (Ctrl-C) and a second signal
  // end what is left at once with `server_shutdown`; a third exits without waiting.
  let signals = 0;
  const stop = (signal: string): void => {
    signals++;
    if (signals > 2) {
      log(`${signal} again: exiting now`);
      process.exit(130);
    }
    if (signals === 2 || signal === "SIGINT") {
      log(`${signal}: ending in-flight responses (server_shutdown) and shutting down`);
      void server.close();
    } else {
      log(
        `${signal}: draining: no new connections or turns; in-flight responses finish (up to ${settings.drainTimeout} s, ` +
          `--drain-timeout), WebSocket clients are told to reconnect (1012); send the signal again to end them now`,
      );
    }
    if (signals > 1) return;
    const stopped = signal === "SIGINT" ? server.close() : server.drain(settings.drainTimeout * 1000);
    stopped
      .then(async () => {
        stopWatching();
        await fleet?.close();
      })
      .then(
        () => process.exit(0),
        (error: unknown) => {
          log(`shutdown error: ${String(error)}`);
          process.exit(1);
        },
      );
  };
  process.on("SIGINT", () => stop("SIGINT"));
  process.on("SIGTERM", () => stop("SIGTERM"));
  // The last line of defence. Every transport path catches its own errors and ends only the request
  // or frame they belong to; an error that still escapes is a bug, and one request's bug must not
  // end every other user's responses: it is logged with its stack and the server keeps serving.
  process.on("unhandledRejection", (reason: unknown) =>
    log(`internal error (unhandled rejection): ${detail(reason)}`),
  );
  process.on("uncaughtException", (error: Error) =>
    log(`internal error (uncaught exception): ${detail(error)}`),
  );
  const url = await listenOrExplain(server, settings);
  if (typeof appDir === "string") {
    try {
      app = await mountApp(appDir, {
        serverUrl: url,
        settings,
        keys,
        contextWindow: (model) => {
          const list = models.list();
          return (list.find((m) => m.id === model) ?? list.find((m) => m.id === "spark"))?.contextWindow;
        },
      });
    } catch (error) {
      await server.close();
      throw error;
    }
  }
  if (!process.stdout.destroyed) process.stdout.write(`spark listening on ${url}\n`);
  if (typeof appDir === "string") {
    log(`web app for ${appDir} on ${url}/` + (keys.required ? " (browsers sign in with an API key)" : ""));
  }
  const engines = models.engines();
  log(
    `models ${models
      .entries()
      .map((e) => `${e.alias} (${e.tier}, ${e.engine.kind}, ${e.capacity} at once)`)
      .join(", ")} and auto; ` +
      `POST ${url}/v1/responses, ${url}/v1/chat/completions, ${url}/v1/completions; GET /v1/models, /healthz, /metrics; ` +
      (settings.websocket ? `WebSocket ${url.replace(/^http/, "ws")}/v1/responses` : "WebSocket mode off"),
  );
  log(
    keys.required
      ? `${keys.size} API key(s) configured: requests need 'Authorization: Bearer KEY'`
      : `no API keys configured: anyone who can reach ${settings.host} can use this server` +
          (isLoopback(settings.host) ? " (loopback only; add keys with `spark keys create`)" : ""),
  );
  log(storeDescription(settings, store));

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
