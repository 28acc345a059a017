/**
 * `spark serve` inside this process, for a client session given no `--server` (the TUI, `spark
 * exec`, `spark app`): the engines the settings name, on a free loopback port, with a memory store
 * and no keys. The client runtime (src/client) is handed this function and never imports the
 * server's layers; its modules load only when a server is started here.
 */
import type { InProcessServer } from "../client/agent-runtime.js";
import type { ResolvedSettings } from "../settings/config.js";

/**
 * Starts `spark serve` inside this process on a free loopback port: resolves once it listens (and
 * with `waitForEngines`, the default, once its engines are ready too); the engines load meanwhile.
 * `socket`: on a Unix socket in a private folder instead (`unix:PATH`; TCP on Windows), so that it
 * adds no TCP port beside its client's (`spark app`: an editor forwards every port it sees).
 */
export async function startInProcessServer(
  settings: ResolvedSettings,
  progress: (line: string) => void,
  options: { waitForEngines?: boolean; socket?: boolean } = {},
): Promise<InProcessServer> {
  const [{ createModels }, { SparkServer }, { MemoryResponseStore }, { KeyRing }] = await Promise.all([
    import("./create-engine.js"),
    import("../server/http-server.js"),
    import("../core/response-store.js"),
    import("../core/keys.js"),
  ]);
  const socketDir =
    options.socket && process.platform !== "win32"
      ? await import("../agent/fs/spark-data.js").then(({ privateSocketDir }) => privateSocketDir())
      : undefined;
  const models = await createModels({ ...settings, host: "127.0.0.1", port: 0 }, progress);
  const server = new SparkServer({
    models,
    keys: new KeyRing([], {}),
    store: new MemoryResponseStore(),
    admission: { maxQueue: settings.queueLength },
    host: "127.0.0.1",
    port: 0,
    ...(socketDir ? { socketPath: socketDir.socket } : {}),
    maxBodyBytes: settings.maxBodyBytes,
    websocket: { maxConnectionMs: 24 * 60 * 60_000 },
  });
  const close = async (): Promise<void> => {
    await server.close();
    await socketDir?.remove();
  };
  const url = await server.listen();
  const started = performance.now();
  const ready = Promise.all(models.engines().map((engine) => engine.start())).then(
    () => {
      const ms = Math.round(performance.now() - started);
      if (ms > 200) progress(`engine ready in ${ms} ms`);
    },
    async (error: unknown) => {
      await close().catch(() => {});
      throw error;
    },
  );
  ready.catch(() => {});
  if (options.waitForEngines !== false) await ready;
  return { url, ready, close };
}
