/**
 * Quick edit in the editor, as an inline diff. The language server's `spark.quickEdit` streams the
 * rewrite of a range (progress deltas); the lines it touches stay in the document, decorated as
 * removed (red), with the rewrite's lines after them decorated as added (green), unchanged lines
 * once. Accept and Reject are CodeLens above the edit (and Ctrl+Enter / Escape): Accept leaves the
 * rewrite, Reject puts back the original lines byte for byte. While it is pending the document holds
 * both, so completions pause (see `pending`).
 */
import * as vscode from "vscode";
import { ExecuteCommandRequest, type LanguageClient } from "vscode-languageclient/node";
import { currentBlock, mergedView, splitLines } from "./inline-diff.js";

interface QuickEditResult {
  uri: string;
  newText: string;
  ttftMs: number | null;
  tokensPerSecond: number | null;
}

interface PendingEdit {
  editor: vscode.TextEditor;
  document: vscode.TextDocument;
  /** Offset of the first line the edit touches: the inline diff stands from here. */
  start: number;
  /** The original lines, exactly as the document held them: Reject puts these back. */
  before: string;
  /** Text of those lines outside the range sent (a selection that starts or ends mid-line). */
  prefix: string;
  suffix: string;
  eol: string;
  /** The rewrite of the range so far, as the progress deltas built it. */
  rewrite: string;
  /** The inline diff standing in the document now (from `start`). */
  shown: string;
  /** Serializes the editor edits of streamed progress. */
  queue: Promise<unknown>;
  streaming: boolean;
  cancel: vscode.CancellationTokenSource;
}

export interface QuickEditHost {
  client(): LanguageClient | undefined;
  tier(): string;
  /** The excludePatterns entry a secrets file matches: such a file is never sent. */
  secret(document: vscode.TextDocument): string | undefined;
  log: vscode.OutputChannel;
}

const mac = process.platform === "darwin";

export class QuickEdit implements vscode.CodeLensProvider {
  readonly #removed = vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    backgroundColor: new vscode.ThemeColor("diffEditor.removedLineBackground"),
    overviewRulerColor: new vscode.ThemeColor("minimapGutter.deletedBackground"),
    overviewRulerLane: vscode.OverviewRulerLane.Left,
  });
  readonly #added = vscode.window.createTextEditorDecorationType({
    isWholeLine: true,
    backgroundColor: new vscode.ThemeColor("diffEditor.insertedLineBackground"),
    overviewRulerColor: new vscode.ThemeColor("minimapGutter.addedBackground"),
    overviewRulerLane: vscode.OverviewRulerLane.Left,
  });
  readonly #lensesChanged = new vscode.EventEmitter<void>();
  readonly onDidChangeCodeLenses = this.#lensesChanged.event;
  #pending: PendingEdit | undefined;

  constructor(
    context: vscode.ExtensionContext,
    private readonly host: QuickEditHost,
  ) {
    const register = (command: string, run: () => unknown): void => {
      context.subscriptions.push(vscode.commands.registerCommand(command, run));
    };
    register("spark.vscode.quickEdit", () => this.start());
    register("spark.vscode.acceptEdit", () => this.finish(true));
    register("spark.vscode.rejectEdit", () => this.finish(false));
    register("spark.vscode.showEditDiff", () => this.showDiff());
    context.subscriptions.push(
      this.#removed,
      this.#added,
      this.#lensesChanged,
      vscode.languages.registerCodeLensProvider([{ scheme: "file" }, { scheme: "untitled" }], this),
      vscode.workspace.onDidChangeTextDocument((event) => this.#documentChanged(event)),
    );
  }

  /** Edits of our own in flight: their change events are not the user's. */
  #ownEdits = 0;

  /**
   * The user edited the document while a quick edit stands in it. Before the edit's lines: they
   * move down (so Reject still puts back exactly the original lines). After them: nothing to do.
   * Inside them: the user has taken over; the quick edit ends, leaving the text as it is (never
   * overwriting what was typed), the request stopped.
   */
  #documentChanged(event: vscode.TextDocumentChangeEvent): void {
    const pending = this.#pending;
    if (!pending || event.document !== pending.document || this.#ownEdits > 0) return;
    for (const change of event.contentChanges) {
      if (change.rangeOffset + change.rangeLength <= pending.start) {
        pending.start += change.text.length - change.rangeLength;
      } else if (change.rangeOffset < pending.start + pending.shown.length) {
        this.host.log.appendLine("quick edit: its lines were edited meanwhile; it ends, the text as it is");
        this.#pending = undefined;
        pending.cancel.cancel();
        pending.cancel.dispose();
        pending.editor.setDecorations(this.#removed, []);
        pending.editor.setDecorations(this.#added, []);
        this.#lensesChanged.fire();
        void vscode.commands.executeCommand("setContext", "spark.editPending", false);
        return;
      }
    }
  }

  /** A quick edit stands in a document (completions pause meanwhile). */
  get pending(): boolean {
    return this.#pending !== undefined;
  }

  /** Listens to the progress of `client`'s quick edits. */
  attach(client: LanguageClient): void {
    // A delta: keep the first `from` characters of the rewrite so far, append `text` (without
    // `from`, as an older spark lsp sends it, `text` is the whole rewrite so far).
    client.onNotification(
      "spark/quickEditProgress",
      (progress: { uri: string; from?: number; text: string }) => {
        const pending = this.#pending;
        if (pending?.streaming && pending.document.uri.toString() === progress.uri) {
          const from = Math.min(Math.max(progress.from ?? 0, 0), pending.rewrite.length);
          this.#show(pending, pending.rewrite.slice(0, from) + progress.text);
        }
      },
    );
  }

  /**
   * Ctrl+I / Cmd+I: the selection, or without one the block around the cursor (the run of
   * non-blank lines; a blank line alone), rewritten by an instruction.
   */
  async start(): Promise<void> {
    const editor = vscode.window.activeTextEditor;
    if (!editor || this.#pending) return;
    const client = this.host.client();
    if (!client) return void vscode.window.showWarningMessage("Spark is not running: see Spark: Show Log.");
    const document = editor.document;
    const secret = this.host.secret(document);
    if (secret) {
      return void vscode.window.showWarningMessage(
        `Spark does not send this file: it matches ${secret} (spark.completions.excludePatterns).`,
      );
    }
    let range: vscode.Range = editor.selection;
    const block = editor.selection.isEmpty;
    if (block) {
      const lines = splitLines(document.getText());
      const [first, last] = currentBlock(lines, editor.selection.active.line);
      range = new vscode.Range(first, 0, last, document.lineAt(last).text.length);
      editor.selection = new vscode.Selection(range.start, range.end);
    }
    const instruction = await vscode.window.showInputBox({
      title: `Spark quick edit (${this.host.tier()})`,
      prompt: block ? "How should these lines change?" : "How should the selection change?",
      placeHolder: "e.g. use early returns",
    });
    if (!instruction || this.#pending) return;
    // The whole lines the range touches: the inline diff works on lines.
    const lineStart = new vscode.Position(range.start.line, 0);
    const endsAtLineStart = range.end.character === 0 && range.end.line > range.start.line;
    const lineEnd = endsAtLineStart
      ? range.end
      : range.end.line + 1 < document.lineCount
        ? new vscode.Position(range.end.line + 1, 0)
        : document.lineAt(range.end.line).range.end;
    const pending: PendingEdit = {
      editor,
      document,
      start: document.offsetAt(lineStart),
      before: document.getText(new vscode.Range(lineStart, lineEnd)),
      prefix: document.getText(new vscode.Range(lineStart, range.start)),
      suffix: document.getText(new vscode.Range(range.end, lineEnd)),
      eol: document.eol === vscode.EndOfLine.CRLF ? "\r\n" : "\n",
      rewrite: "",
      shown: "",
      queue: Promise.resolve(),
      streaming: true,
      cancel: new vscode.CancellationTokenSource(),
    };
    pending.shown = pending.before;
    this.#pending = pending;
    editor.selection = new vscode.Selection(lineStart, lineStart);
    await vscode.commands.executeCommand("setContext", "spark.editPending", true);
    this.#lensesChanged.fire();
    try {
      const result = (await client.sendRequest(
        ExecuteCommandRequest.type,
        {
          command: "spark.quickEdit",
          arguments: [
            { textDocument: { uri: document.uri.toString() }, range: toLspRange(range), instruction },
          ],
        },
        pending.cancel.token,
      )) as QuickEditResult;
      if (this.#pending !== pending) return;
      pending.streaming = false;
      this.#show(pending, result.newText);
      await pending.queue;
      this.#lensesChanged.fire();
    } catch (error) {
      if (this.#pending !== pending) return;
      await this.finish(false);
      void vscode.window.showErrorMessage(`Spark quick edit failed: ${describe(error)}`);
    }
  }

  /** The text of the edited lines once accepted: the rewrite between the untouched line parts. */
  #after(pending: PendingEdit): string {
    const rewrite = pending.rewrite.replace(/\r?\n/g, pending.eol);
    // While it streams, the rest of the last line waits for the rewrite's end.
    return pending.prefix + rewrite + (pending.streaming ? "" : pending.suffix);
  }

  /**
   * Shows the rewrite so far as the inline diff. Only what differs from the text shown is replaced,
   * and queued updates coalesce: each edit shows the newest rewrite.
   */
  #show(pending: PendingEdit, rewrite: string): void {
    pending.rewrite = rewrite;
    pending.queue = pending.queue.then(async () => {
      if (this.#pending !== pending) return;
      const view = mergedView(pending.before, this.#after(pending), pending.eol);
      if (!(await this.#replace(pending, view.text))) return;
      const line0 = pending.document.positionAt(pending.start).line;
      const lines = (indexes: number[]): vscode.Range[] =>
        indexes.map((i) => new vscode.Range(line0 + i, 0, line0 + i, 0));
      pending.editor.setDecorations(this.#removed, lines(view.removed));
      pending.editor.setDecorations(this.#added, lines(view.added));
    });
  }

  /** Puts `text` in place of what the edit shows now, changing only the part that differs. */
  async #replace(pending: PendingEdit, text: string, undoStopAfter = false): Promise<boolean> {
    const shown = pending.shown;
    let same = 0;
    const limit = Math.min(text.length, shown.length);
    while (same < limit && text.charCodeAt(same) === shown.charCodeAt(same)) same++;
    let end = 0;
    while (
      end < limit - same &&
      text.charCodeAt(text.length - 1 - end) === shown.charCodeAt(shown.length - 1 - end)
    )
      end++;
    if (same === text.length && same === shown.length) return true;
    const document = pending.document;
    const range = new vscode.Range(
      document.positionAt(pending.start + same),
      document.positionAt(pending.start + shown.length - end),
    );
    // The first edit opens an undo step and Accept closes it: one Ctrl+Z takes the whole edit back.
    this.#ownEdits++;
    try {
      const applied = await pending.editor.edit(
        (builder) => builder.replace(range, text.slice(same, text.length - end)),
        { undoStopBefore: shown === pending.before && text !== pending.before, undoStopAfter },
      );
      if (applied) pending.shown = text;
      return applied;
    } finally {
      this.#ownEdits--;
    }
  }

  /** Accept keeps the rewrite (once it has finished); Reject puts back the original lines. */
  async finish(accept: boolean): Promise<void> {
    const pending = this.#pending;
    if (!pending || (accept && pending.streaming)) return;
    this.#pending = undefined;
    pending.cancel.cancel();
    await pending.queue.catch(() => undefined);
    pending.editor.setDecorations(this.#removed, []);
    pending.editor.setDecorations(this.#added, []);
    try {
      // Back to the original lines first (inside the streamed edits' undo steps, which so come to
      // nothing); Accept then writes the rewrite as one step of its own, so one Ctrl+Z takes it back.
      let applied = await this.#replace(pending, pending.before);
      if (applied && accept) applied = await this.#replace(pending, this.#after(pending), true);
      if (!applied) this.host.log.appendLine("quick edit: the editor refused the final edit");
    } finally {
      this.#pending = undefined;
      pending.cancel.dispose();
      this.#lensesChanged.fire();
      await vscode.commands.executeCommand("setContext", "spark.editPending", false);
    }
  }

  /** Opens the pending edit side by side: the document before it against the document after it. */
  async showDiff(): Promise<void> {
    const pending = this.#pending;
    if (!pending) return;
    const now = pending.document.getText();
    const head = now.slice(0, pending.start);
    const tail = now.slice(pending.start + pending.shown.length);
    const open = (text: string): Thenable<vscode.TextDocument> =>
      vscode.workspace.openTextDocument({ content: text, language: pending.document.languageId });
    const [before, after] = await Promise.all([
      open(head + pending.before + tail),
      open(head + this.#after(pending) + tail),
    ]);
    await vscode.commands.executeCommand("vscode.diff", before.uri, after.uri, "Spark quick edit");
  }

  provideCodeLenses(document: vscode.TextDocument): vscode.CodeLens[] {
    const pending = this.#pending;
    if (!pending || pending.document !== document) return [];
    const at = document.positionAt(pending.start);
    const range = new vscode.Range(at, at);
    const lens = (title: string, command: string): vscode.CodeLens =>
      new vscode.CodeLens(range, { title, command });
    if (pending.streaming) {
      return [lens("Spark is writing…", ""), lens("Stop (Escape)", "spark.vscode.rejectEdit")];
    }
    return [
      lens(`Accept (${mac ? "⌘Enter" : "Ctrl+Enter"})`, "spark.vscode.acceptEdit"),
      lens("Reject (Escape)", "spark.vscode.rejectEdit"),
      lens("Show as a Diff", "spark.vscode.showEditDiff"),
    ];
  }
}

function toLspRange(range: vscode.Range): object {
  return {
    start: { line: range.start.line, character: range.start.character },
    end: { line: range.end.line, character: range.end.character },
  };
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
