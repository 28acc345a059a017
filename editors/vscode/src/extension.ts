/**
 * Spark for VS Code: a thin client of `spark lsp` (the language server in src/lsp), which talks to
 * the Spark server over the wire. The extension owns only what VS Code owns: ghost text (an inline
 * completion provider that forwards to the language server's `textDocument/inlineCompletion`, so
 * VS Code's cancellation becomes `$/cancelRequest`), the quick-edit flow in the editor, the status
 * bar with the ⚡ tier toggle, settings and the API key in SecretStorage. With no server configured
 * it starts `spark serve --port 0` itself.
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

type Tier = "spark" | "deep";

interface SparkStatus {
  tier: Tier;
  server: string;
  lastTtftMs: number | null;
  tokensPerSecond: number | null;
}

interface QuickEditResult {
  uri: string;
  newText: string;
  ttftMs: number | null;
  tokensPerSecond: number | null;
}

interface InlineItem {
  insertText: string | { value: string };
  filterText?: string;
  range?: { start: { line: number; character: number }; end: { line: number; character: number } };
}

const SECRET_KEY = "spark.apiKey";
const SERVER_START_TIMEOUT_MS = 60_000;

let state: Extension | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  state = new Extension(context);
  await state.start();
}

export async function deactivate(): Promise<void> {
  await state?.stop();
  state = undefined;
}

/** A quick edit shown in the editor: the rewrite replaces the selection, highlighted, until accepted or rejected. */
interface PendingEdit {
  editor: vscode.TextEditor;
  original: string;
  start: vscode.Position;
  /** The rewrite so far, as the language server's progress deltas built it. */
  rewrite: string;
  /** The text now standing where the selection was (the rewrite as far as the editor shows it). */
  shown: string;
  /** Serializes the editor edits of streamed progress. */
  queue: Promise<unknown>;
  done: boolean;
}

class Extension {
  readonly #log: vscode.OutputChannel;
  readonly #statusBar: vscode.StatusBarItem;
  readonly #added: vscode.TextEditorDecorationType;
  #client: LanguageClient | undefined;
  #serverProcess: ChildProcess | undefined;
  #serverUrl = "";
  #status: SparkStatus = { tier: "spark", server: "", lastTtftMs: null, tokensPerSecond: null };
  #pending: PendingEdit | undefined;

  constructor(private readonly context: vscode.ExtensionContext) {
    this.#log = vscode.window.createOutputChannel("Spark");
    this.#statusBar = vscode.window.createStatusBarItem(vscode.StatusBarAlignment.Right, 1000);
    this.#statusBar.command = "spark.vscode.toggleTier";
    this.#added = vscode.window.createTextEditorDecorationType({
      backgroundColor: new vscode.ThemeColor("diffEditor.insertedTextBackground"),
      isWholeLine: false,
    });
    context.subscriptions.push(this.#log, this.#statusBar, this.#added);
  }

  async start(): Promise<void> {
    const settings = vscode.workspace.getConfiguration("spark");
    this.#status.tier = settings.get<Tier>("tier") === "deep" ? "deep" : "spark";
    this.#renderStatus("starting…");
    this.#statusBar.show();
    const register = (command: string, run: (...args: unknown[]) => unknown): void => {
      this.context.subscriptions.push(vscode.commands.registerCommand(command, run));
    };
    register("spark.vscode.toggleTier", () => this.toggleTier());
    register("spark.vscode.quickEdit", () => this.quickEdit());
    register("spark.vscode.acceptEdit", () => this.finishEdit(true));
    register("spark.vscode.rejectEdit", () => this.finishEdit(false));
    register("spark.vscode.showEditDiff", () => this.showEditDiff());
    register("spark.vscode.setApiKey", () => this.setApiKey());
    register("spark.vscode.showLog", () => this.#log.show());
    this.context.subscriptions.push(
      vscode.languages.registerInlineCompletionItemProvider(
        { pattern: "**" },
        {
          provideInlineCompletionItems: (document, position, context, token) =>
            this.#inline(document, position, context, token),
        },
      ),
      vscode.workspace.onDidChangeConfiguration((event) => {
        if (event.affectsConfiguration("spark")) void this.#configurationChanged(event);
      }),
    );
    try {
      await this.#startClient();
    } catch (error) {
      this.#fail(error);
    }
  }

  async stop(): Promise<void> {
    await this.#client?.stop().catch(() => undefined);
    this.#client = undefined;
    this.#serverProcess?.kill("SIGTERM");
    this.#serverProcess = undefined;
  }

  async #startClient(): Promise<void> {
    const settings = vscode.workspace.getConfiguration("spark");
    const [command, ...args] = splitCommand(settings.get<string>("command") || "spark");
    if (!command) throw new Error("spark.command is empty: set it to the `spark` command.");
    this.#serverUrl = settings.get<string>("serverUrl") || (await this.#startServer(command, args));
    const apiKey = await this.context.secrets.get(SECRET_KEY);
    const serverOptions: ServerOptions = {
      command,
      args: [...args, "lsp"],
      transport: TransportKind.stdio,
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: "file" }, { scheme: "untitled" }],
      outputChannel: this.#log,
      initializationOptions: {
        server: this.#serverUrl,
        tier: this.#status.tier,
        debounceMs: settings.get<number>("debounceMs") ?? 75,
        ...(apiKey ? { apiKey } : {}),
      },
    };
    const client = new LanguageClient("spark", "Spark", serverOptions, clientOptions);
    client.onNotification("spark/status", (status: SparkStatus) => {
      this.#status = status;
      this.#renderStatus();
    });
    // Progress is a delta: keep the first `from` characters of the rewrite so far, append `text`
    // (without `from`, as an older spark lsp sends it, `text` is the whole rewrite so far).
    client.onNotification(
      "spark/quickEditProgress",
      (progress: { uri: string; from?: number; text: string }) => {
        const pending = this.#pending;
        if (pending && !pending.done && pending.editor.document.uri.toString() === progress.uri) {
          const from = Math.min(Math.max(progress.from ?? 0, 0), pending.rewrite.length);
          this.#showRewrite(pending, pending.rewrite.slice(0, from) + progress.text);
        }
      },
    );
    await client.start();
    this.#client = client;
    this.#log.appendLine(`spark lsp started (server ${this.#serverUrl}, tier ${this.#status.tier})`);
    this.#renderStatus();
  }

  /** Starts `spark serve --port 0` and reads its URL from the first stdout line. */
  async #startServer(command: string, args: string[]): Promise<string> {
    this.#log.appendLine(
      `no spark.serverUrl: starting ${[command, ...args, "serve", "--port", "0"].join(" ")}`,
    );
    const child = spawn(command, [...args, "serve", "--port", "0"], { stdio: ["ignore", "pipe", "pipe"] });
    this.#serverProcess = child;
    child.stderr?.on("data", (chunk: Buffer) => this.#log.append(chunk.toString()));
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

  async #inline(
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
  ): Promise<vscode.InlineCompletionItem[]> {
    const client = this.#client;
    if (!client || this.#pending) return [];
    try {
      const result = await client.sendRequest<{ items: InlineItem[] } | InlineItem[] | null>(
        "textDocument/inlineCompletion",
        {
          textDocument: { uri: document.uri.toString() },
          position: { line: position.line, character: position.character },
          context: { triggerKind: context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke ? 1 : 2 },
        },
        token,
      );
      const items = Array.isArray(result) ? result : (result?.items ?? []);
      return items.map((item) => {
        const text = typeof item.insertText === "string" ? item.insertText : item.insertText.value;
        const range = item.range
          ? new vscode.Range(
              item.range.start.line,
              item.range.start.character,
              item.range.end.line,
              item.range.end.character,
            )
          : new vscode.Range(position, position);
        const completion = new vscode.InlineCompletionItem(text, range);
        if (item.filterText !== undefined) completion.filterText = item.filterText;
        return completion;
      });
    } catch (error) {
      if (!token.isCancellationRequested) this.#log.appendLine(`completion failed: ${describe(error)}`);
      return [];
    }
  }

  async toggleTier(): Promise<void> {
    const client = this.#client;
    if (!client) return void vscode.window.showWarningMessage("Spark is not running: see Spark: Show Log.");
    const result = (await client.sendRequest(ExecuteCommandRequest.type, {
      command: "spark.toggleTier",
      arguments: [],
    })) as {
      tier: Tier;
    };
    this.#status.tier = result.tier;
    this.#renderStatus();
  }

  async quickEdit(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    const client = this.#client;
    if (!editor || editor.selection.isEmpty) return;
    if (!client) return void vscode.window.showWarningMessage("Spark is not running: see Spark: Show Log.");
    const instruction = await vscode.window.showInputBox({
      title: `Spark quick edit (${this.#status.tier})`,
      prompt: "How should the selection change?",
      placeHolder: "e.g. use early returns",
    });
    if (!instruction) return;
    const selection = editor.selection;
    const pending: PendingEdit = {
      editor,
      original: editor.document.getText(selection),
      start: selection.start,
      rewrite: "",
      shown: editor.document.getText(selection),
      queue: Promise.resolve(),
      done: false,
    };
    this.#pending = pending;
    await vscode.commands.executeCommand("setContext", "spark.editPending", true);
    try {
      const result = (await client.sendRequest(ExecuteCommandRequest.type, {
        command: "spark.quickEdit",
        arguments: [
          {
            textDocument: { uri: editor.document.uri.toString() },
            range: toLspRange(selection),
            instruction,
          },
        ],
      })) as QuickEditResult;
      this.#showRewrite(pending, result.newText);
      await pending.queue;
      pending.done = true;
      void vscode.window
        .showInformationMessage("Spark: keep this edit?", "Accept", "Reject")
        .then((choice) => (choice ? this.finishEdit(choice === "Accept") : undefined));
    } catch (error) {
      await this.finishEdit(false);
      void vscode.window.showErrorMessage(`Spark quick edit failed: ${describe(error)}`);
    }
  }

  /**
   * Puts `text` where the selection was, highlighted. Only what differs from the text shown is
   * replaced (progress grows at its end), and queued updates coalesce: each edit shows the newest.
   */
  #showRewrite(pending: PendingEdit, text: string): void {
    pending.rewrite = text;
    pending.queue = pending.queue.then(async () => {
      const target = pending.rewrite;
      if (target === pending.shown) return;
      let same = 0;
      const limit = Math.min(target.length, pending.shown.length);
      while (same < limit && target.charCodeAt(same) === pending.shown.charCodeAt(same)) same++;
      const document = pending.editor.document;
      const startOffset = document.offsetAt(pending.start);
      const range = new vscode.Range(
        document.positionAt(startOffset + same),
        document.positionAt(startOffset + pending.shown.length),
      );
      const applied = await pending.editor.edit((builder) => builder.replace(range, target.slice(same)), {
        undoStopBefore: false,
        undoStopAfter: false,
      });
      if (!applied) return;
      pending.shown = target;
      const end = pending.editor.document.positionAt(startOffset + target.length);
      pending.editor.setDecorations(this.#added, [new vscode.Range(pending.start, end)]);
    });
  }

  async finishEdit(accept: boolean): Promise<void> {
    const pending = this.#pending;
    if (!pending) return;
    this.#pending = undefined;
    await pending.queue.catch(() => undefined);
    pending.editor.setDecorations(this.#added, []);
    if (!accept) {
      const document = pending.editor.document;
      const startOffset = document.offsetAt(pending.start);
      const range = new vscode.Range(pending.start, document.positionAt(startOffset + pending.shown.length));
      await pending.editor.edit((builder) => builder.replace(range, pending.original));
    }
    await vscode.commands.executeCommand("setContext", "spark.editPending", false);
  }

  /** Opens the pending edit as a diff: the document before the edit against the editor now. */
  async showEditDiff(): Promise<void> {
    const pending = this.#pending;
    if (!pending) return;
    const document = pending.editor.document;
    const startOffset = document.offsetAt(pending.start);
    const now = document.getText();
    const before =
      now.slice(0, startOffset) + pending.original + now.slice(startOffset + pending.shown.length);
    const original = await vscode.workspace.openTextDocument({
      content: before,
      language: document.languageId,
    });
    await vscode.commands.executeCommand("vscode.diff", original.uri, document.uri, "Spark quick edit");
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
    const settings = vscode.workspace.getConfiguration("spark");
    await this.#client?.sendNotification("workspace/didChangeConfiguration", {
      settings: {
        spark: { tier: settings.get<Tier>("tier"), debounceMs: settings.get<number>("debounceMs") },
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
    if (note) parts.push(note);
    else {
      if (lastTtftMs != null) parts.push(`${Math.round(lastTtftMs)} ms`);
      if (tokensPerSecond != null) parts.push(`${Math.round(tokensPerSecond)} tok/s`);
    }
    this.#statusBar.text = parts.join(" · ");
    this.#statusBar.tooltip = `Spark tier: ${tier} (Ctrl+Shift+L / Cmd+Shift+L toggles)\nServer: ${this.#serverUrl || "starting"}`;
  }
}

function toLspRange(range: vscode.Range): object {
  return {
    start: { line: range.start.line, character: range.start.character },
    end: { line: range.end.line, character: range.end.character },
  };
}

/** `node /path/spark.js` → ["node", "/path/spark.js"]; quotes group words with spaces. */
export function splitCommand(command: string): string[] {
  return [...command.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3] ?? "");
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
