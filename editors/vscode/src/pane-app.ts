/**
 * The `spark app` behind the Spark pane: started by the extension for the workspace folder on a
 * free loopback port (`--port 0`), allowing exactly the pane webview's origin (`--allowed-origin`),
 * or a running app the user configured (`spark.appUrl`, which must allow that origin itself).
 * Started once per origin: a webview keeps its origin for the life of VS Code, so a pane that is
 * hidden and shown again finds the app already running (the warm open).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import * as vscode from "vscode";
import { findSpark } from "./locate.js";

const START_TIMEOUT_MS = 120_000;
const APP_LINE = /^spark app on (\S+) \(workspace /;
/** The API key in VS Code's SecretStorage ("Spark: Set API Key", as extension.ts keeps it). */
const SECRET_KEY = "spark.apiKey";

/** Where the pane's page finds the app: its URL, and for a keyed app the session to name. */
export interface AppConnection {
  url: string;
  session?: string;
}

interface Running {
  origin: string;
  url: Promise<AppConnection>;
  child: ChildProcess | undefined;
}

export class PaneApp implements vscode.Disposable {
  #running: Running | undefined;

  constructor(
    private readonly log: vscode.OutputChannel,
    private readonly secrets: vscode.SecretStorage,
    /** A started app ended on its own (not stopped here), after `ranMs` of running. */
    private readonly exited: (ranMs: number) => void = () => undefined,
  ) {}

  /** The configured app's origin (`spark.appUrl`), or undefined when the extension starts one. */
  static configuredOrigin(): string | undefined {
    const configured = vscode.workspace.getConfiguration("spark").get<string>("appUrl");
    if (!configured) return undefined;
    try {
      return new URL(configured).origin;
    } catch {
      return undefined;
    }
  }

  /** The app for a pane whose page has `origin`: started (or restarted) for it when needed. */
  url(origin: string): Promise<AppConnection> {
    const configured = vscode.workspace.getConfiguration("spark").get<string>("appUrl");
    if (configured) return this.#signIn(configured.endsWith("/") ? configured : `${configured}/`);
    if (this.#running?.origin === origin) return this.#running.url;
    this.stop();
    const running: Running = { origin, url: Promise.resolve({ url: "" }), child: undefined };
    running.url = this.#start(origin, running).then((url) => this.#signIn(url));
    // A failed start is not kept: the next open tries again.
    running.url.catch(() => {
      if (this.#running === running) this.#running = undefined;
    });
    this.#running = running;
    return running.url;
  }

  stop(): void {
    this.#running?.child?.kill("SIGTERM");
    this.#running = undefined;
  }

  dispose(): void {
    this.stop();
  }

  /**
   * A keyed app (an API key in SecretStorage or SPARK_API_KEY, which the app then requires): signs in
   * as a browser would, from here, and returns the session for the page to name on its socket.
   */
  async #signIn(url: string): Promise<AppConnection> {
    const asked = (await (await fetch(new URL("app/session", url))).json()) as { required?: boolean };
    if (!asked.required) return { url };
    const key = (await this.secrets.get(SECRET_KEY)) ?? process.env.SPARK_API_KEY;
    if (!key) throw new Error(`the app at ${url} asks for a key: set it with "Spark: Set API Key"`);
    const response = await fetch(new URL("app/login", url), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ key }),
    });
    const session = /spark_app=([^;]+)/.exec(response.headers.get("set-cookie") ?? "")?.[1];
    if (!response.ok || !session)
      throw new Error(`the app at ${url} refused the API key (HTTP ${response.status})`);
    return { url, session };
  }

  async #start(origin: string, running: Running): Promise<string> {
    const settings = vscode.workspace.getConfiguration("spark");
    const folder = vscode.workspace.workspaceFolders?.[0];
    if (!folder || folder.uri.scheme !== "file") {
      return Promise.reject(new Error("Open a folder first: the Spark pane works on the workspace folder."));
    }
    // The Spark the extension was installed with, as the language server's (locate.ts).
    const extensionPath = vscode.extensions.getExtension("spark.spark-vscode")?.extensionPath ?? "";
    const spark = findSpark(settings.get<string>("command") ?? "", extensionPath);
    if (!spark) {
      return Promise.reject(
        new Error(
          "Spark is not installed: run `npm install -g .` in a clone of Spark, or set spark.command.",
        ),
      );
    }
    const { command, args: prefix } = spark;
    const server = settings.get<string>("serverUrl");
    const args = [
      ...prefix,
      "app",
      folder.uri.fsPath,
      "--port",
      "0",
      "--quiet",
      "--allowed-origin",
      origin,
      ...(server ? ["--server", server] : []),
      ...(settings.get<string[]>("appArgs") ?? []),
    ];
    this.log.appendLine(`pane: starting ${command} ${args.join(" ")}`);
    // The key (never on the command line): its agents use it with the server, browsers sign in with it.
    const key = await this.secrets.get(SECRET_KEY);
    const child = spawn(command, args, {
      stdio: ["ignore", "pipe", "pipe"],
      cwd: folder.uri.fsPath,
      env: { ...process.env, ...spark.env, ...(key ? { SPARK_API_KEY: key } : {}) },
    });
    running.child = child;
    let stderr = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (chunk: string) => {
      stderr = (stderr + chunk).slice(-4000);
      this.log.append(chunk);
    });
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill("SIGTERM");
        reject(new Error(`spark app did not print its URL within ${START_TIMEOUT_MS / 1000} s`));
      }, START_TIMEOUT_MS);
      const lines = createInterface({ input: child.stdout });
      lines.on("line", (line) => {
        this.log.appendLine(`pane: ${line}`);
        const url = APP_LINE.exec(line)?.[1];
        if (!url) return;
        clearTimeout(timer);
        resolve(url);
      });
      child.once("error", (error) => {
        clearTimeout(timer);
        reject(new Error(`could not run ${command}: ${error.message} (set spark.command)`));
      });
      const startedAt = Date.now();
      child.once("exit", (code, signal) => {
        clearTimeout(timer);
        this.log.appendLine(`pane: spark app exited (${signal ?? `code ${code}`})`);
        if (this.#running === running) {
          this.#running = undefined;
          this.exited(Date.now() - startedAt);
        }
        reject(new Error(`spark app exited (${signal ?? `code ${code}`}): ${stderr.trim().slice(-600)}`));
      });
    });
  }
}
