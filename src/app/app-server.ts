/**
 * The app's HTTP server: serves the front end (web/dist, built at install) and the one WebSocket
 * (`/app/ws`) a browser holds for a workspace's tasks.
 *
 * The app runs commands on the user's machine, so it guards itself like a shell would be guarded:
 * - Without an access key it listens on loopback only. With one, a browser signs in once
 *   (`POST /app/login`, the key in the body, never in a URL) and gets an HttpOnly, SameSite=Strict
 *   session cookie; the key is never logged.
 * - Mounted beside the API with several keys, each key is its own user: a task belongs to the key
 *   that created it (its id, `Task.owner`), only browsers signed in with that key see it or hear
 *   about it, and its agent acts with that key (its limits, its stored responses).
 * - Every request and WebSocket upgrade passes the server's origin policy: a foreign `Origin` is
 *   refused (cross-site requests, cross-site WebSocket hijacking) and so is a `Host` that does not
 *   name this machine (DNS rebinding).
 * - Pages are served with a Content-Security-Policy that allows only the app's own script, so
 *   model output that slips past the sanitizer still runs nothing.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { extname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { gzip } from "node:zlib";
import { WebSocketServer, type WebSocket } from "ws";
import { OriginPolicy } from "../server/origin-policy.js";
import { expectationFailed, originForm } from "../server/request-target.js";
import type { ProjectContext, ServerMessage } from "./protocol.js";
import type { SessionContext } from "../agent/context/session-context.js";
import { Outbox } from "./outbox.js";
import { PreviewServer } from "./preview-server.js";
import { ServerWatch } from "./server-watch.js";
import { TaskManager, type ManagerContext } from "./task-manager.js";

/** The built front end: `web/dist` beside `src/` and `dist/`. */
export const WEB_DIST = fileURLToPath(new URL("../../web/dist/", import.meta.url));

export interface AppServerOptions extends Omit<ManagerContext, "broadcast" | "apiKey" | "serverReachable"> {
  host: string;
  port: number;
  /** When set, browsers must sign in with it; the agents use it with the Spark server. */
  accessKey?: string;
  /**
   * Mounted beside the API (`spark serve --app`): browsers sign in with any key the server accepts.
   * This returns the key's id (undefined for a key the server refuses); the id owns the tasks
   * created with it, and their agents use that key.
   */
  verifyKey?: (key: string) => string | undefined;
  /** Extra `Host` names and `Origin`s accepted, as the server's (see `OriginPolicy`). */
  allowedHosts?: readonly string[];
  allowedOrigins?: readonly string[];
  /** Models offered in the picker. */
  models?: string[];
  /** Where the built front end is (default web/dist). */
  webDir?: string;
  /**
   * The Spark server runs elsewhere (`spark app --server URL`): watch whether it answers, tell the
   * browsers, and send the messages held while it was down once it is back (see `ServerWatch`).
   */
  watchServer?: boolean;
}

const COOKIE = "spark_app";
/**
 * A page that cannot hold the cookie names its session token as a WebSocket subprotocol on the
 * upgrade: the VS Code pane, whose webview's requests to the app are cross-site, so a SameSite=Strict
 * cookie never goes with them. Its extension signs in (`POST /app/login`) and hands the page the token.
 */
const SESSION_PROTOCOL = "spark-session.";
/** A frame carries at most a message with its attached images (data URLs, see `images` below). */
const MAX_FRAME_BYTES = 12 * 1024 * 1024;
const LOOPBACK = new Set(["127.0.0.1", "::1", "localhost"]);

interface StaticFile {
  body: Buffer;
  /** Compressed off the main thread after start (start-up: figure 34); until then the body is sent as is. */
  gzip?: Buffer;
  type: string;
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".map": "application/json",
};

const CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "font-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/** The app's CSP, framing only the preview server's origin (under either loopback name) when it runs. */
function appCsp(previewPort: number | undefined): string {
  return previewPort === undefined
    ? CSP
    : `${CSP}; frame-src http://127.0.0.1:${previewPort} http://localhost:${previewPort}`;
}

export class AppServer {
  readonly tasks: TaskManager;
  #server: Server | undefined;
  readonly #wss = new WebSocketServer({ noServer: true, maxPayload: MAX_FRAME_BYTES });
  /** Open sockets and the owner (key id) each signed in as. */
  readonly #clients = new Map<WebSocket, string | undefined>();
  /** What waits to be written to each socket, bounded (see `Outbox`). */
  readonly #outboxes = new Map<WebSocket, Outbox>();
  readonly #policy: OriginPolicy;
  readonly #files = new Map<string, StaticFile>();
  /** Session token → the owner it signed in as (undefined: the single user). */
  readonly #sessions = new Map<string, string | undefined>();
  readonly #keyHash: Buffer | undefined;
  readonly #keyed: boolean;
  /** The key of the single user's agents (`spark app` with a key). */
  readonly #agentKey: string | undefined;
  /** Mounted with keys: each owner's key, as last signed in with, for its tasks' agents. */
  readonly #ownerKeys = new Map<string, string>();
  #url = "";
  /** Set with `watchServer`. */
  readonly serverWatch: ServerWatch | undefined;
  /** Variants' pages, on a loopback port of their own (another origin); see preview-server.ts. */
  readonly #preview = new PreviewServer();
  /** Its port once it listens; undefined when it could not (cards then show no preview). */
  #previewPort: number | undefined;
  readonly #previewReady: Promise<void>;

  constructor(private readonly options: AppServerOptions) {
    const keyed = options.accessKey !== undefined || options.verifyKey !== undefined;
    if (!keyed && !LOOPBACK.has(options.host)) {
      throw new Error(
        `the app runs commands on this machine: without an access key it listens on loopback only, not ${options.host}. ` +
          "Set SPARK_API_KEY (the key browsers sign in with) to listen elsewhere.",
      );
    }
    this.#keyed = keyed;
    this.#keyHash = options.accessKey ? sha256(options.accessKey) : undefined;
    this.#agentKey = options.accessKey;
    this.#policy = new OriginPolicy({
      keysRequired: keyed,
      ...(options.allowedHosts ? { allowedHosts: options.allowedHosts } : {}),
      ...(options.allowedOrigins ? { allowedOrigins: options.allowedOrigins } : {}),
    });
    this.#loadStatic(options.webDir ?? WEB_DIST);
    this.#previewReady = this.#preview.listen().then(
      (origin) => void (this.#previewPort = Number(new URL(origin).port)),
      (error: unknown) => {
        process.stderr.write(`spark app: variant previews are off: ${(error as Error).message}\n`);
      },
    );
    this.tasks = new TaskManager({
      ...options,
      preview: this.#preview,
      apiKey: (owner) => (owner === undefined ? this.#agentKey : this.#ownerKeys.get(owner)),
      broadcast: (message, owner) => this.#broadcast(message, owner),
      serverReachable: () =>
        this.serverWatch?.check().then((health) => health.reachable) ?? Promise.resolve(true),
    });
    if (options.watchServer) {
      this.serverWatch = new ServerWatch(options.serverUrl, (server) => {
        this.#broadcastAll({ type: "server", server });
        if (server.reachable) this.tasks.sendHeld();
      });
    }
  }

  /** The paths the app serves (for a server it is mounted on). */
  claims(path: string): boolean {
    return path === "/" || path.startsWith("/app/") || this.#files.has(path);
  }

  request(request: IncomingMessage, response: ServerResponse): void {
    try {
      request.url = originForm(request.url);
    } catch (error) {
      sendJson(response, 400, errorBody("invalid_url", (error as Error).message));
      return;
    }
    this.#handle(request, response).catch((error: unknown) => {
      if (!response.headersSent)
        sendJson(response, 500, errorBody("internal_error", (error as Error).message));
      else response.destroy();
    });
  }

  upgrade(request: IncomingMessage, socket: Socket, head: Buffer): void {
    socket.on("error", () => socket.destroy());
    try {
      request.url = originForm(request.url);
    } catch (error) {
      const body = JSON.stringify(errorBody("invalid_url", (error as Error).message));
      socket.end(
        `HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n` +
          `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
      return;
    }
    this.#upgrade(request, socket, head);
  }

  /** Adds the names the app is reachable by (see `OriginPolicy.listeningOn`). */
  listeningOn(address: string): void {
    this.#policy.listeningOn(address);
  }

  get url(): string {
    return this.#url;
  }

  /** Listens on its own port (`spark app`); a mounted app is served by the server it is mounted on. */
  async listen(): Promise<string> {
    const server = createServer((request, response) => this.request(request, response));
    // An `Expect` other than 100-continue gets a JSON 417 that says why, not node:http's bare one.
    server.on("checkExpectation", (request: IncomingMessage, response: ServerResponse) => {
      const error = expectationFailed(request.headers.expect);
      sendJson(response, error.status, errorBody(error.code, error.message));
    });
    server.on("upgrade", (request: IncomingMessage, socket: Socket, head: Buffer) =>
      this.upgrade(request, socket, head),
    );
    this.#server = server;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(this.options.port, this.options.host, () => resolve());
    });
    const address = server.address() as AddressInfo;
    this.#policy.listeningOn(address.address);
    const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
    this.#url = `http://${host}:${address.port}/`;
    return this.#url;
  }

  async close(): Promise<void> {
    this.serverWatch?.close();
    for (const client of this.#clients.keys()) client.terminate();
    this.tasks.close();
    await this.#previewReady;
    await this.#preview.close();
    const server = this.#server;
    if (!server) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
  }

  #loadStatic(dir: string): void {
    let names: string[];
    try {
      names = readdirSync(dir);
    } catch {
      throw new Error(
        `the app's front end is not built (${dir} is missing): run \`npm install\` (or \`npm run build:web\`) in the Spark checkout`,
      );
    }
    for (const name of names) {
      const path = join(dir, name);
      if (!statSync(path).isFile()) continue;
      const body = readFileSync(path);
      const file: StaticFile = { body, type: TYPES[extname(name)] ?? "application/octet-stream" };
      gzip(body, (error, compressed) => {
        if (!error) file.gzip = compressed;
      });
      this.#files.set(`/${name}`, file);
    }
    if (!this.#files.has("/index.html")) throw new Error(`${dir} has no index.html: rebuild the front end`);
  }

  async #handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const refusal = this.#policy.check(request.headers.host, request.headers.origin);
    if (refusal) {
      sendJson(response, refusal.status, errorBody(refusal.code ?? "forbidden", refusal.message));
      return;
    }
    const url = new URL(request.url ?? "/", "http://app");
    if (url.pathname === "/app/login" && request.method === "POST") {
      await this.#login(request, response);
      return;
    }
    if (url.pathname === "/app/session" && request.method === "GET") {
      // Mounted with keys counts too: a page told "not required" would retry a refused socket for ever.
      sendJson(response, 200, {
        authenticated: this.#session(request) !== null,
        required: this.#keyed,
      });
      return;
    }
    if (request.method !== "GET" && request.method !== "HEAD") {
      sendJson(response, 405, errorBody("method_not_allowed", `${request.method} is not allowed here`));
      return;
    }
    // Browsers ask for /favicon.ico on pages that name no icon: it is the app's SVG one.
    const path =
      url.pathname === "/" ? "/index.html" : url.pathname === "/favicon.ico" ? "/favicon.svg" : url.pathname;
    const file = this.#files.get(path);
    if (!file) {
      sendJson(response, 404, errorBody("not_found", `no such page: ${url.pathname.slice(0, 200)}`));
      return;
    }
    // The page's CSP names the preview server's port.
    await this.#previewReady;
    const compressed = /\bgzip\b/.test(String(request.headers["accept-encoding"] ?? ""))
      ? file.gzip
      : undefined;
    const body = compressed ?? file.body;
    // A page on an allowed origin (the VS Code pane's webview, `--allowed-origin`) loads the app's
    // script as a module, a CORS request: it may read what the policy above let it ask for.
    const origin = request.headers.origin;
    response.writeHead(200, {
      ...(origin === undefined ? {} : { "access-control-allow-origin": origin }),
      "content-type": file.type,
      "content-length": body.length,
      "cache-control": "no-cache",
      "x-content-type-options": "nosniff",
      "referrer-policy": "no-referrer",
      "content-security-policy": appCsp(this.#previewPort),
      ...(compressed ? { "content-encoding": "gzip" } : {}),
      vary: "accept-encoding, origin",
    });
    response.end(request.method === "HEAD" ? undefined : body);
  }

  async #login(request: IncomingMessage, response: ServerResponse): Promise<void> {
    if (!this.#keyed) {
      sendJson(response, 200, { authenticated: true });
      return;
    }
    let body = "";
    for await (const chunk of request) {
      body += String(chunk);
      if (body.length > 10_000) {
        sendJson(response, 413, errorBody("body_too_large", "the sign-in body is too large"));
        return;
      }
    }
    let key: unknown;
    try {
      key = (JSON.parse(body) as { key?: unknown }).key;
    } catch {
      sendJson(response, 400, errorBody("invalid_json", 'expected a JSON body {"key": "…"}'));
      return;
    }
    const keyHash = this.#keyHash;
    // The single user (`spark app`'s key) owns nothing; mounted, the key's id owns its tasks.
    let owner: string | undefined;
    let valid = false;
    if (typeof key === "string") {
      if (keyHash !== undefined) valid = timingSafeEqual(sha256(key), keyHash);
      else {
        owner = this.options.verifyKey?.(key);
        valid = owner !== undefined;
      }
    }
    if (!valid) {
      sendJson(response, 401, errorBody("invalid_api_key", "that key is not one this app accepts"));
      return;
    }
    // Mounted beside the API: the owner's tasks' agents act with the key the owner signed in with.
    if (owner !== undefined) this.#ownerKeys.set(owner, key as string);
    const token = randomBytes(32).toString("base64url");
    this.#sessions.set(token, owner);
    response.setHeader("set-cookie", `${COOKIE}=${token}; HttpOnly; SameSite=Strict; Path=/`);
    sendJson(response, 200, { authenticated: true });
  }

  /** The request's signed-in owner (undefined: the single user), or null when it is not signed in. */
  #session(request: IncomingMessage): { owner: string | undefined } | null {
    if (!this.#keyed) return { owner: undefined };
    for (const cookie of String(request.headers.cookie ?? "").split(/;\s*/)) {
      if (!cookie.startsWith(`${COOKIE}=`)) continue;
      const token = cookie.slice(COOKIE.length + 1);
      if (this.#sessions.has(token)) return { owner: this.#sessions.get(token) };
    }
    for (const protocol of String(request.headers["sec-websocket-protocol"] ?? "").split(/,\s*/)) {
      if (!protocol.startsWith(SESSION_PROTOCOL)) continue;
      const token = protocol.slice(SESSION_PROTOCOL.length);
      if (this.#sessions.has(token)) return { owner: this.#sessions.get(token) };
    }
    return null;
  }

  #upgrade(request: IncomingMessage, socket: Socket, head: Buffer): void {
    const refuse = (status: number, code: string, message: string): void => {
      const body = JSON.stringify(errorBody(code, message));
      socket.end(
        `HTTP/1.1 ${status} ${status === 401 ? "Unauthorized" : status === 404 ? "Not Found" : "Forbidden"}\r\n` +
          `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
      );
    };
    const url = new URL(request.url ?? "/", "http://app");
    if (url.pathname !== "/app/ws") return refuse(404, "not_found", "the app's socket is /app/ws");
    const refusal = this.#policy.check(request.headers.host, request.headers.origin);
    if (refusal) return refuse(refusal.status, refusal.code ?? "forbidden", refusal.message);
    // Browsers always send Origin on WebSocket upgrades: one without it is not a page of this app.
    if (request.headers.origin === undefined)
      return refuse(403, "origin_required", "the app's socket is for its own pages");
    const session = this.#session(request);
    if (!session) return refuse(401, "unauthenticated", "sign in with the app's key first");
    this.#wss.handleUpgrade(request, socket, head, (ws) => this.#connected(ws, session.owner));
  }

  #connected(ws: WebSocket, owner: string | undefined): void {
    const hello = (): ServerMessage => ({
      type: "hello",
      workspace: this.options.workspace.root,
      models: this.options.models ?? ["spark", "deep", "auto"],
      tasks: this.tasks.summaries(owner),
      version: "1",
      ...(this.serverWatch ? { server: this.serverWatch.health } : {}),
      ...(this.options.project ? { context: projectContext(this.options.project) } : {}),
      ...(this.#previewPort === undefined ? {} : { preview: this.#previewPort }),
    });
    // Bounded per browser: one that falls behind is sent `hello` again once it has caught up.
    const outbox: Outbox = new Outbox(ws, () => outbox.send(JSON.stringify(hello())));
    const reply = (message: ServerMessage): void => void outbox.send(JSON.stringify(message));
    const greet = (): void => {
      if (ws.readyState !== ws.OPEN) return;
      this.#clients.set(ws, owner);
      this.#outboxes.set(ws, outbox);
      reply(hello());
      // Saved tasks that could not be read were skipped at start-up: say which, and why. Only to
      // the single user: under keys a skipped file's owner is unknown, so its name (a task id) stays
      // in the server's log instead of reaching every key.
      const problems = owner === undefined ? this.tasks.problems : [];
      if (problems.length > 0) {
        reply({
          type: "error",
          code: "tasks_unreadable",
          message:
            `${problems.length} saved task file${problems.length === 1 ? "" : "s"} could not be read and ` +
            `${problems.length === 1 ? "was" : "were"} skipped: ${problems.join("; ").slice(0, 2000)}`,
        });
      }
      // Something of the wrong kind stood where the app's data folders belong: moved aside, said.
      if (owner === undefined && this.tasks.movedAside.length > 0)
        reply({ type: "error", code: "data_moved_aside", message: this.tasks.movedAside.join("; ") });
      // Loaded now, after the greeting is out, so that the browser's first frame need not wait.
      setImmediate(() => void this.#messages().catch(() => {}));
    };
    const gone = (): void => {
      this.#clients.delete(ws);
      this.#outboxes.delete(ws);
    };
    ws.on("close", gone);
    ws.on("error", gone);
    // The browser is greeted once the saved tasks are loaded, and its frames are handled after
    // that, in order, once the message schemas are loaded too (client-messages.ts: loaded after the
    // first greeting, so that neither the page nor its first paint waits for zod).
    let turn = this.tasks.ready.then(greet);
    ws.on("message", (data, isBinary) => {
      turn = turn.then(() => this.#frame(String(data), isBinary, reply, owner)).catch(() => {});
    });
  }

  /** One frame of a browser's, handled once the message schemas are loaded. */
  async #frame(
    data: string,
    isBinary: boolean,
    reply: (message: ServerMessage) => void,
    owner: string | undefined,
  ): Promise<void> {
    if (isBinary) return reply({ type: "error", code: "invalid_frame", message: "frames are JSON text" });
    let json: unknown;
    try {
      json = JSON.parse(data);
    } catch {
      return reply({ type: "error", code: "invalid_json", message: "the frame is not valid JSON" });
    }
    const { parseClientMessage } = await this.#messages();
    const parsed = parseClientMessage(json);
    if ("error" in parsed) return reply({ type: "error", code: "invalid_message", message: parsed.error });
    const message = parsed.message;
    this.tasks.handle(message, reply, owner).catch((error: unknown) => {
      reply({
        type: "error",
        code: "task_error",
        message: (error as Error).message,
        ...("task" in message ? { task: message.task } : {}),
      });
    });
  }

  #messagesModule: Promise<typeof import("./client-messages.js")> | undefined;

  /** The message schemas' module, loaded at the first call. */
  #messages(): Promise<typeof import("./client-messages.js")> {
    return (this.#messagesModule ??= import("./client-messages.js"));
  }

  /** Sends to every socket (what is not about any one owner's tasks: the Spark server's health). */
  #broadcastAll(message: ServerMessage): void {
    const data = JSON.stringify(message);
    for (const outbox of this.#outboxes.values()) outbox.send(data);
  }

  /** Sends to the sockets signed in as `owner` only. */
  #broadcast(message: ServerMessage, owner: string | undefined): void {
    const outboxes: Outbox[] = [];
    for (const [client, clientOwner] of this.#clients) {
      const outbox = this.#outboxes.get(client);
      if (clientOwner === owner && outbox) outboxes.push(outbox);
    }
    // Browsers that fell behind drop it anyway: a large message is not even serialized for them.
    if (outboxes.every((outbox) => outbox.behind)) return;
    const data = JSON.stringify(message);
    for (const outbox of outboxes) outbox.send(data);
  }
}

function sha256(value: string): Buffer {
  return createHash("sha256").update(value).digest();
}

function errorBody(
  code: string,
  message: string,
): { error: { message: string; type: string; code: string } } {
  return {
    error: { message, type: code === "internal_error" ? "server_error" : "invalid_request_error", code },
  };
}

function sendJson(response: ServerResponse, status: number, body: unknown): void {
  const data = JSON.stringify(body);
  response.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(data),
    "x-content-type-options": "nosniff",
  });
  response.end(data);
}

/** What the browser is shown of the project's context (no absolute paths beyond the labels). */
function projectContext(project: SessionContext): ProjectContext {
  const summary = project.summary();
  return {
    instructions: summary.instructions.map(({ label, bytes, truncated }) => ({ label, bytes, truncated })),
    skills: summary.skills.map(({ name, description }) => ({ name, description })),
    prompts: summary.prompts,
    warnings: summary.warnings,
  };
}
