/**
 * Everything `spark` (the TUI), `spark exec` and `spark resume` share: the settings, the server
 * (given with --server, or started in this process with the configured engine), the workspace,
 * the sandbox, the agent and its saved session.
 *
 * Start-up contract (figure 34): the first request goes out as soon as the connection is open and
 * what that request carries is loaded (the settings, the workspace's AGENTS.md files and skills).
 * The connection opens first, while those load; nothing on that path waits for the network beyond
 * the connection itself: the server's model list (`/v1/models`: context windows, vision), the
 * sandbox probe and the checkpoint store arrive in the background, and what needs them waits for
 * them there (a command for the sandbox, an undo for the checkpoints). Modules load when used: the
 * server's for an in-process server only, zod only when there are settings to validate, hooks and
 * MCP only when configured.
 */
import { Agent, type AgentEvent, type InputItem } from "../agent/agent.js";
import type { ApprovalMode } from "../agent/tools/approval.js";
import { ResponsesSocket } from "../agent/responses-socket.js";
import { detectSandbox, type Sandbox } from "../agent/sandbox/sandbox.js";
import { SessionFile } from "../agent/session-file.js";
import type { Checkpoints } from "../agent/checkpoints/checkpoints.js";
import { DeferredRecorder } from "../agent/checkpoints/deferred-recorder.js";
import type { ApprovalAnswer, ApprovalRequest } from "../agent/tools/index.js";
import { Workspace } from "../agent/files/workspace.js";
import { sparkHome } from "../agent/context/spark-home.js";
import { join } from "node:path";
import { SessionContext } from "../agent/context/session-context.js";
import type { HookRunner } from "../agent/hooks/runner.js";
import type { McpManager, McpServerStatus } from "../agent/mcp/manager.js";
import type { HooksConfig } from "../agent/hooks/config.js";
import type { ResolvedSettings, VariantsSettings } from "../settings/config.js";
import { ConfigError } from "../settings/setting-names.js";
import type { TaskWorkspace } from "../agent/worktree/task-workspace.js";
import { peekServer, resolveClient, type ClientFlags, type ResolvedClient } from "./client-settings.js";
import { contextWindowOf, fetchModels, visionOf, type ServedModel } from "./served-models.js";

export { resolveClient, withUserConfig, loadSettings } from "./client-settings.js";
export type { ClientFlags, ResolvedClient } from "./client-settings.js";
export { contextWindowOf, fetchContextWindow, fetchModels, visionOf } from "./served-models.js";
export type { ServedModel } from "./served-models.js";

export const DEFAULT_INSTRUCTIONS = `You are Spark, a fast coding agent working with a user in their terminal, in the workspace at WORKSPACE.
Use the tools to read, search and change the code: read_file, list_files and search to look; apply_patch to edit files (never write files with shell redirections when a patch will do); shell to build, test and inspect. Keep answers short and concrete. When the user steers you mid-answer, follow the new direction at once.`;

export interface RuntimeOptions {
  flags: ClientFlags;
  interactive: boolean;
  ask?: (request: ApprovalRequest) => Promise<ApprovalAnswer>;
  /** Progress lines while starting (engine loading…). */
  progress: (line: string) => void;
  /** Continue this saved session (`spark resume`); `null` means the newest. */
  resume?: string | null;
  /** Starts the server in this process when the settings name none (`--server` not given). */
  startServer: StartServer;
}

export interface Runtime {
  agent: Agent;
  session: SessionFile;
  workspace: Workspace;
  /** The command sandbox, probed in the background (commands wait for it, the first request does not). */
  sandbox: Promise<Sandbox>;
  approval: ApprovalMode;
  serverUrl: string;
  /** True when the server runs in this process. */
  inProcess: boolean;
  resumedItems: number;
  /** The configured MCP servers (`/status`), when there are any. */
  mcp?: McpManager;
  /** The project's AGENTS.md files, skills and custom prompts, loaded once for this session. */
  context: SessionContext;
  /**
   * The tiers (model names) the server lists at `/v1/models`; undefined until it answered, or when
   * it could not be read. `modelsRead` settles once it has been asked.
   */
  readonly models: string[] | undefined;
  modelsRead: Promise<void>;
  /** Asks for the model list now if it was waiting for the first answer; settles as `modelsRead`. */
  modelsKnown(): Promise<void>;
  /**
   * Each turn's checkpoint of the files it changed (`/undo`, `/redo`), once its store is open;
   * interactive sessions only (undefined otherwise, or when the store cannot open).
   */
  checkpoints: Promise<Checkpoints | undefined>;
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
export async function mcpManagerFor(
  client: ResolvedClient,
  cwd: string,
  report: (line: string) => void,
): Promise<McpManager | undefined> {
  const servers = client.settings.mcpServers ?? {};
  if (Object.keys(servers).length === 0) return undefined;
  const { McpManager } = await import("../agent/mcp/manager.js");
  return new McpManager(servers, {
    cwd,
    onStatus: (status) => {
      const line = describeMcpStatus(status);
      if (line !== undefined) report(line);
    },
  });
}

/** `spark serve` inside this process, listening on a free loopback port. */
export interface InProcessServer {
  url: string;
  /**
   * Settles once its engines are ready (a model loaded); rejects when one cannot start, after the
   * server has closed (an open port would keep the process alive after the UI quits).
   */
  ready: Promise<void>;
  close(): Promise<void>;
}

/**
 * Starts `spark serve` inside this process (src/cli/in-process-server.ts): the CLI, which sits above
 * the server, hands it to the runtime, which never imports the server's layers itself.
 */
export type StartServer = (
  settings: ResolvedSettings,
  progress: (line: string) => void,
  options?: { waitForEngines?: boolean; socket?: boolean },
) => Promise<InProcessServer>;

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
    // Sessions (whole conversations) and the server's store live here; the config holds tokens.
    hide: [client.dataDir, join(sparkHome(), "config.json")],
  });
}

/** Tiers every Spark server serves. */
const EVERY_SERVERS_TIERS = new Set(["spark", "deep", "auto"]);

/** How long background work waits for the session's first answer to start before it starts anyway. */
const BACKGROUND_DELAY_MS = 1000;

/**
 * A gate for the session's background work (the sandbox probe, the model list, the checkpoint
 * store): it opens when the first answer starts arriving (its first text, tool call or end), so
 * that no process spawn or request competes with the first token, or after a second without one.
 */
class FirstAnswer {
  readonly opened: Promise<void>;
  #open!: () => void;

  constructor() {
    this.opened = new Promise((resolve) => (this.#open = resolve));
    setTimeout(() => this.#open(), BACKGROUND_DELAY_MS).unref();
  }

  /** Opens the gate now (someone needs what waits behind it). */
  open(): void {
    this.#open();
  }

  watch(agent: Agent): void {
    const stop = agent.on((event) => {
      if (event.type === "turn.started" || event.type === "transcript.changed") return;
      stop();
      this.#open();
    });
  }

  /** `work`, started once the gate opens. */
  after<T>(work: () => Promise<T>): Promise<T> {
    return this.opened.then(work);
  }
}

/** Opens a connection; a failure waits for whoever awaits it (never an unhandled rejection). */
function connectTo(url: string, apiKey: string | undefined): Promise<ResponsesSocket> {
  const socket = ResponsesSocket.connect(url, apiKey === undefined ? {} : { apiKey });
  socket.catch(() => {});
  return socket;
}

/** Closes a connection opened early that the session does not use. */
function discard(socket: Promise<ResponsesSocket> | undefined): void {
  void socket?.then(
    (open) => open.close(),
    () => {},
  );
}

/** The session's hooks, when the config has any (their module loads only then). */
async function hookRunner(
  hooks: HooksConfig | undefined,
  options: { cwd: string; sessionId: string; transcriptPath: string },
): Promise<HookRunner | undefined> {
  if (!hooks) return undefined;
  const { HookRunner } = await import("../agent/hooks/runner.js");
  return new HookRunner(hooks, options);
}

export async function startRuntime(options: RuntimeOptions): Promise<Runtime> {
  // The connection opens first, to the server the settings most likely name (checked below, once
  // they are validated); the settings, the workspace and its context load meanwhile.
  const peeked = peekServer(options.flags);
  let early = peeked && { ...peeked, socket: connectTo(peeked.url, peeked.apiKey) };
  let client: ResolvedClient;
  let userWorkspace: Workspace;
  try {
    [client, userWorkspace] = await Promise.all([
      resolveClient(options.flags, options.interactive),
      openWorkspace(options.flags.cd ?? process.cwd()),
    ]);
  } catch (error) {
    discard(early?.socket);
    throw error;
  }
  if (early && (early.url !== client.server || early.apiKey !== client.apiKey)) {
    discard(early.socket);
    early = undefined;
  }
  let resumed: { file: SessionFile; transcript: InputItem[] } | undefined;
  if (options.resume !== undefined) {
    try {
      resumed = SessionFile.open(client.dataDir, options.resume ?? undefined);
    } catch (error) {
      discard(early?.socket);
      throw new ConfigError((error as Error).message);
    }
  }
  const firstAnswer = new FirstAnswer();
  const sandbox = firstAnswer.after(() => clientSandbox(client));

  let serverUrl = client.server;
  let closeServer: (() => Promise<void>) | undefined;
  if (serverUrl === undefined) {
    // On a Unix socket: no TCP port for a remote editor's terminal to forward.
    const server = await options.startServer(client.settings, options.progress, { socket: true });
    serverUrl = server.url;
    closeServer = () => server.close();
  }
  const url = serverUrl;
  const connect = (): Promise<ResponsesSocket> =>
    ResponsesSocket.connect(url, client.apiKey === undefined ? {} : { apiKey: client.apiKey });
  const socketPromise = early?.socket ?? connectTo(url, client.apiKey);
  // The server's model list (context windows, vision) is read beside the session, never before it.
  let served: ServedModel[] | undefined;
  // A resumed conversation may need compacting at once: its first request waits for the window.
  // So does a tier that not every server serves (the TUI falls back to spark when it is not served).
  const modelsFirst =
    ((resumed?.transcript.length ?? 0) > 0 && client.contextWindow === undefined) ||
    !EVERY_SERVERS_TIERS.has(client.tier);
  const listModels = (): Promise<ServedModel[] | undefined> => fetchModels(url, client.apiKey);
  const modelsRead = (modelsFirst ? listModels() : firstAnswer.after(listModels)).then((models) => {
    served = models;
  });
  const session =
    resumed?.file ?? SessionFile.create(client.dataDir, { cwd: userWorkspace.root, model: client.tier });
  const fail = async (error: unknown): Promise<never> => {
    discard(socketPromise);
    await closeServer?.();
    throw error;
  };
  // `--worktree`: the session's tools, commands and context all work in its own workspace.
  let taskWorkspace: TaskWorkspace | undefined;
  let workspace = userWorkspace;
  if (options.flags.worktree) {
    try {
      taskWorkspace = await createSessionWorkspace(userWorkspace.root, options.interactive, session.meta.id);
      workspace = await openWorkspace(taskWorkspace.path);
    } catch (error) {
      await fail(
        error instanceof ConfigError ? error : new ConfigError(`--worktree: ${(error as Error).message}`),
      );
    }
  }
  const hookOptions = { cwd: workspace.root, sessionId: session.meta.id, transcriptPath: session.path };
  let socket: ResponsesSocket;
  let context: SessionContext;
  let mcp: McpManager | undefined;
  let hooks: HookRunner | undefined;
  try {
    [socket, context, mcp, hooks] = await Promise.all([
      socketPromise,
      loadSessionContext(client, workspace.root, client.contextWindow),
      mcpManagerFor(client, workspace.root, options.progress),
      hookRunner(client.settings.hooks, hookOptions),
    ]);
  } catch (error) {
    return fail(error);
  }
  if (modelsFirst) await modelsRead;
  const windowOf = (): number | undefined =>
    client.contextWindow ??
    (served === undefined ? undefined : (contextWindowOf(served, client.tier) ?? 8192));
  // A checkpoint store that cannot open costs only /undo, never the session.
  // A hook refused for running workspace code is said once, at start (the variants' are the same).
  for (const line of hooks?.refused ?? []) options.progress(`warning: ${line}`);
  const checkpoints: Promise<Checkpoints | undefined> = options.interactive
    ? firstAnswer
        .after(() => import("../agent/checkpoints/checkpoints.js"))
        .then(({ Checkpoints }) => Checkpoints.open(workspace, session.meta.id))
        .catch((error: unknown) => {
          options.progress(`checkpoints are off (no /undo): ${(error as Error).message}`);
          return undefined;
        })
    : Promise.resolve(undefined);
  const window = windowOf();
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
      vision: (model: string) => modelsRead.then(() => visionOf(served, model)),
      ...(options.interactive ? { checkpoints: new DeferredRecorder(checkpoints) } : {}),
    },
    model: client.tier,
    instructions: context.instructions(DEFAULT_INSTRUCTIONS.replace("WORKSPACE", workspace.root)),
    attachments: (text) => context.attachments(text),
    ...(window === undefined ? {} : { contextWindow: window }),
    autoCompact: client.autoCompact,
    ...(resumed ? { transcript: resumed.transcript } : {}),
  });
  firstAnswer.watch(agent);
  if (window === undefined) {
    void modelsRead.then(() => {
      const known = windowOf();
      if (known !== undefined) agent.setContextWindow(known);
    });
  }
  // Servers start now, in the background: the prompt never waits for them, the first turn does.
  mcp?.start();
  agent.on((event: AgentEvent) => {
    if (event.type !== "transcript.changed") return;
    if (event.reset) session.reset(event.items);
    else session.append(event.added);
  });
  const createVariantAgent: Runtime["createVariantAgent"] = async (input) => {
    const variantWorkspace = await openWorkspace(input.workspace.path);
    const [variantSocket, variantHooks] = await Promise.all([
      connect(),
      hookRunner(client.settings.hooks, { ...hookOptions, cwd: variantWorkspace.root }),
    ]);
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
        vision: (model: string) => modelsRead.then(() => visionOf(served, model)),
      },
      model: agent.model,
      instructions: context.instructions(DEFAULT_INSTRUCTIONS.replace("WORKSPACE", variantWorkspace.root)),
      attachments: (text) => context.attachments(text),
      contextWindow: windowOf() ?? 8192,
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
    get models() {
      return served?.map((m) => m.id);
    },
    modelsRead,
    modelsKnown: () => {
      firstAnswer.open();
      return modelsRead;
    },
    checkpoints,
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
