/**
 * Ghost text, and what controls it: an inline completion provider that forwards to the language
 * server's `textDocument/inlineCompletion` (VS Code's cancellation becomes `$/cancelRequest`), after
 * checking here that the document may get completions at all: `spark.completions.enabled` (global,
 * or per language through VS Code's `[language]` settings), `spark.completions.disabledLanguages`,
 * `spark.completions.excludePatterns` (secrets files) and a snooze. The language server checks the
 * same settings again before it sends anything (src/lsp/file-filter.ts, shared), so a secrets file
 * never leaves the editor whichever side is older.
 */
import * as vscode from "vscode";
import type { LanguageClient } from "vscode-languageclient/node";
import {
  completionsBlocked,
  DEFAULT_EXCLUDE_PATTERNS,
  matchesAny,
  type CompletionFilter,
} from "../../../src/lsp/file-filter.js";

interface InlineItem {
  insertText: string | { value: string };
  filterText?: string;
  range?: { start: { line: number; character: number }; end: { line: number; character: number } };
}

export interface CompletionsHost {
  client(): LanguageClient | undefined;
  /** A quick edit stands in a document: no ghost text meanwhile. */
  editPending(): boolean;
  log: vscode.OutputChannel;
  /** The on/off state or the snooze changed (the status bar shows them). */
  changed(): void;
}

export const SNOOZE_MS = 5 * 60_000;

export class Completions {
  #snoozedUntil = 0;
  #snoozeTimer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    context: vscode.ExtensionContext,
    private readonly host: CompletionsHost,
  ) {
    context.subscriptions.push(
      vscode.languages.registerInlineCompletionItemProvider(
        { pattern: "**" },
        {
          provideInlineCompletionItems: (document, position, context, token) =>
            this.#provide(document, position, context, token),
        },
      ),
      { dispose: () => clearTimeout(this.#snoozeTimer) },
    );
  }

  /** The settings as the language server takes them (`completions` of its options): global values. */
  filter(): CompletionFilter {
    const settings = vscode.workspace.getConfiguration("spark.completions");
    return {
      enabled: settings.get<boolean>("enabled") ?? true,
      disabledLanguages: settings.get<string[]>("disabledLanguages") ?? [],
      excludePatterns: settings.get<string[]>("excludePatterns") ?? [...DEFAULT_EXCLUDE_PATTERNS],
    };
  }

  /** Why `document` gets no ghost text now, or undefined. */
  blocked(document: vscode.TextDocument): string | undefined {
    if (this.snoozedUntil !== undefined) return "completions are snoozed";
    // Scoped to the document, so a `[markdown]` section's `spark.completions.enabled` counts.
    const enabled = vscode.workspace.getConfiguration("spark.completions", document).get<boolean>("enabled");
    return completionsBlocked(
      { ...this.filter(), enabled: enabled ?? true },
      {
        path: document.uri.scheme === "file" ? document.uri.fsPath : undefined,
        languageId: document.languageId,
      },
    );
  }

  /**
   * The excludePatterns entry `document` matches (a secrets file), or undefined. Such a document is
   * not even synced to the language server (see the client's middleware in extension.ts).
   */
  secret(document: vscode.TextDocument): string | undefined {
    if (document.uri.scheme !== "file") return undefined;
    return matchesAny(document.uri.fsPath, this.filter().excludePatterns);
  }

  get enabled(): boolean {
    return this.filter().enabled;
  }

  /** Turns completions on or off for every workspace (the user setting). */
  async setEnabled(on: boolean): Promise<void> {
    await vscode.workspace
      .getConfiguration("spark.completions")
      .update("enabled", on, vscode.ConfigurationTarget.Global);
    this.host.changed();
  }

  /** When the snooze ends, or undefined when there is none. */
  get snoozedUntil(): number | undefined {
    return this.#snoozedUntil > Date.now() ? this.#snoozedUntil : undefined;
  }

  /** No ghost text for `ms` (0 ends a snooze). */
  snooze(ms: number): void {
    clearTimeout(this.#snoozeTimer);
    this.#snoozedUntil = ms > 0 ? Date.now() + ms : 0;
    if (ms > 0) this.#snoozeTimer = setTimeout(() => this.snooze(0), ms);
    this.host.changed();
  }

  async #provide(
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
  ): Promise<vscode.InlineCompletionItem[]> {
    const started = performance.now();
    const client = this.host.client();
    if (!client || this.host.editPending() || this.blocked(document) !== undefined) return [];
    try {
      const requested = performance.now();
      const result = await client.sendRequest<{ items: InlineItem[] } | InlineItem[] | null>(
        "textDocument/inlineCompletion",
        {
          textDocument: { uri: document.uri.toString() },
          position: { line: position.line, character: position.character },
          context: { triggerKind: context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke ? 1 : 2 },
        },
        token,
      );
      const answered = performance.now();
      const items = Array.isArray(result) ? result : (result?.items ?? []);
      const completions = items.map((item) => {
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
      // spark.logTimings (for the benchmark, BENCHMARKS.md figure 13): what the extension adds
      // around the language server's answer, and that answer's own time.
      if (vscode.workspace.getConfiguration("spark").get<boolean>("logTimings")) {
        const own = performance.now() - answered + (requested - started);
        this.host.log.appendLine(
          `completion timing: extension ${own.toFixed(3)} ms, spark lsp ${(answered - requested).toFixed(3)} ms, items ${items.length}`,
        );
      }
      return completions;
    } catch (error) {
      if (!token.isCancellationRequested) {
        this.host.log.appendLine(
          `completion failed: ${error instanceof Error ? error.message : String(error)}`,
        );
      }
      return [];
    }
  }
}
