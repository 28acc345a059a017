/**
 * The agent's MCP client: the servers of the config's `mcpServers`, reached through the official
 * SDK (`@modelcontextprotocol/sdk`) over stdio or streamable HTTP, and their tools offered to the
 * model as function tools named `mcp__SERVER__TOOL` with the servers' JSON schemas.
 *
 * Contracts:
 * - Servers start once per session, in the background, on the first `start()` (or `ready()`); the
 *   SDK is imported only then, so a session without servers loads none of it. A start takes as long
 *   as it needs (a first `npx -y …` downloads its package: minutes), up to `startupTimeoutMs` when
 *   the config sets one (then it fails), else up to `FIRST_START_LIMIT_MS`; while it lasts the
 *   server is reported `starting` every few seconds (`startingForMs`).
 * - `ready()` is what a turn waits for before its first request (never before the prompt is drawn):
 *   every server ready or failed, or, for one still starting, at most `startupWaitMs` (its
 *   `startupTimeoutMs`, else 30 s) from its start: then the turn goes on without its tools (the
 *   user is told once), and they join from the next request once it is ready. `settled()` waits
 *   for every start to end (`spark mcp list`).
 * - Tool names are unique across servers (`tool-names.ts`): a name reaches one tool of one server.
 * - A status is reported once per change (state, tool count, error), never twice for the same.
 * - A server that fails to start, crashes or hangs costs only its own tools: its state says why
 *   (`onStatus` tells the user), and a call of one of its tools fails with that reason as the tool
 *   error the model sees. A call that outlives `toolTimeoutMs` fails and is cancelled.
 * - `close()` stops every server (stdio: stdin closed, then SIGTERM, then SIGKILL, as the SDK
 *   does); nothing is left running after the session.
 */
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { McpServerConfig, McpServersConfig } from "./config.js";
import { toolName, uniqueToolNames } from "./tool-names.js";

export { toolName } from "./tool-names.js";

export type McpServerState = "disabled" | "idle" | "starting" | "ready" | "failed" | "stopped";

export interface McpServerStatus {
  name: string;
  transport: "stdio" | "http";
  state: McpServerState;
  trusted: boolean;
  /** The names the model sees (`mcp__NAME__TOOL`) of a ready server's tools. */
  tools: { name: string; tool: string; description: string }[];
  /** Why it failed or stopped. */
  error?: string;
  /** `starting`: for how long so far. */
  startingForMs?: number;
  /** `starting`: a turn stopped waiting for it and went on without its tools. */
  turnWentOn?: boolean;
}

export interface McpCallResult {
  /** The text parts, and placeholders for what is neither text nor an image. */
  text: string;
  /** The server reported the call as failed (`isError`). */
  isError: boolean;
  /**
   * The image parts (base64 `data`), in order: the tool runner sends them as `input_image` parts
   * when the session's model can see, else as a placeholder that says why (agent/tools/index.ts).
   */
  images: McpImage[];
}

export interface McpImage {
  mimeType: string;
  /** Base64, as the server sent it. */
  data: string;
}

/** A tool call that cannot be made (no such server or tool, the server failed, a timeout). */
export class McpToolError extends Error {
  override readonly name = "McpToolError";
}

/** How long a turn waits for a server still starting, unless its `startupTimeoutMs` says. */
export const DEFAULT_STARTUP_WAIT_MS = 30_000;
/** The longest a start without `startupTimeoutMs` may take (a first `npx -y` downloads a package). */
export const FIRST_START_LIMIT_MS = 10 * 60_000;
/** A server still starting is reported after this long, and then every `STARTING_REPORT_MS`. */
const FIRST_STARTING_REPORT_MS = 5_000;
const STARTING_REPORT_MS = 15_000;
export const DEFAULT_TOOL_TIMEOUT_MS = 120_000;
/** Most characters of a tool's output the model gets. */
const MAX_OUTPUT_CHARS = 64 * 1024;
/** The tail of a stdio server's stderr kept for its error messages. */
const STDERR_TAIL = 2000;

interface ToolEntry {
  /** The name the model sees. */
  name: string;
  /** The server's own name of the tool. */
  tool: string;
  description: string;
  inputSchema: Record<string, unknown>;
}

class McpServer {
  state: McpServerState;
  error: string | undefined;
  tools: ToolEntry[] = [];
  #client: Client | undefined;
  #transport: Transport | undefined;
  #started: Promise<void> | undefined;
  #startedAt = 0;
  #stderr = "";
  #closing = false;
  #turnWentOn = false;

  constructor(
    readonly name: string,
    readonly config: McpServerConfig,
    private readonly cwd: string,
    private readonly onChange: (server: McpServer) => void,
    private readonly defaultWaitMs: number,
  ) {
    this.state = config.enabled === false ? "disabled" : "idle";
  }

  get transportKind(): "stdio" | "http" {
    return "url" in this.config ? "http" : "stdio";
  }

  start(): Promise<void> {
    if (this.state === "disabled") return Promise.resolve();
    this.#started ??= this.#start();
    return this.#started;
  }

  /** How long a turn waits for this server's start (see the module's contract). */
  get startupWaitMs(): number {
    return this.config.startupTimeoutMs ?? this.defaultWaitMs;
  }

  /**
   * Resolves when the start has ended, or when a turn has waited `startupWaitMs` since it began
   * (then the user is told, once, that the turn goes on without this server's tools).
   */
  waitForTurn(): Promise<void> {
    const started = this.start();
    if (this.state !== "starting") return started;
    const left = this.#startedAt + this.startupWaitMs - Date.now();
    let timer: NodeJS.Timeout | undefined;
    const waited = new Promise<void>((resolve) => {
      timer = setTimeout(
        () => {
          if (this.state === "starting" && !this.#turnWentOn) {
            this.#turnWentOn = true;
            this.onChange(this);
          }
          resolve();
        },
        Math.max(0, left),
      );
    });
    return Promise.race([started, waited]).finally(() => clearTimeout(timer));
  }

  async #start(): Promise<void> {
    this.#startedAt = Date.now();
    this.#set("starting");
    const timeoutMs = this.config.startupTimeoutMs ?? FIRST_START_LIMIT_MS;
    let timer: NodeJS.Timeout | undefined;
    // While it starts the user hears of it now and then (a first npx run downloads its package).
    let report = setTimeout(
      function again(this: void, server: McpServer) {
        if (server.state !== "starting" || server.#closing) return;
        server.onChange(server);
        report = setTimeout(again, STARTING_REPORT_MS, server).unref();
      },
      FIRST_STARTING_REPORT_MS,
      this,
    ).unref();
    try {
      const connect = this.#connect(timeoutMs);
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new Error(
                this.config.startupTimeoutMs === undefined
                  ? `did not start within ${timeoutMs / 60_000} minutes`
                  : `did not start within ${timeoutMs} ms (startupTimeoutMs)`,
              ),
            ),
          timeoutMs,
        );
      });
      await Promise.race([connect, deadline]);
      if (this.#closing) return;
      this.#set("ready");
    } catch (error) {
      if (this.#closing) return;
      // A server that exits while starting was already reported (by onclose), with the better reason.
      if ((this.state as McpServerState) === "failed") {
        void this.#shutdown();
        return;
      }
      this.error = this.#describe(error);
      this.#set("failed");
      void this.#shutdown();
    } finally {
      clearTimeout(timer);
      clearTimeout(report);
    }
  }

  async #connect(timeoutMs: number): Promise<void> {
    const [{ Client }, transport] = await Promise.all([
      import("@modelcontextprotocol/sdk/client/index.js"),
      this.#makeTransport(),
    ]);
    const client = new Client(
      { name: "spark", version: "0.1.0" },
      {
        capabilities: {},
        // A server that changes its tools says so: the next request offers the new list.
        listChanged: {
          tools: {
            onChanged: (error, tools) => {
              if (error || !tools || this.#closing) return;
              this.tools = tools.map((tool) => this.#entry(tool));
              this.onChange(this);
            },
          },
        },
      },
    );
    this.#client = client;
    this.#transport = transport;
    client.onclose = () => {
      if (this.#closing || this.state === "failed") return;
      // It went away on its own: a crash, or the HTTP server gone.
      this.error = this.#describe(new Error("the server closed the connection"));
      if (this.state === "ready" || this.state === "starting") this.#set("failed");
    };
    await client.connect(transport, { timeout: timeoutMs });
    const tools: ToolEntry[] = [];
    let cursor: string | undefined;
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor }, { timeout: timeoutMs });
      for (const tool of page.tools) tools.push(this.#entry(tool));
      cursor = page.nextCursor;
    } while (cursor !== undefined && tools.length < 1000);
    this.tools = tools;
  }

  #entry(tool: {
    name: string;
    title?: string | undefined;
    description?: string | undefined;
    inputSchema: object;
  }): ToolEntry {
    return {
      name: toolName(this.name, tool.name),
      tool: tool.name,
      description: tool.description ?? tool.title ?? "",
      inputSchema: tool.inputSchema as Record<string, unknown>,
    };
  }

  async #makeTransport(): Promise<Transport> {
    const config = this.config;
    if ("url" in config) {
      const { StreamableHTTPClientTransport } =
        await import("@modelcontextprotocol/sdk/client/streamableHttp.js");
      return new StreamableHTTPClientTransport(
        new URL(config.url),
        config.headers ? { requestInit: { headers: config.headers } } : {},
      );
    }
    const { StdioClientTransport } = await import("@modelcontextprotocol/sdk/client/stdio.js");
    const transport = new StdioClientTransport({
      command: config.command,
      args: config.args ?? [],
      ...(config.env ? { env: config.env } : {}),
      cwd: config.cwd ?? this.cwd,
      // Never the terminal's: it would write over the TUI. Its tail explains a failure.
      stderr: "pipe",
    });
    transport.stderr?.on("data", (chunk: Buffer) => {
      this.#stderr = (this.#stderr + chunk.toString("utf8")).slice(-STDERR_TAIL);
    });
    return transport;
  }

  async call(entry: ToolEntry, args: Record<string, unknown>, signal: AbortSignal): Promise<McpCallResult> {
    const client = this.#client;
    if (this.state !== "ready" || !client) throw new McpToolError(this.unavailable());
    const timeoutMs = this.config.toolTimeoutMs ?? DEFAULT_TOOL_TIMEOUT_MS;
    let result: Awaited<ReturnType<Client["callTool"]>>;
    try {
      result = await client.callTool({ name: entry.tool, arguments: args }, undefined, {
        timeout: timeoutMs,
        signal,
      });
    } catch (error) {
      if (signal.aborted) throw new McpToolError("interrupted by the user");
      // A crash during the call shows as a closed connection: say so, with the server's last words.
      const state = this.state as McpServerState;
      if (state === "failed") throw new McpToolError(this.unavailable());
      const message = error instanceof Error ? error.message : String(error);
      if (/timed out|timeout/i.test(message)) {
        throw new McpToolError(
          `MCP server "${this.name}" did not answer ${entry.tool} within ${timeoutMs} ms (toolTimeoutMs); the call was cancelled`,
        );
      }
      throw new McpToolError(`MCP server "${this.name}" failed to run ${entry.tool}: ${message}`);
    }
    return { text: resultText(result), isError: result.isError === true, images: resultImages(result) };
  }

  /** Why this server's tools cannot be called now. */
  unavailable(): string {
    switch (this.state) {
      case "disabled":
        return `MCP server "${this.name}" is disabled in the config`;
      case "failed":
        return `MCP server "${this.name}" is not available: ${this.error ?? "it failed"}`;
      case "stopped":
        return `MCP server "${this.name}" was stopped`;
      default:
        return `MCP server "${this.name}" is still starting`;
    }
  }

  status(): McpServerStatus {
    return {
      name: this.name,
      transport: this.transportKind,
      state: this.state,
      trusted: this.config.trusted === true,
      tools: this.tools.map((t) => ({ name: t.name, tool: t.tool, description: t.description })),
      ...(this.error === undefined ? {} : { error: this.error }),
      ...(this.state === "starting"
        ? { startingForMs: Date.now() - this.#startedAt, ...(this.#turnWentOn ? { turnWentOn: true } : {}) }
        : {}),
    };
  }

  async close(): Promise<void> {
    this.#closing = true;
    if (this.state !== "disabled" && this.state !== "failed") this.state = "stopped";
    await this.#started?.catch(() => {});
    await this.#shutdown();
  }

  async #shutdown(): Promise<void> {
    const client = this.#client;
    const transport = this.#transport;
    this.#client = undefined;
    this.#transport = undefined;
    try {
      // A streamable-HTTP session is ended on the server too (DELETE), briefly.
      if (transport && "terminateSession" in transport && typeof transport.terminateSession === "function") {
        await Promise.race([
          (transport.terminateSession as () => Promise<void>).call(transport).catch(() => {}),
          new Promise((resolve) => setTimeout(resolve, 1000).unref()),
        ]);
      }
      if (client) await client.close();
      else await transport?.close();
    } catch {
      // Closing a connection that already broke.
    }
  }

  #set(state: McpServerState): void {
    this.state = state;
    this.onChange(this);
  }

  #describe(error: unknown): string {
    let message = error instanceof Error ? error.message : String(error);
    if ((error as NodeJS.ErrnoException | undefined)?.code === "ENOENT" && "command" in this.config) {
      message = `cannot run ${this.config.command}: not found`;
    }
    const tail = this.#stderr.trim().split("\n").slice(-3).join(" | ");
    return tail ? `${message} (stderr: ${tail.slice(-500)})` : message;
  }
}

/** A result's image parts (`{type: "image", data, mimeType}`); a part without base64 data is left out. */
function resultImages(result: Record<string, unknown>): McpImage[] {
  const content = Array.isArray(result.content) ? (result.content as Record<string, unknown>[]) : [];
  return content.flatMap((part) =>
    part.type === "image" && typeof part.data === "string" && part.data.length > 0
      ? [{ mimeType: typeof part.mimeType === "string" ? part.mimeType : "image/png", data: part.data }]
      : [],
  );
}

/**
 * A tool result as the model's text: text parts as they are, images left out (see `resultImages`),
 * other parts as a placeholder.
 */
function resultText(result: Record<string, unknown>): string {
  const content = Array.isArray(result.content) ? (result.content as Record<string, unknown>[]) : [];
  const parts: string[] = [];
  for (const part of content) {
    switch (part.type) {
      case "text":
        parts.push(String(part.text ?? ""));
        break;
      case "image":
        if (typeof part.data === "string" && part.data.length > 0) break;
        parts.push(`[image: ${String(part.mimeType ?? "unknown type")}, no data, not shown]`);
        break;
      case "audio": {
        const bytes = typeof part.data === "string" ? Buffer.byteLength(part.data, "base64") : 0;
        parts.push(`[${part.type}: ${String(part.mimeType ?? "unknown type")}, ${bytes} bytes, not shown]`);
        break;
      }
      case "resource": {
        const resource = (part.resource ?? {}) as { uri?: unknown; text?: unknown };
        parts.push(
          typeof resource.text === "string" ? resource.text : `[resource ${String(resource.uri ?? "")}]`,
        );
        break;
      }
      case "resource_link":
        parts.push(`[resource link: ${String(part.uri ?? "")}${part.name ? ` (${String(part.name)})` : ""}]`);
        break;
      default:
        parts.push(`[${String(part.type)} content]`);
    }
  }
  if (parts.length === 0 && result.structuredContent !== undefined) {
    parts.push(JSON.stringify(result.structuredContent));
  }
  if (parts.length === 0 && "toolResult" in result) parts.push(JSON.stringify(result.toolResult));
  const text = parts.join("\n");
  return text.length > MAX_OUTPUT_CHARS
    ? `${text.slice(0, MAX_OUTPUT_CHARS)}\n[output truncated: ${text.length} characters]`
    : text;
}

export interface McpManagerOptions {
  /** Where stdio servers run unless their `cwd` says (the workspace). */
  cwd: string;
  /** A server's state changed (starting, ready, failed): the user is told. */
  onStatus?: (status: McpServerStatus) => void;
  /** How long a turn waits for a server without `startupTimeoutMs` (default 30 s). */
  startupWaitMs?: number;
}

/** The MCP tools seam of the agent (see tools/context.ts `ToolContext.mcp`). */
export class McpManager {
  readonly #servers: McpServer[];
  #starting: Promise<void> | undefined;
  /** What was last reported of each server, so that no status is reported twice. */
  readonly #reported = new Map<string, string>();

  constructor(config: McpServersConfig, options: McpManagerOptions) {
    this.#servers = Object.entries(config).map(
      ([name, entry]) =>
        new McpServer(
          name,
          entry,
          options.cwd,
          (server) => {
            this.#assignNames();
            const status = server.status();
            const key =
              status.state === "starting"
                ? `starting ${status.startingForMs ?? 0} ${status.turnWentOn === true}`
                : `${status.state} ${status.tools.length} ${status.error ?? ""}`;
            if (this.#reported.get(server.name) === key) return;
            this.#reported.set(server.name, key);
            options.onStatus?.(status);
          },
          options.startupWaitMs ?? DEFAULT_STARTUP_WAIT_MS,
        ),
    );
  }

  /** Gives every ready server's tools a name no other tool has (see tool-names.ts). */
  #assignNames(): void {
    const entries = this.#servers.flatMap((server) =>
      server.state === "ready" ? server.tools.map((entry) => ({ server: server.name, entry })) : [],
    );
    const names = uniqueToolNames(entries.map(({ server, entry }) => ({ server, tool: entry.tool })));
    entries.forEach(({ entry }, i) => (entry.name = names[i]!));
  }

  /** Whether any server is configured and enabled. */
  get active(): boolean {
    return this.#servers.some((server) => server.state !== "disabled");
  }

  /** Starts every enabled server in the background (once). */
  start(): void {
    this.#starting ??= Promise.all(this.#servers.map((server) => server.start())).then(() => {});
  }

  /**
   * What a turn waits for: every server ready or failed, or still starting past its wait (the turn
   * goes on without its tools; they join once it is ready).
   */
  ready(): Promise<void> {
    this.start();
    return Promise.all(this.#servers.map((server) => server.waitForTurn())).then(() => {});
  }

  /** Resolves when every server's start has ended: ready or failed (`spark mcp list`). */
  settled(): Promise<void> {
    this.start();
    return this.#starting!;
  }

  list(): McpServerStatus[] {
    return this.#servers.map((server) => server.status());
  }

  /** A line for each server that failed: why its tools are unavailable. */
  failures(): string[] {
    return this.#servers
      .filter((server) => server.state === "failed")
      .map(
        (server) =>
          `MCP server ${server.name} failed, its tools are unavailable: ${server.error ?? "no reason given"}`,
      );
  }

  /** The function tools of the servers that are ready. */
  definitions(): Record<string, unknown>[] {
    const definitions: Record<string, unknown>[] = [];
    for (const server of this.#servers) {
      if (server.state !== "ready") continue;
      for (const tool of server.tools) {
        definitions.push({
          type: "function",
          name: tool.name,
          description: `${tool.description} (MCP server "${server.name}")`.trim(),
          parameters: { type: "object", properties: {}, ...tool.inputSchema },
          strict: false,
        });
      }
    }
    return definitions;
  }

  /** The server a `mcp__SERVER__…` name belongs to (whatever its state), if one is configured. */
  serverOf(name: string): string | undefined {
    return this.#find(name)?.name;
  }

  /**
   * Why this tool cannot be called at all (no such server, disabled, failed), so that no one is
   * asked to approve a call that cannot happen; undefined while it can be (or is still starting).
   */
  unavailable(name: string): string | undefined {
    const server = this.#find(name);
    if (!server) return `no MCP server is configured for the tool ${name}`;
    return server.state === "disabled" || server.state === "failed" || server.state === "stopped"
      ? server.unavailable()
      : undefined;
  }

  /** Whether calls of this tool run without asking (its server is `trusted`). */
  trusted(name: string): boolean {
    return this.#find(name)?.config.trusted === true;
  }

  /** Calls a tool; an `McpToolError` (for the model) when it cannot. */
  async call(name: string, args: Record<string, unknown>, signal: AbortSignal): Promise<McpCallResult> {
    const server = this.#find(name);
    if (!server) throw new McpToolError(`no MCP server is configured for the tool ${name}`);
    // A call before the server finished starting waits for it (bounded by its startup timeout).
    if (server.state === "idle" || server.state === "starting") await server.start();
    if (server.state !== "ready") throw new McpToolError(server.unavailable());
    const entry = server.tools.find((tool) => tool.name === name);
    if (!entry) {
      this.#assignNames();
      const names = server.tools.map((tool) => tool.name).join(", ");
      throw new McpToolError(
        `MCP server "${server.name}" has no tool ${name}; its tools: ${names || "none"}`,
      );
    }
    return server.call(entry, args, signal);
  }

  async close(): Promise<void> {
    await Promise.all(this.#servers.map((server) => server.close()));
  }

  #find(name: string): McpServer | undefined {
    if (!name.startsWith("mcp__")) return undefined;
    // A ready server's tool by its exact (unique) name; else the server the name's prefix names.
    const exact = this.#servers.find(
      (server) => server.state === "ready" && server.tools.some((tool) => tool.name === name),
    );
    if (exact) return exact;
    // The longest matching name wins (`a` and `a_` are both possible server names).
    let found: McpServer | undefined;
    for (const server of this.#servers) {
      if (name.startsWith(`mcp__${server.name}__`) && (!found || server.name.length > found.name.length)) {
        found = server;
      }
    }
    return found;
  }
}
