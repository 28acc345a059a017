/**
 * `spark app [DIR]`: the web app for the workspace DIR. Starts a Spark server in this process (or
 * uses `--server URL`) and the app's own server on loopback, and prints the app's URL.
 *
 * Start-up contract (figures 27 and 34): the app serves its page as soon as its own parts are
 * loaded. The in-process model server starts beside it, never before it: it listens at once and
 * loads its engine meanwhile, and a task's first turn waits for that engine (its context window is
 * asked once the engine is ready); nothing before the URL waits for the model server's network.
 */
import { detectSandbox } from "../agent/sandbox/sandbox.js";
import {
  clientSandbox,
  DEFAULT_INSTRUCTIONS,
  fetchContextWindow,
  fetchModels,
  loadSessionContext,
  openWorkspace,
  resolveClient,
  visionOf,
  type ClientFlags,
  type ServedModel,
} from "../client/agent-runtime.js";
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import type { KeyRing } from "../core/keys.js";
import { defaultDataDir } from "../store/data-dir.js";
import { sparkHome } from "../agent/context/spark-home.js";
import { join } from "node:path";
import { SessionContext } from "../agent/context/session-context.js";
import type { ResolvedSettings } from "../settings/config.js";
import { ConfigError } from "../settings/setting-names.js";
import { mcpManagerFor } from "../client/agent-runtime.js";
import { startInProcessServer } from "./in-process-server.js";
import type { VisionInfo } from "../agent/tools/index.js";

export interface AppFlags {
  host: string;
  port: number;
  /** Print nothing but the URL line (tests, scripts). */
  quiet?: boolean;
  /** `--allowed-host` / `--allowed-origin`: replace SPARK_ALLOWED_HOSTS / _ORIGINS and the config's. */
  allowedHosts?: readonly string[];
  allowedOrigins?: readonly string[];
  /** `--in-place`: tasks edit the workspace itself (default: a worktree, or copy, per task). */
  inPlace?: boolean;
}

export async function runApp(dir: string | undefined, flags: ClientFlags, app: AppFlags): Promise<number> {
  const log = (line: string): void => {
    if (!app.quiet) process.stderr.write(`spark app: ${line}\n`);
  };
  // The app has someone to ask: approvals are shown in the browser.
  const client = await resolveClient(flags, true);
  const workspace = await openWorkspace(dir ?? flags.cd ?? process.cwd());
  if (client.server === undefined) log("starting the model server…");
  // Everything the app needs before it serves, at once: its modules, the
  // project's context (loaded once: every task, background and delegated ones too, gets the same),
  // MCP and hooks, and the in-process model server, which listens before its engine has loaded.
  const [{ AppServer }, server, project, mcp, hooks] = await Promise.all([
    import("../app/app-server.js"),
    client.server === undefined
      ? startInProcessServer(client.settings, log, { waitForEngines: false, socket: true })
      : undefined,
    loadSessionContext(client, workspace.root, client.contextWindow),
    mcpManagerFor(client, workspace.root, log),
    client.settings.hooks
      ? import("../agent/hooks/runner.js").then(
          ({ HookRunner }) => new HookRunner(client.settings.hooks!, { cwd: workspace.root }),
        )
      : undefined,
  ]);
  const url = server?.url ?? client.server!;
  const closeServer = server && (() => server.close());
  // A task's first turn waits for the engine: its context window is asked once the engine is ready.
  const engineReady = server?.ready ?? Promise.resolve();
  const windows = contextWindows(url, client.apiKey, client.contextWindow, engineReady);
  // What the app asks the model server in the background waits until the app has served its page:
  // a moment after its URL is out, when the browser (or VS Code's pane) asks for it. A process
  // spawn blocks the main thread for ~10-30 ms here, a first request loads its modules.
  let served!: () => void;
  const listening = new Promise<void>((resolve) => (served = resolve)).then(
    () => new Promise<void>((resolve) => setTimeout(resolve, AFTER_PAGE_MS).unref()),
  );
  // So does the sandbox probe (it spawns bwrap): a task's first command waits for it, the page does not.
  const sandbox = listening.then(() => clientSandbox(client));
  for (const warning of project.warnings) log(`warning: ${warning}`);
  // MCP servers start once for the app, in the background; every task shares them.
  mcp?.start();
  for (const line of hooks?.refused ?? []) log(`warning: ${line}`);
  const allowedHosts = app.allowedHosts ?? client.settings.allowedHosts;
  const allowedOrigins = app.allowedOrigins ?? client.settings.allowedOrigins;
  let appServer;
  try {
    appServer = new AppServer({
      host: app.host,
      port: app.port,
      ...(client.apiKey === undefined ? {} : { accessKey: client.apiKey }),
      ...(allowedHosts ? { allowedHosts } : {}),
      ...(allowedOrigins ? { allowedOrigins } : {}),
      serverUrl: url,
      workspace,
      sandbox,
      approval: client.approval,
      allowEnv: client.allowEnv,
      dataDir: client.dataDir,
      taskWorkspaces: (app.inPlace ?? client.settings.client?.appInPlace) ? "in-place" : "auto",
      instructions: project.instructions(appInstructions(workspace.root)),
      project,
      autoCompact: client.autoCompact,
      ...(mcp ? { mcp } : {}),
      ...(hooks && hooks.size > 0 ? { hooks } : {}),
      ...(client.settings.variants ? { variants: client.settings.variants } : {}),
      contextWindow: windows,
      vision: servedVision(url, client.apiKey, listening),
      ...(closeServer === undefined ? { watchServer: true } : {}),
    });
  } catch (error) {
    await Promise.all([mcp?.close(), closeServer?.()]);
    throw new ConfigError((error as Error).message);
  }
  // One task's bug must not end the others: an error that escapes is logged and the app goes on.
  process.on("unhandledRejection", (reason: unknown) => log(`internal error: ${String(reason)}`));
  let appUrl: string;
  try {
    appUrl = await appServer.listen();
  } catch (error) {
    await closeServer?.();
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EADDRINUSE") {
      throw new ConfigError(
        `port ${app.port} on ${app.host} is in use (another spark app?): pass --port 0 for a free one, or another port`,
      );
    }
    throw new ConfigError(`the app cannot listen on ${app.host}:${app.port}: ${(error as Error).message}`);
  }
  // Signals are handled before the URL is out: whoever reads that line may stop the app at once (a
  // SIGTERM before the handler killed it outright, leaving its socket folder behind).
  let stopping = false;
  let finish!: (code: number) => void;
  const finished = new Promise<number>((resolve) => (finish = resolve));
  const stop = (): void => {
    stopping = true;
    finish(0);
  };
  process.once("SIGINT", stop);
  process.once("SIGTERM", stop);
  process.stdout.write(`spark app on ${appUrl} (workspace ${workspace.root})\n`);
  served();
  // `--server URL` with nothing there: said at once (not quiet: it is why nothing will answer), and
  // watched; what is typed in the meantime waits in its task and goes out once the server answers.
  // Messages held when the app last stopped go out once the server answers (its engine is ready).
  const watch = appServer.serverWatch;
  if (watch) {
    void watch.check().then((health) => {
      if (!health.reachable) {
        process.stderr.write(
          `spark app: the Spark server at ${url} is unreachable (${health.error ?? "no answer"}): ` +
            "start it (spark serve), or pass --server with its URL; messages typed in the app wait and are sent once it answers\n",
        );
      } else appServer.tasks.sendHeld();
      watch.start();
    });
  } else
    void engineReady.then(
      () => appServer.tasks.sendHeld(),
      () => {},
    );
  void sandbox.then((probed) => {
    if (probed.kind === "none") log(`commands run without a sandbox: ${probed.reason}`);
  });
  if (client.apiKey !== undefined) log("browsers sign in with the key in SPARK_API_KEY");
  // The in-process engine could not start (no model file, offline): said, and the app ends.
  engineReady.catch((error: unknown) => {
    if (stopping) return;
    process.stderr.write(
      `spark app: the model server could not start: ${error instanceof Error ? error.message : String(error)}\n`,
    );
    finish(2);
  });
  const code = await finished;
  await appServer.close();
  await Promise.all([mcp?.close(), closeServer?.()]);
  return code;
}

/** How long after printing its URL the app starts its background work (see `listening`). */
const AFTER_PAGE_MS = 300;

function appInstructions(root: string): string {
  return DEFAULT_INSTRUCTIONS.replace("in their terminal", "in a web app").replace("WORKSPACE", root);
}

/**
 * Context windows by model from the server's `/v1/models`, asked once per model (`fixed` wins),
 * once `ready` (the in-process engine has loaded) has settled.
 */
function contextWindows(
  serverUrl: string,
  apiKey: string | undefined,
  fixed: number | undefined,
  ready: Promise<void> = Promise.resolve(),
): (model: string) => Promise<number> {
  const known = new Map<string, number>();
  return async (model) => {
    const cached = known.get(model);
    if (cached !== undefined) return cached;
    await ready.catch(() => {});
    // Held: nothing else may be running yet to keep the process alive.
    const asked = fixed ?? (await fetchContextWindow(serverUrl, apiKey, model, { hold: true }));
    // Not known (the server did not answer): asked again next time, not fixed at the fallback.
    if (asked === undefined) return 8192;
    known.set(model, asked);
    return asked;
  };
}

/**
 * Who sees images, by the server's `/v1/models`: read once `begin` settles (the app serves its
 * page), and again while it could not be read, so a server that answers later is known from the
 * next tool result on. A question asked while the list is being read waits for it (`fetchModels`
 * gives up after 5 s): the answer must not depend on whether the list came before the tool result.
 */
function servedVision(
  serverUrl: string,
  apiKey: string | undefined,
  begin: Promise<void> = Promise.resolve(),
): (model: string) => Promise<VisionInfo | undefined> {
  let models: ServedModel[] | undefined;
  let asking: Promise<void> | undefined;
  const ask = (): Promise<void> =>
    (asking ??= fetchModels(serverUrl, apiKey).then((served) => {
      models = served;
      asking = undefined;
    }));
  const first = begin.then(ask);
  return async (model) => {
    await first;
    if (models === undefined) await ask();
    return visionOf(models, model);
  };
}

/** The app as `spark serve --app DIR` mounts it beside the API. */
export interface MountedApp {
  claims(path: string): boolean;
  request(request: IncomingMessage, response: ServerResponse): void;
  upgrade(request: IncomingMessage, socket: Socket, head: Buffer): void;
}

/**
 * The app for `spark serve --app DIR`: its agents use the server they are mounted on (over its own
 * URL, like any client), with the default client settings (approvals on request, the sandbox when
 * there is one). With keys, browsers sign in with any key the server accepts, each key sees only
 * the tasks it created, and their agents act with it. The server's allowed hosts and origins apply.
 */
export async function mountApp(
  dir: string,
  server: {
    serverUrl: string;
    settings: ResolvedSettings;
    keys: KeyRing;
    /**
     * A model's context window, asked in process: over HTTP `/v1/models` needs a key, which the
     * app holds only per owner, and a wrong window would compact every task far too early.
     */
    contextWindow?: (model: string) => number | undefined;
  },
): Promise<MountedApp> {
  const workspace = await openWorkspace(dir);
  const dataDir = server.settings.dataDir ?? defaultDataDir();
  const project = await SessionContext.load({
    cwd: workspace.root,
    ...(server.settings.client?.projectDocFallbackFilenames
      ? { fallbackFilenames: server.settings.client.projectDocFallbackFilenames }
      : {}),
    ...(server.settings.client?.projectDocMaxBytes === undefined
      ? {}
      : { maxBytes: server.settings.client.projectDocMaxBytes }),
    ...(server.contextWindow?.("spark") === undefined
      ? {}
      : { contextWindow: server.contextWindow("spark")! }),
  });
  const sandbox = await detectSandbox({ network: false, hide: [dataDir, join(sparkHome(), "config.json")] });
  const { AppServer } = await import("../app/app-server.js");
  let app;
  try {
    app = new AppServer({
      host: server.settings.host,
      port: 0,
      ...(server.keys.required
        ? {
            verifyKey: (key: string) => {
              try {
                return server.keys.authenticate(`Bearer ${key}`).id;
              } catch {
                return undefined;
              }
            },
          }
        : {}),
      ...(server.settings.allowedHosts ? { allowedHosts: server.settings.allowedHosts } : {}),
      ...(server.settings.allowedOrigins ? { allowedOrigins: server.settings.allowedOrigins } : {}),
      serverUrl: server.serverUrl,
      workspace,
      sandbox,
      approval: "on-request",
      allowEnv: [],
      dataDir,
      instructions: project.instructions(appInstructions(workspace.root)),
      project,
      autoCompact: 0.8,
      ...(server.settings.variants ? { variants: server.settings.variants } : {}),
      contextWindow: server.contextWindow
        ? async (model: string) => server.contextWindow?.(model) ?? 8192
        : contextWindows(server.serverUrl, undefined, undefined),
      vision: servedVision(server.serverUrl, undefined),
    });
  } catch (error) {
    throw new ConfigError(`--app: ${(error as Error).message}`);
  }
  app.listeningOn(server.settings.host);
  return app;
}
