/**
 * Everything `spark` (the TUI), `spark exec` and `spark resume` share: the settings, the server
 * (given with --server, or started in this process with the configured engine), the workspace,
 * the sandbox, the agent and its saved session.
 *
 * The server modules are imported lazily, so that a client of a remote server never loads them and
 * the TUI can draw its prompt before an in-process engine starts loading.
 */
import { Agent, type AgentEvent, type InputItem } from "../agent/agent.js";
import type { ApprovalMode } from "../agent/approval.js";
import { ResponsesSocket, httpBaseUrl } from "../agent/responses-socket.js";
import { detectSandbox, type Sandbox } from "../agent/sandbox.js";
import { SessionFile } from "../agent/session-file.js";
import { Checkpoints } from "../agent/checkpoints/checkpoints.js";
import type { ApprovalAnswer, ApprovalRequest, VisionInfo } from "../agent/tools.js";
import { Workspace } from "../agent/workspace.js";
import { SessionContext } from "../agent/context/session-context.js";
import { defaultDataDir } from "../store/data-dir.js";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { sparkHome } from "../agent/context/spark-home.js";
import { HookRunner } from "../agent/hooks/runner.js";
import { McpManager, type McpServerStatus } from "../agent/mcp/manager.js";
import { ConfigError, resolveSettings, type ResolvedSettings, type VariantsSettings } from "./config.js";
import type { TaskWorkspace } from "../agent/worktree/task-workspace.js";

export const DEFAULT_INSTRUCTIONS = `You are Spark, a fast coding agent working with a user in their terminal, in the workspace at WORKSPACE.
Use the tools to read, search and change the code: read_file, list_files and search to look; apply_patch to edit files (never write files with shell redirections when a patch will do); shell to build, test and inspect. Keep answers short and concrete. When the user steers you mid-answer, follow the new direction at once.`;

export interface ClientFlags {
  server?: string;
  apiKeyEnv?: string;
  tier?: string;
  approval?: ApprovalMode;
  sandbox?: "auto" | "off";
  network?: boolean;
  /** `--sandbox-allow-secrets`: sandboxed commands see the home directory's secrets and host sockets. */
  sandboxAllowSecrets?: boolean;
  /** `--allow-env`: secret-looking variables (names or `*` globs) commands may see. */
  allowEnv?: string[];
  autoCompact?: number;
  contextWindow?: number;
  cd?: string;
  /**
   * `--worktree`: the session works in a TaskWorkspace of its own (a git worktree on
   * `spark/<id>`, a copy outside git); nothing lands in the directory until `/apply`.
   */
  worktree?: boolean;
  /** Serve settings for an in-process server (--engine, --model, --script, --rate, --config…). */
  serve: Record<string, unknown>;
}

export interface RuntimeOptions {
  flags: ClientFlags;
  interactive: boolean;
  ask?: (request: ApprovalRequest) => Promise<ApprovalAnswer>;
  /** Progress lines while starting (engine loading…). */
  progress: (line: string) => void;
  /** Continue this saved session (`spark resume`); `null` means the newest. */
  resume?: string | null;
}

export interface Runtime {
  agent: Agent;
  session: SessionFile;
  workspace: Workspace;
  sandbox: Sandbox;
  approval: ApprovalMode;
  serverUrl: string;
  /** True when the server runs in this process. */
  inProcess: boolean;
  resumedItems: number;
  /** The configured MCP servers (`/status`), when there are any. */
  mcp?: McpManager;
  /** The project's AGENTS.md files, skills and custom prompts, loaded once for this session. */
  context: SessionContext;
  /** The tiers (model names) the server lists at `/v1/models`; undefined when it could not be read. */
  models: string[] | undefined;
  /** Each turn's checkpoint of the files it changed (`/undo`, `/redo`); interactive sessions only. */
  checkpoints?: Checkpoints;
  /** The directory the user started in: where `/apply` lands a `--worktree` session. */
  root: string;
  /** `--worktree`: where the session works (`workspace` is opened at its path). */
  taskWorkspace?: TaskWorkspace;
  /** The config's `variants` (check command, its timeout, how many run at once). */
  variants: VariantsSettings;
  allowEnv: readonly string[];
  /**
   * An agent for one variant (src/agent/variants/runner.ts): its own connection, tools rooted at
   * the variant's workspace, this session's sandbox, approvals, skills, MCP servers and hooks, the
   * conversation so far and the variant's temperature.
   */
  createVariantAgent(input: {
    workspace: TaskWorkspace;
    temperature: number;
    transcript: readonly InputItem[];
    ask?: (request: ApprovalRequest) => Promise<ApprovalAnswer>;
  }): Promise<Agent>;
  close(): Promise<void>;
}

export interface ResolvedClient {
  settings: ResolvedSettings;
  server: string | undefined;
  apiKey: string | undefined;
  tier: string;
  approval: ApprovalMode;
  sandbox: "auto" | "off";
  network: boolean;
  sandboxAllowSecrets: boolean;
  allowEnv: string[];
  autoCompact: number;
  contextWindow: number | undefined;
  dataDir: string;
}

/**
 * The config file the clients read: `--config`, else SPARK_CONFIG, else the user config
 * `SPARK_HOME/config.json` (`~/.spark/config.json`) when there is one. (`spark serve` reads only
 * the first two.) A workspace's own files are never read as config: hooks and MCP servers run
 * commands, and a cloned repository must not run commands on open.
 */
export function withUserConfig(serve: Record<string, unknown>): Record<string, unknown> {
  if (serve.config !== undefined || process.env.SPARK_CONFIG) return serve;
  const file = join(sparkHome(), "config.json");
  return existsSync(file) ? { ...serve, config: file } : serve;
}

/** A line for the user about an MCP server's state (undefined for states not worth a line). */
export function describeMcpStatus(status: McpServerStatus): string | undefined {
  if (status.state === "starting") {
    if (status.turnWentOn)
      return `MCP server ${status.name} is still starting: this turn goes on without its tools; they join once it is ready`;
    const seconds = Math.round((status.startingForMs ?? 0) / 1000);
    // The first report comes after a moment: a server that starts at once is not announced.
    return seconds < 1 ? undefined : `MCP server ${status.name}: starting… (${seconds} s)`;
  }
  if (status.state === "ready") {
    return `MCP server ${status.name}: ${status.tools.length} tool${status.tools.length === 1 ? "" : "s"}`;
  }
  if (status.state === "failed") {
    return `MCP server ${status.name} failed, its tools are unavailable: ${status.error ?? "no reason given"}`;
  }
  return undefined;
}

/**
 * The session's MCP servers (none configured: undefined), each status change reported as a line.
 * Not started: the caller starts them when its session is up.
 */
export function mcpManagerFor(
  client: ResolvedClient,
  cwd: string,
  report: (line: string) => void,
): McpManager | undefined {
  const servers = client.settings.mcpServers ?? {};
  if (Object.keys(servers).length === 0) return undefined;
  return new McpManager(servers, {
    cwd,
    onStatus: (status) => {
      const line = describeMcpStatus(status);
      if (line !== undefined) report(line);
    },
  });
}

/** Flags, then environment (SPARK_SERVER, SPARK_API_KEY), then the config file's `client`. */
export function resolveClient(flags: ClientFlags, interactive: boolean): ResolvedClient {
  const settings = resolveSettings(withUserConfig(flags.serve));
  const fromFile = settings.client ?? {};
  const apiKeyEnv = flags.apiKeyEnv ?? fromFile.apiKeyEnv ?? "SPARK_API_KEY";
  const server = flags.server ?? (process.env.SPARK_SERVER || undefined) ?? fromFile.server;
  if (server !== undefined) {
    try {
      new URL(server);
    } catch {
      throw new ConfigError(`--server ${server}: not a URL (e.g. http://127.0.0.1:8484)`);
    }
  }
  const autoCompact = flags.autoCompact ?? fromFile.autoCompact ?? 0.8;
  if (!(autoCompact >= 0 && autoCompact <= 1)) {
    throw new ConfigError(`--auto-compact ${autoCompact}: expected a fraction from 0 (off) to 1`);
  }
  return {
    settings,
    server,
    apiKey: process.env[apiKeyEnv] || undefined,
    tier: flags.tier ?? fromFile.tier ?? "spark",
    // Nobody can answer a question in `spark exec`: it defaults to running without asking.
    approval: flags.approval ?? fromFile.approval ?? (interactive ? "on-request" : "never"),
    sandbox: flags.sandbox ?? fromFile.sandbox ?? "auto",
    network: flags.network ?? fromFile.network ?? false,
    sandboxAllowSecrets: flags.sandboxAllowSecrets ?? fromFile.sandboxAllowSecrets ?? false,
    allowEnv: flags.allowEnv ?? fromFile.allowEnv ?? [],
    autoCompact,
    contextWindow: flags.contextWindow ?? fromFile.contextWindow,
    dataDir: settings.dataDir ?? defaultDataDir(),
  };
}

/** Starts `spark serve` inside this process on a free loopback port; resolves once its engines are ready. */
export async function startInProcessServer(
  settings: ResolvedSettings,
  progress: (line: string) => void,
): Promise<{ url: string; close(): Promise<void> }> {
  const [{ createModels }, { SparkServer }, { MemoryResponseStore }, { KeyRing }] = await Promise.all([
    import("./create-engine.js"),
    import("../server/http-server.js"),
    import("../core/response-store.js"),
    import("../core/keys.js"),
  ]);
  const models = await createModels({ ...settings, host: "127.0.0.1", port: 0 }, progress);
  const server = new SparkServer({
    models,
    keys: new KeyRing([], {}),
    store: new MemoryResponseStore(),
    admission: { maxQueue: settings.queueLength },
    host: "127.0.0.1",
    port: 0,
    maxBodyBytes: settings.maxBodyBytes,
    websocket: { maxConnectionMs: 24 * 60 * 60_000 },
  });
  const url = await server.listen();
  const started = performance.now();
  try {
    await Promise.all(models.engines().map((engine) => engine.start()));
  } catch (error) {
    // An engine that cannot load (no model file, offline) must not leave the port open: the
    // listening socket would keep the process alive after the UI quits.
    await server.close().catch(() => {});
    throw error;
  }
  const ms = Math.round(performance.now() - started);
  if (ms > 200) progress(`engine ready in ${ms} ms`);
  return { url, close: () => server.close() };
}

/** A model the server lists at `/v1/models`: its name and, when it says, its context window. */
export interface ServedModel {
  id: string;
  contextWindow?: number;
  /** It sees images (`vision`, a Spark extension); absent when the server does not say. */
  vision?: boolean;
}

/** The server's `/v1/models`, or undefined when it cannot be read (old server, network). */
export async function fetchModels(
  serverUrl: string,
  apiKey: string | undefined,
): Promise<ServedModel[] | undefined> {
  try {
    const response = await fetch(`${httpBaseUrl(serverUrl)}/models`, {
      headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {},
      signal: AbortSignal.timeout(5000),
    });
    if (!response.ok) return undefined;
    const body = (await response.json()) as {
      data?: { id?: unknown; context_window?: unknown; vision?: unknown }[];
    };
    if (!Array.isArray(body.data)) return undefined;
    return body.data.flatMap((m) => {
      if (typeof m.id !== "string") return [];
      const model: ServedModel = { id: m.id };
      if (typeof m.context_window === "number") model.contextWindow = m.context_window;
      if (typeof m.vision === "boolean") model.vision = m.vision;
      return [model];
    });
  } catch {
    return undefined;
  }
}

/** The context window of `model` in `models` (else the `spark` tier's), if the server says. */
export function contextWindowOf(
  models: readonly ServedModel[] | undefined,
  model: string,
): number | undefined {
  return (models?.find((m) => m.id === model) ?? models?.find((m) => m.id === "spark"))?.contextWindow;
}

/** Whether `model` sees images, by the server's `/v1/models`; undefined when it does not say. */
export function visionOf(models: readonly ServedModel[] | undefined, model: string): VisionInfo | undefined {
  const sees = models?.find((m) => m.id === model)?.vision;
  if (sees === undefined) return undefined;
  return { sees, anySees: models!.some((m) => m.vision === true) };
}

/** The context window of `model` from the server's `/v1/models` (`context_window`), if it says. */
export async function fetchContextWindow(
  serverUrl: string,
  apiKey: string | undefined,
  model: string,
): Promise<number | undefined> {
  return contextWindowOf(await fetchModels(serverUrl, apiKey), model);
}

/**
 * The session's AGENTS.md files, skills and custom prompts for the working directory `cwd`, with
 * the config's `client.projectDocFallbackFilenames` and `client.projectDocMaxBytes`.
 */
export function loadSessionContext(
  client: ResolvedClient,
  cwd: string,
  contextWindow: number | undefined,
): Promise<SessionContext> {
  const fromFile = client.settings.client ?? {};
  return SessionContext.load({
    cwd,
    ...(fromFile.projectDocFallbackFilenames
      ? { fallbackFilenames: fromFile.projectDocFallbackFilenames }
      : {}),
    ...(fromFile.projectDocMaxBytes === undefined ? {} : { maxBytes: fromFile.projectDocMaxBytes }),
    ...(contextWindow === undefined ? {} : { contextWindow }),
  });
}

/** The workspace at `root`; a usage error naming it when it is not a directory. */
export async function openWorkspace(root: string): Promise<Workspace> {
  try {
    return await Workspace.open(root);
  } catch (error) {
    throw new ConfigError(`cannot use ${root} as the workspace: ${(error as Error).message}`);
  }
}

/**
 * The TaskWorkspace of a `--worktree` session: `tui-<session id>` for the TUI, `exec-<session id>`
 * for `spark exec` (the prefixes tell them from the app's tasks and variants).
 */
async function createSessionWorkspace(
  root: string,
  interactive: boolean,
  sessionId: string,
): Promise<TaskWorkspace> {
  const { createTaskWorkspace } = await import("../agent/worktree/task-workspace.js");
  return createTaskWorkspace(root, `${interactive ? "tui" : "exec"}-${sessionId}`);
}

/** The command sandbox the client's settings ask for. */
export function clientSandbox(client: ResolvedClient): Promise<Sandbox> {
  return detectSandbox({
    disabled: client.sandbox === "off",
    network: client.network,
    allowSecrets: client.sandboxAllowSecrets,
    // Sessions (whole conversations) and the server's store live here.
    hide: [client.dataDir],
  });
}

export async function startRuntime(options: RuntimeOptions): Promise<Runtime> {
  const client = resolveClient(options.flags, options.interactive);
  const userWorkspace = await openWorkspace(options.flags.cd ?? process.cwd());
  let resumed: { file: SessionFile; transcript: InputItem[] } | undefined;
  if (options.resume !== undefined) {
    try {
      resumed = SessionFile.open(client.dataDir, options.resume ?? undefined);
    } catch (error) {
      throw new ConfigError((error as Error).message);
    }
  }
  const sandboxPromise = clientSandbox(client);

  let serverUrl = client.server;
  let closeServer: (() => Promise<void>) | undefined;
  if (serverUrl === undefined) {
    const server = await startInProcessServer(client.settings, options.progress);
    serverUrl = server.url;
    closeServer = () => server.close();
  }
  const url = serverUrl;
  const connect = (): Promise<ResponsesSocket> =>
    ResponsesSocket.connect(url, client.apiKey === undefined ? {} : { apiKey: client.apiKey });
  let socket: ResponsesSocket;
  try {
    socket = await connect();
  } catch (error) {
    await closeServer?.();
    throw error;
  }
  const [sandbox, models] = await Promise.all([sandboxPromise, fetchModels(serverUrl, client.apiKey)]);
  const contextWindow = client.contextWindow ?? contextWindowOf(models, client.tier);
  const session =
    resumed?.file ?? SessionFile.create(client.dataDir, { cwd: userWorkspace.root, model: client.tier });
  // `--worktree`: the session's tools, commands and context all work in its own workspace.
  let taskWorkspace: TaskWorkspace | undefined;
  let workspace = userWorkspace;
  if (options.flags.worktree) {
    try {
      taskWorkspace = await createSessionWorkspace(userWorkspace.root, options.interactive, session.meta.id);
      workspace = await openWorkspace(taskWorkspace.path);
    } catch (error) {
      socket.close();
      await closeServer?.();
      if (error instanceof ConfigError) throw error;
      throw new ConfigError(`--worktree: ${(error as Error).message}`);
    }
  }
  const context = await loadSessionContext(client, workspace.root, contextWindow);
  const mcp = mcpManagerFor(client, workspace.root, options.progress);
  // A checkpoint store that cannot open costs only /undo, never the session.
  const checkpoints = options.interactive
    ? await Checkpoints.open(workspace, session.meta.id).catch((error: unknown) => {
        options.progress(`checkpoints are off (no /undo): ${(error as Error).message}`);
        return undefined;
      })
    : undefined;
  const hooks = client.settings.hooks
    ? new HookRunner(client.settings.hooks, {
        cwd: workspace.root,
        sessionId: session.meta.id,
        transcriptPath: session.path,
      })
    : undefined;
  // A hook refused for running workspace code is said once, at start (the variants' are the same).
  for (const line of hooks?.refused ?? []) options.progress(`warning: ${line}`);
  const agent = new Agent({
    socket,
    reconnect: connect,
    serverUrl,
    ...(client.apiKey === undefined ? {} : { apiKey: client.apiKey }),
    tools: {
      workspace,
      sandbox,
      approval: client.approval,
      allowEnv: client.allowEnv,
      ...(options.ask ? { ask: options.ask } : {}),
      skills: context.skills,
      ...(mcp?.active ? { mcp } : {}),
      ...(hooks && hooks.size > 0 ? { hooks } : {}),
      vision: (model: string) => visionOf(models, model),
      ...(checkpoints ? { checkpoints } : {}),
    },
    model: client.tier,
    instructions: context.instructions(DEFAULT_INSTRUCTIONS.replace("WORKSPACE", workspace.root)),
    attachments: (text) => context.attachments(text),
    contextWindow: contextWindow ?? 8192,
    autoCompact: client.autoCompact,
    ...(resumed ? { transcript: resumed.transcript } : {}),
  });
  // Servers start now, in the background: the prompt never waits for them, the first turn does.
  mcp?.start();
  agent.on((event: AgentEvent) => {
    if (event.type !== "transcript.changed") return;
    if (event.reset) session.reset(event.items);
    else session.append(event.added);
  });
  const createVariantAgent: Runtime["createVariantAgent"] = async (input) => {
    const variantWorkspace = await openWorkspace(input.workspace.path);
    const variantSocket = await connect();
    const variantHooks = client.settings.hooks
      ? new HookRunner(client.settings.hooks, {
          cwd: variantWorkspace.root,
          sessionId: session.meta.id,
          transcriptPath: session.path,
        })
      : undefined;
    return new Agent({
      socket: variantSocket,
      reconnect: connect,
      serverUrl: url,
      ...(client.apiKey === undefined ? {} : { apiKey: client.apiKey }),
      tools: {
        workspace: variantWorkspace,
        sandbox,
        approval: client.approval,
        allowEnv: client.allowEnv,
        ...(input.ask ? { ask: input.ask } : {}),
        skills: context.skills,
        ...(mcp?.active ? { mcp } : {}),
        ...(variantHooks && variantHooks.size > 0 ? { hooks: variantHooks } : {}),
        vision: (model: string) => visionOf(models, model),
      },
      model: agent.model,
      instructions: context.instructions(DEFAULT_INSTRUCTIONS.replace("WORKSPACE", variantWorkspace.root)),
      attachments: (text) => context.attachments(text),
      contextWindow: contextWindow ?? 8192,
      autoCompact: client.autoCompact,
      transcript: input.transcript,
      temperature: input.temperature,
    });
  };
  return {
    agent,
    session,
    workspace,
    sandbox,
    approval: client.approval,
    serverUrl,
    inProcess: closeServer !== undefined,
    resumedItems: resumed?.transcript.length ?? 0,
    context,
    models: models?.map((m) => m.id),
    ...(checkpoints ? { checkpoints } : {}),
    root: userWorkspace.root,
    ...(taskWorkspace ? { taskWorkspace } : {}),
    variants: client.settings.variants ?? {},
    allowEnv: client.allowEnv,
    createVariantAgent,
    ...(mcp ? { mcp } : {}),
    async close() {
      agent.close();
      await Promise.all([mcp?.close(), closeServer?.()]);
    },
  };
}
