/**
 * The Spark pane: a webview view ("Spark" in the activity bar) hosting the web app's own front end
 * (web/), talking to `spark app` over the app's WebSocket (pane-app.ts starts it, pane-html.ts loads
 * the front end). The extension does what the editor does better, over the webview's message
 * channel (pane-protocol.ts): a task's changed file opens in VS Code's diff editor (left: the file
 * before the task, a read-only `spark-base:` document; right: the file) with Apply and Discard in
 * its title bar, and once the file is applied the tab shows the file itself, with neither; a
 * `path:line` clicked in the transcript opens in the editor; "Ask Spark" puts a selection or a file
 * into the composer as a chip, for the question the user types there. The pane shows and sets the
 * editor's one tier (tier.ts).
 */
import { appendFileSync } from "node:fs";
import { isAbsolute, relative, resolve } from "node:path";
import * as vscode from "vscode";
import { PaneApp } from "./pane-app.js";
import { paneHtml } from "./pane-html.js";
import type { FromPane, ToPane } from "./pane-protocol.js";
import type { TierState } from "./tier.js";

export const PANE_VIEW = "spark.pane";
const BASE_SCHEME = "spark-base";
/** Context key: the active editor is a diff the pane opened (its title bar shows Apply / Discard). */
const DIFF_CONTEXT = "spark.paneDiff";
/** Where the pane page's last origin is remembered (globalState). */
const ORIGIN_KEY = "spark.pane.origin";

/** Registers the pane, its commands and the `spark-base:` documents. */
export function registerPane(context: vscode.ExtensionContext, tier: TierState): void {
  const pane = new SparkPane(context.globalState, context.secrets, tier);
  context.subscriptions.push(
    pane,
    // Kept while hidden: its tasks go on streaming into it, and showing it again costs no reload.
    vscode.window.registerWebviewViewProvider(PANE_VIEW, pane, {
      webviewOptions: { retainContextWhenHidden: true },
    }),
    vscode.workspace.registerTextDocumentContentProvider(BASE_SCHEME, pane.bases),
    vscode.commands.registerCommand("spark.pane.open", () => pane.open()),
    vscode.commands.registerCommand("spark.pane.ask", (uri?: unknown) => pane.ask(uri)),
    vscode.commands.registerCommand("spark.pane.applyFile", () => pane.review("apply", "file")),
    vscode.commands.registerCommand("spark.pane.discardFile", () => pane.review("discard", "file")),
    vscode.commands.registerCommand("spark.pane.applyTask", () => pane.review("apply", "task")),
    vscode.commands.registerCommand("spark.pane.discardTask", () => pane.review("discard", "task")),
    vscode.window.onDidChangeActiveTextEditor(() => pane.updateDiffContext()),
  );
}

/** The content of files before a task changed them, by `spark-base:` URI. */
class Bases implements vscode.TextDocumentContentProvider {
  readonly #contents = new Map<string, string>();
  readonly #changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.#changed.event;

  set(uri: vscode.Uri, content: string): void {
    this.#contents.set(uri.toString(), content);
    this.#changed.fire(uri);
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.#contents.get(uri.toString()) ?? "";
  }
}

interface OpenDiff {
  task: string;
  path: string;
  /** The task's version before Apply (`spark-base:…&side=task`), or the file itself. */
  right: vscode.Uri;
  left: vscode.Uri;
  /** The file holds the task's version: the tab shows it, with no Apply or Discard. */
  applied: boolean;
}

class SparkPane implements vscode.WebviewViewProvider, vscode.Disposable {
  readonly bases = new Bases();
  readonly #log = vscode.window.createOutputChannel("Spark Pane");
  readonly #app: PaneApp;
  #view: vscode.WebviewView | undefined;
  /** Whether the front end in the view has painted (messages wait until then). */
  #ready = false;
  readonly #waiting: ToPane[] = [];
  /** When `spark.pane.open` ran (the pane-open figure runs from there to the first paint). */
  #openedAt: number | undefined;
  /** Phases of the open being timed (ms after the command): the page up, the app's URL known. */
  #phases: { page?: number; app?: number } = {};
  #opens = 0;
  /** Diff editors the pane opened, by the URIs of both sides. */
  readonly #diffs = new Map<string, OpenDiff>();
  #lastDiff: OpenDiff | undefined;

  /** The front end was (re)loaded: once it paints, it hears the editor's tier (`initial`). */
  #loaded = false;

  constructor(
    private readonly memory: vscode.Memento,
    secrets: vscode.SecretStorage,
    private readonly tier: TierState,
  ) {
    tier.onChanged((value) => this.#post({ type: "tier", tier: value }));
    // An app that ends on its own (a crash, killed) is started again by reloading the page, which
    // asks for it anew; not once it has ended within seconds of starting twice in a row, which
    // would only loop. (One quick end is restarted: how long an app ran before a kill says
    // nothing about whether the next will start.)
    let quickEnds = 0;
    this.#app = new PaneApp(this.#log, secrets, (ranMs) => {
      const view = this.#view;
      quickEnds = ranMs < 10_000 ? quickEnds + 1 : 0;
      if (!view || quickEnds >= 2) return;
      this.#ready = false;
      view.webview.html = paneHtml(PaneApp.configuredOrigin());
    });
  }

  /**
   * Starts the app for the origin the pane's page had last time (VS Code keeps a webview's origin),
   * while VS Code is still making the page: a cold open then waits for the slower of the two, not
   * both. The page's own origin, when it reports it, is what counts.
   */
  #startEarly(): void {
    const origin = this.memory.get<string>(ORIGIN_KEY);
    if (origin && !PaneApp.configuredOrigin()) this.#app.url(origin).catch(() => undefined);
  }

  resolveWebviewView(view: vscode.WebviewView): void {
    this.#view = view;
    this.#ready = false;
    this.#startEarly();
    view.webview.options = { enableScripts: true, localResourceRoots: [] };
    view.webview.onDidReceiveMessage((message: FromPane) => void this.#received(message));
    // Shown again (the page was kept): it answers a ping after its next paint, which times the open.
    view.onDidChangeVisibility(() => {
      if (view.visible && this.#ready && this.#openedAt !== undefined)
        void view.webview.postMessage({ type: "ping" });
    });
    view.onDidDispose(() => {
      if (this.#view === view) this.#view = undefined;
      this.#ready = false;
    });
    view.webview.html = paneHtml(PaneApp.configuredOrigin());
  }

  /** `Spark: Open Pane`. */
  async open(): Promise<void> {
    this.#openedAt = Date.now();
    this.#phases = {};
    this.#startEarly();
    const shown = this.#view?.visible === true;
    await vscode.commands.executeCommand(`${PANE_VIEW}.focus`);
    // Already on screen: nothing changes visibility, so ask for the paint here.
    if (shown && this.#ready) void this.#view?.webview.postMessage({ type: "ping" } satisfies ToPane);
  }

  /** "Ask Spark" on the selection, or on a file (the explorer's menu, or the editor with no selection). */
  async ask(target?: unknown): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    let uri: vscode.Uri;
    let code: string;
    let where: string;
    if (target instanceof vscode.Uri && target.toString() !== editor?.document.uri.toString()) {
      uri = target;
      code = new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
      where = vscode.workspace.asRelativePath(uri);
    } else if (editor) {
      uri = editor.document.uri;
      const selection = editor.selection;
      const path = vscode.workspace.asRelativePath(uri);
      if (selection.isEmpty) {
        code = editor.document.getText();
        where = path;
      } else {
        code = editor.document.getText(selection);
        const first = selection.start.line + 1;
        const last = selection.end.character === 0 ? selection.end.line : selection.end.line + 1;
        where = first === last ? `${path}:${first}` : `${path}:${first}-${Math.max(first, last)}`;
      }
    } else {
      void vscode.window.showInformationMessage("Ask Spark: open a file or select some code first.");
      return;
    }
    // Into the composer as a chip (as "add to chat" does elsewhere): the question is typed there.
    const language = vscode.workspace.textDocuments.find(
      (d) => d.uri.toString() === uri.toString(),
    )?.languageId;
    this.#post({ type: "ask", where, code, ...(language ? { language } : {}) });
    await vscode.commands.executeCommand(`${PANE_VIEW}.focus`);
  }

  /** Apply or Discard, from the diff editor's title bar (or the palette): its file, or its task. */
  review(action: "apply" | "discard", scope: "file" | "task"): void {
    const active = vscode.window.activeTextEditor?.document.uri.toString();
    const diff = (active ? this.#diffs.get(active) : undefined) ?? this.#lastDiff;
    if (!diff) {
      void vscode.window.showInformationMessage("Spark: open a task's diff from the pane's review first.");
      return;
    }
    // What happened shows in the pane's review; an applied file's tab follows (`applied`).
    this.#post({ type: action, task: diff.task, ...(scope === "file" ? { path: diff.path } : {}) });
  }

  /** Apply / Discard in the title bar: for a diff the pane opened whose file is not applied yet. */
  updateDiffContext(): void {
    const active = vscode.window.activeTextEditor?.document.uri.toString();
    const diff = active === undefined ? undefined : this.#diffs.get(active);
    void vscode.commands.executeCommand("setContext", DIFF_CONTEXT, diff !== undefined && !diff.applied);
  }

  /**
   * A task's files were applied: each open diff tab of them still showing the task's version (and
   * "not applied") is replaced by the diff against the file itself, whose title says applied and
   * whose title bar offers no Apply or Discard.
   */
  async #applied(task: string, paths: readonly string[]): Promise<void> {
    const stale = new Set<OpenDiff>();
    for (const diff of this.#diffs.values())
      if (diff.task === task && !diff.applied && paths.includes(diff.path)) stale.add(diff);
    for (const diff of stale) {
      const file = this.#resolve(diff.path);
      if (!file) continue;
      diff.applied = true;
      const tabs = vscode.window.tabGroups.all
        .flatMap((group) => group.tabs)
        .filter(
          (tab) =>
            tab.input instanceof vscode.TabInputTextDiff &&
            tab.input.modified.toString() === diff.right.toString(),
        );
      if (tabs.length === 0) continue;
      await vscode.window.tabGroups.close(tabs);
      this.#diffs.delete(diff.right.toString());
      diff.right = file;
      this.#diffs.set(file.toString(), diff);
      await vscode.commands.executeCommand("vscode.diff", diff.left, file, diffTitle(diff.path, "applied"), {
        preview: true,
      });
    }
    this.updateDiffContext();
  }

  dispose(): void {
    this.#app.dispose();
    this.#log.dispose();
  }

  /** Sends to the front end, now or once it has painted. */
  #post(message: ToPane): void {
    if (this.#view && this.#ready) void this.#view.webview.postMessage(message);
    else this.#waiting.push(message);
  }

  async #received(message: FromPane): Promise<void> {
    const view = this.#view;
    if (!view) return;
    switch (message.type) {
      case "origin":
        if (this.#openedAt !== undefined) this.#phases.page = Date.now() - this.#openedAt;
        void this.memory.update(ORIGIN_KEY, message.origin);
        try {
          const app = await this.#app.url(message.origin);
          if (this.#openedAt !== undefined) this.#phases.app = Date.now() - this.#openedAt;
          this.#loaded = true;
          await view.webview.postMessage({
            type: "load",
            appUrl: app.url,
            ...(app.session ? { session: app.session } : {}),
          } satisfies ToPane);
        } catch (error) {
          const text = `Spark could not start the app for this workspace: ${(error as Error).message}`;
          this.#log.appendLine(`pane: ${text}`);
          await view.webview.postMessage({ type: "failed", message: text } satisfies ToPane);
        }
        return;
      case "load-failed":
        this.#log.appendLine(`pane: ${message.message}`);
        return;
      case "painted": {
        this.#ready = true;
        if (this.#loaded) {
          this.#loaded = false;
          void view.webview.postMessage({
            type: "tier",
            tier: this.tier.current,
            initial: true,
          } satisfies ToPane);
        }
        for (const waiting of this.#waiting.splice(0)) void view.webview.postMessage(waiting);
        if (this.#openedAt !== undefined) {
          const ms = Date.now() - this.#openedAt;
          this.#openedAt = undefined;
          this.#recordOpen(ms);
        }
        return;
      }
      case "open":
        await this.#openFile(message.path, message.line);
        return;
      case "diff":
        await this.#openDiff(message);
        return;
      case "tier":
        await this.tier.set(message.tier);
        return;
      case "applied":
        await this.#applied(message.task, message.paths);
        return;
    }
  }

  /** The pane-open figure: logged, and appended to SPARK_PANE_TIMINGS (a JSON-lines file) when set. */
  #recordOpen(ms: number): void {
    const kind = this.#opens++ === 0 ? "cold" : "warm";
    const { page, app } = this.#phases;
    this.#log.appendLine(
      `pane: open (${kind}) ${ms} ms from the command to the first paint (page up at ${page ?? "?"} ms, app's URL at ${app ?? "?"} ms)`,
    );
    const file = process.env.SPARK_PANE_TIMINGS;
    if (file) appendFileSync(file, `${JSON.stringify({ kind, ms, page, app })}\n`);
  }

  /** A workspace path (relative), or undefined for one outside the folder. */
  #resolve(path: string): vscode.Uri | undefined {
    const folder = vscode.workspace.workspaceFolders?.[0];
    if (!folder) return undefined;
    const absolute = resolve(folder.uri.fsPath, path);
    const inside = relative(folder.uri.fsPath, absolute);
    if (inside.startsWith("..") || isAbsolute(inside)) return undefined;
    return vscode.Uri.file(absolute);
  }

  async #openFile(path: string, line: number | undefined): Promise<void> {
    const uri = this.#resolve(path);
    if (!uri) return;
    try {
      await vscode.workspace.fs.stat(uri);
    } catch {
      void vscode.window.showInformationMessage(`Spark: ${path} is not in the workspace.`);
      return;
    }
    const position = new vscode.Position(Math.max(0, (line ?? 1) - 1), 0);
    await vscode.window.showTextDocument(uri, {
      selection: new vscode.Range(position, position),
      preview: true,
    });
  }

  async #openDiff(message: Extract<FromPane, { type: "diff" }>): Promise<void> {
    const file = this.#resolve(message.path);
    if (!file) return;
    const left = vscode.Uri.from({
      scheme: BASE_SCHEME,
      path: `/${message.path}`,
      query: `task=${encodeURIComponent(message.task)}`,
    });
    this.bases.set(left, message.before ?? "");
    // Right: the file itself when it holds what the task made (a task in place, or applied), so
    // the diff follows the disk and can be edited there; else the task's version (in its worktree
    // or copy, not applied yet), read-only until Apply brings it into the workspace.
    let onDisk: string | null;
    try {
      onDisk = new TextDecoder().decode(await vscode.workspace.fs.readFile(file));
    } catch {
      onDisk = null;
    }
    let right = file;
    if (message.after === null || onDisk !== message.after) {
      right = left.with({ query: `${left.query}&side=task` });
      this.bases.set(right, message.after ?? "");
    }
    const diff: OpenDiff = { task: message.task, path: message.path, left, right, applied: right === file };
    this.#diffs.set(left.toString(), diff);
    this.#diffs.set(right.toString(), diff);
    this.#lastDiff = diff;
    await vscode.commands.executeCommand(
      "vscode.diff",
      left,
      right,
      diffTitle(message.path, right === file ? "file" : "task"),
      { preview: true },
    );
    this.updateDiffContext();
  }
}

/** A pane diff's tab title: whose version is on the right. */
function diffTitle(path: string, right: "task" | "file" | "applied"): string {
  return right === "task"
    ? `${path} (start ↔ Spark task, not applied)`
    : right === "applied"
      ? `${path} (start ↔ Spark task, applied)`
      : `${path} (start ↔ Spark task)`;
}
