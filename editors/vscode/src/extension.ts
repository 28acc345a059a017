/**
 * Spark for VS Code: a thin client of `spark lsp` (the language server in src/lsp), which talks to
 * the Spark server over the wire. The extension owns only what VS Code owns: ghost text and its
 * controls (completions.ts), the quick edit as an inline diff (quick-edit.ts), the status bar with
 * its menu (status-menu.ts) and the ⚡ tier toggle, settings and the API key in SecretStorage. It
 * finds the Spark it was installed with (locate.ts) and, with no server configured, starts
 * `spark serve --port 0` itself.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import * as vscode from "vscode";
import {
  ExecuteCommandRequest,
  LanguageClient,
  TransportKind,
  type LanguageClientOptions,
  type ServerOptions,
} from "vscode-languageclient/node";
import { Completions } from "./completions.js";
import { downloadProgress, findSpark, type DownloadLine, type SparkCommand } from "./locate.js";
import { QuickEdit } from "./quick-edit.js";
import { showStatusMenu } from "./status-menu.js";
import { registerPane } from "./pane.js";
import { TierState, type Tier } from "./tier.js";

interface SparkStatus {
  tier: Tier;
  server: string;
  lastTtftMs: number | null;
  tokensPerSecond: number | null;
}

const SECRET_KEY = "spark.apiKey";
/** globalState: the notice about Ctrl+Shift+L was shown. */
const TOGGLE_KEY_NOTICE = "spark.toggleKeyNoticeShown";
const SERVER_START_TIMEOUT_MS = 60_000;

let state: Extension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  state = new Extension(context);
  // The pane shows and sets the same tier as the status bar (tier.ts).
  registerPane(context, state.tier);
  await state.start();
}

export async function deactivate(): Promise<void> {
  await state?.stop();
  state = undefined;
}

class Extension {
  readonly #log: vscode.OutputChannel;
  readonly #statusBar: vscode.StatusBarItem;
  #quickEdit: QuickEdit | undefined;
  #completions: Completions | undefined;
  #client: LanguageClient | undefined;
  #serverProcess: ChildProcess | undefined;
  #serverUrl = "";
  #status: SparkStatus = { tier: "spark", server: "", lastTtftMs: null, tokensPerSecond: null };

  /** The one tier (status bar, completions, quick edit, the pane): see tier.ts. */
  readonly tier: TierState;

  constructor(private readonly context: vscode.ExtensionContext) {
    const configured =
      vscode.workspace.getConfiguration("spark").get<Tier>("tier") === "deep" ? "deep" : "spark";
    this.tier = new TierState(configured);
    this.#status.tier = configured;
    this.tier.onChanged((tier) => {
      this.#status.tier = tier;
      this.#renderStatus();
    });
    this.tier.apply = async (tier) => {
      await this.#client?.sendRequest(ExecuteCommandRequest.type, {
        command: "spark.setTier",
        arguments: [tier],
      });
    };
    this.#log = vscode.window.createOutputChannel("Spark");
    this.#statusBar = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 1000);
    this.#statusBar.command = "spark.vscode.menu";
    context.subscriptions.push(this.#log, this.#statusBar);
  }

  async start(): Promise<void> {
    this.#renderStatus("starting…");
    this.#statusBar.show();
    const register = (command: string, run: (...args: unknown[]) => unknown): void => {
      this.context.subscriptions.push(vscode.commands.registerCommand(command, run));
    };
    register("spark.vscode.toggleTier", () => this.toggleTier());
    register("spark.vscode.setApiKey", () => this.setApiKey());
    register("spark.vscode.showLog", () => this.#log.show());
    const completions = new Completions(this.context, {
      client: () => this.#client,
      editPending: () => this.#quickEdit?.pending ?? false,
      log: this.#log,
      changed: () => this.#renderStatus(),
    });
    this.#completions = completions;
    this.#quickEdit = new QuickEdit(this.context, {
      client: () => this.#client,
      secret: (document) => completions.secret(document),
      tier: () => this.#status.tier,
      log: this.#log,
    });
    register("spark.vscode.menu", () =>
      showStatusMenu({
        tier: () => this.#status.tier,
        toggleTier: () => this.toggleTier(),
        completions,
        showLog: () => this.#log.show(),
      }),
    );
    void this.#toggleKeyNotice();
    this.context.subscriptions.push(
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (event.affectsConfiguration("spark")) void this.#configurationChanged(event);
      }),
    );
    await this.#restart();
  }

  async stop(): Promise<void> {
    await this.#client?.stop().catch(() => undefined);
    this.#client = undefined;
    this.#serverProcess?.kill("SIGTERM");
    this.#serverProcess = undefined;
  }

  /** The Spark to run (see locate.ts), or undefined. */
  #locate(): SparkCommand | undefined {
    const setting = vscode.workspace.getConfiguration("spark").get<string>("command") ?? "";
    const found = findSpark(setting, this.context.extensionPath);
    if (found) this.#log.appendLine(`spark: ${[found.command, ...found.args].join(" ")} (${found.how})`);
    return found;
  }

  async #startClient(): Promise<void> {
    const settings = vscode.workspace.getConfiguration("spark");
    const spark = this.#locate();
    if (!spark) return this.#notInstalled();
    const { command, args } = spark;
    const env = { ...process.env, ...spark.env };
    this.#serverUrl = settings.get<string>("serverUrl") || (await this.#startServer(spark));
    const apiKey = await this.context.secrets.get(SECRET_KEY);
    const serverOptions: ServerOptions = {
      command,
      args: [...args, "lsp"],
      transport: TransportKind.stdio,
      options: { env },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
      outputChannel: this.#log,
      // A secrets file (spark.completions.excludePatterns) is never sent to the language server.
      middleware: {
        didOpen: (document, next) =>
          this.#completions?.secret(document) ? Promise.resolve() : next(document),
        didChange: (event, next) =>
          this.#completions?.secret(event.document) ? Promise.resolve() : next(event),
        didClose: (document, next) =>
          this.#completions?.secret(document) ? Promise.resolve() : next(document),
      },
      initializationOptions: {
        server: this.#serverUrl,
        tier: this.#status.tier,
        debounceMs: settings.get<number>("debounceMs") ?? 75,
        ...(this.#completions ? { completions: this.#completions.filter() } : {}),
        ...(apiKey ? { apiKey } : {}),
      },
    };
    const client = new LanguageClient("spark", "Spark", serverOptions, clientOptions);
    client.onNotification("spark/status", (status: SparkStatus) => {
      // The tier is the extension's (tier.ts), pushed to the server; not read back from it.
      this.#status = { ...status, tier: this.tier.current };
      this.#renderStatus();
    });
    this.#quickEdit?.attach(client);
    await client.start();
    this.#client = client;
    this.#log.appendLine(`spark lsp started (server ${this.#serverUrl}, tier ${this.#status.tier})`);
    this.#renderStatus();
  }

  /**
   * Starts `spark serve --port 0` (with `--model` from spark.model) and reads its URL from the first
   * stdout line. Its stderr goes to the log, and a download of the default model shows as progress.
   */
  async #startServer({ command, args, env }: SparkCommand): Promise<string> {
    const model = vscode.workspace.getConfiguration("spark").get<string>("model") ?? "";
    const serveArgs = [...args, "serve", "--port", "0", ...(model ? ["--model", model] : [])];
    this.#log.appendLine(`no spark.serverUrl: starting ${[command, ...serveArgs].join(" ")}`);
    const child = spawn(command, serveArgs, {
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, ...env },
    });
    this.#serverProcess = child;
    const download = new DownloadNotice();
    child.once("exit", () => download.end());
    createInterface({ input: child.stderr! }).on("line", (line) => {
      this.#log.appendLine(line);
      download.line(line);
    });
    const lines = createInterface({ input: child.stdout! });
    return new Promise<string>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error("spark serve did not print its URL within 60 s")),
        SERVER_START_TIMEOUT_MS,
      );
      child.once("error", (error) => {
        clearTimeout(timer);
        reject(
          new Error(
            `cannot start ${command}: ${error.message}. Set spark.command, or spark.serverUrl to a running server.`,
          ),
        );
      });
      child.once("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`spark serve exited with code ${code}; see the Spark log`));
      });
      lines.once("line", (line) => {
        clearTimeout(timer);
        const url = /^spark listening on (\S+)/.exec(line)?.[1];
        if (url) resolve(url);
        else reject(new Error(`unexpected first line from spark serve: ${line}`));
      });
    });
  }

  /** Ctrl+Shift+L, the status menu: spark ⇄ deep, for the editor and the pane alike. */
  async toggleTier(): Promise<void> {
    if (!this.#client)
      return void vscode.window.showWarningMessage("Spark is not running: see Spark: Show Log.");
    await this.tier.toggle();
  }

  async setApiKey(): Promise<void> {
    const key = await vscode.window.showInputBox({
      title: "Spark API key",
      prompt: "Stored in VS Code's secret storage; empty removes it.",
      password: true,
      ignoreFocusOut: true,
    });
    if (key === undefined) return;
    if (key === "") await this.context.secrets.delete(SECRET_KEY);
    else await this.context.secrets.store(SECRET_KEY, key);
    await this.#restart();
  }

  async #configurationChanged(event: vscode.ConfigurationChangeEvent): Promise<void> {
    if (event.affectsConfiguration("spark.command") || event.affectsConfiguration("spark.serverUrl")) {
      await this.#restart();
      return;
    }
    if (event.affectsConfiguration("spark.model") && this.#serverProcess) {
      await this.#restart();
      return;
    }
    const settings = vscode.workspace.getConfiguration("spark");
    // The setting changed: it becomes the tier (of the pane too); any other change keeps the tier.
    if (event.affectsConfiguration("spark.tier"))
      await this.tier.set(settings.get<Tier>("tier") === "deep" ? "deep" : "spark", { applied: true });
    this.#renderStatus();
    await this.#client?.sendNotification("workspace/didChangeConfiguration", {
      settings: {
        spark: {
          tier: this.tier.current,
          debounceMs: settings.get<number>("debounceMs"),
          ...(this.#completions ? { completions: this.#completions.filter() } : {}),
        },
      },
    });
  }

  async #restart(): Promise<void> {
    await this.stop();
    try {
      await this.#startClient();
    } catch (error) {
      this.#fail(error);
    }
  }

  /** No `spark` anywhere: say how to install it, with a button. */
  #notInstalled(): void {
    const message =
      "Spark is not installed: run `npm install -g .` in a clone of Spark (it puts `spark` on the PATH), " +
      "or set spark.command to the `spark` command.";
    this.#log.appendLine(message);
    this.#log.appendLine(
      [
        "To install Spark (Node 20 or newer):",
        "  git clone <the Spark repository> spark && cd spark",
        "  npm install -g .      # builds it and puts `spark` on the PATH",
        "  spark --version",
        "then reload VS Code. Or point spark.command at it (`node /path/to/spark/bin/spark.js`),",
        "or spark.serverUrl at a Spark server that is already running.",
      ].join("\n"),
    );
    this.#renderStatus("not installed");
    void vscode.window
      .showWarningMessage(message, "How to Install", "Open a Terminal", "Set spark.command")
      .then((choice) => {
        if (choice === "How to Install") this.#log.show();
        else if (choice === "Open a Terminal") vscode.window.createTerminal("Spark install").show();
        else if (choice)
          void vscode.commands.executeCommand("workbench.action.openSettings", "spark.command");
      });
  }

  /**
   * Once per installation: Ctrl+Shift+L (Cmd+Shift+L) toggles the tier only outside the text of an
   * editor (the pane, the explorer…), where it takes nothing from VS Code; in the editor it stays
   * Select All Occurrences. The notice says so and how to rebind it.
   */
  async #toggleKeyNotice(): Promise<void> {
    if (this.context.globalState.get<boolean>(TOGGLE_KEY_NOTICE)) return;
    await this.context.globalState.update(TOGGLE_KEY_NOTICE, true);
    const key = process.platform === "darwin" ? "Cmd+Shift+L" : "Ctrl+Shift+L";
    const choice = await vscode.window.showInformationMessage(
      `Spark: ${key} toggles ⚡ spark / deep outside the editor text (in the Spark pane, the explorer…); ` +
        `in the editor it stays "Select All Occurrences". Click the ⚡ status item for the menu, or bind ` +
        `"Spark: Toggle Tier" to a key of your own.`,
      "Keyboard Shortcuts",
    );
    if (choice) {
      await vscode.commands.executeCommand(
        "workbench.action.openGlobalKeybindings",
        "spark.vscode.toggleTier",
      );
    }
  }

  #fail(error: unknown): void {
    const message = describe(error);
    this.#log.appendLine(`Spark failed to start: ${message}`);
    this.#renderStatus("not running");
    void vscode.window.showErrorMessage(`Spark: ${message}`, "Show Log").then((choice) => {
      if (choice) this.#log.show();
    });
  }

  #renderStatus(note?: string): void {
    const { tier, lastTtftMs, tokensPerSecond } = this.#status;
    const parts = [tier === "spark" ? "⚡ spark" : "deep"];
    const completions = this.#completions;
    if (note) parts.push(note);
    else if (completions && !completions.enabled) parts.push("completions off");
    else if (completions?.snoozedUntil !== undefined) parts.push("snoozed");
    else {
      if (lastTtftMs != null) parts.push(`${Math.round(lastTtftMs)} ms`);
      if (tokensPerSecond != null) parts.push(`${Math.round(tokensPerSecond)} tok/s`);
    }
    this.#statusBar.text = parts.join(" · ");
    this.#statusBar.tooltip = `Spark tier: ${tier} · click for the menu\nServer: ${this.#serverUrl || "starting"}`;
  }
}

/**
 * The default model's download, told while `spark serve` prints its progress lines: what is
 * downloaded, how to pick another model, and how far it is.
 */
class DownloadNotice {
  #report: vscode.Progress<{ message?: string; increment?: number }> | undefined;
  #end: (() => void) | undefined;
  #started = false;
  #latest: DownloadLine | undefined;
  #shownPercent = 0;

  line(line: string): void {
    const progress = downloadProgress(line);
    if (!progress) return;
    this.#latest = progress;
    if (!this.#started) {
      this.#started = true;
      void vscode.window.withProgress(
        {
          location: vscode.ProgressLocation.Notification,
          // The name is DEFAULT_MODEL's in src/engines/llama/model-source.ts (a test keeps them equal).
          title: "Spark is downloading its default model",
        },
        (report) =>
          new Promise<void>((resolve) => {
            this.#report = report;
            this.#end = resolve;
            this.#flush();
          }),
      );
    }
    this.#flush();
  }

  /** Reports the newest line (the task may start after the first lines came). */
  #flush(): void {
    const latest = this.#latest;
    if (!latest || !this.#report) return;
    this.#report.report({
      message:
        `${latest.percent}% · ${latest.receivedMb} of ${latest.totalMb} MB: Qwen2.5-Coder-0.5B-Instruct, once, ` +
        "into ~/.cache/spark/models. Another model: set spark.model to a GGUF file, or spark.serverUrl to a running server.",
      increment: Math.max(latest.percent - this.#shownPercent, 0),
    });
    this.#shownPercent = latest.percent;
    if (latest.percent >= 100) this.end();
  }

  end(): void {
    this.#end?.();
    this.#end = undefined;
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
