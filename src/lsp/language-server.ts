/**
 * `spark lsp`: a language server over stdio, a client of the Spark server for editors.
 *
 * Contract (the VS Code extension and other editors depend on it; see the README):
 * - capabilities: incremental `textDocumentSync`, `inlineCompletionProvider` (LSP 3.18
 *   `textDocument/inlineCompletion` → `{items: [{insertText}]}`) and `executeCommandProvider` with
 *   `spark.quickEdit`, `spark.toggleTier`, `spark.setTier` and `spark.status`;
 * - completions are `POST /v1/completions` (streamed) with `model` = the tier, `prompt` / `suffix`
 *   around the cursor and `input_extra` = recently edited chunks of other files; `$/cancelRequest`
 *   and every document change abort the HTTP request in flight, so the server stops the engine;
 *   a document that `completions` (enabled, disabledLanguages, excludePatterns: see file-filter.ts)
 *   rules out gets `{items: []}` and nothing is sent, and one matching excludePatterns (secrets) is
 *   never in `input_extra` either;
 * - `spark.quickEdit [{textDocument:{uri}, range, instruction}]` streams `POST /v1/chat/completions`
 *   with the selection as `prediction` and `max_tokens` = quickEditMaxTokens(selection), notifies `spark/quickEditProgress {uri, range, from, text}`
 *   (deltas: the rewrite so far is the previous one's first `from` characters and `text`; at most
 *   one every PROGRESS_INTERVAL_MS) and returns `{uri, range, newText, ttftMs, tokensPerSecond}`
 *   without applying it;
 * - `spark/status {tier, server, lastTtftMs, tokensPerSecond}` is notified whenever it changes;
 * - bad params are InvalidParams; server errors are RequestFailed with `{status, code, type,
 *   param}` in `data`, and one `window/showMessage` until a request succeeds again.
 */
import { fileURLToPath } from "node:url";
import { relative } from "node:path";
import {
  createConnection,
  ErrorCodes,
  LSPErrorCodes,
  MessageType,
  ResponseError,
  StreamMessageWriter,
  TextDocumentSyncKind,
  type CancellationToken,
  type Connection,
  type InitializeResult,
  type InlineCompletionList,
  type Message,
} from "vscode-languageserver/node";
import { TextDocument } from "vscode-languageserver-textdocument";
import { z } from "zod";
import { CompletionCache } from "./completion-cache.js";
import { EditRing } from "./edit-ring.js";
import { BoundedMessageReader, REFUSED_METHOD, type RefusedMessage } from "./message-reader.js";
import { clipPrefix, clipSuffix, DEFAULT_CLIP, midLine, postProcess } from "./fim-context.js";
import { completionsBlocked, matchesAny } from "./file-filter.js";
import {
  finalRewrite,
  ProgressThrottle,
  quickEditMaxTokens,
  quickEditMessages,
  stripFence,
} from "./quick-edit.js";
import { AbortedError, postStream, ServerError } from "./server-client.js";
import {
  SettingsError,
  withInitializationOptions,
  withLiveSettings,
  type LspSettings,
  type Tier,
} from "./settings.js";

export const COMMANDS = ["spark.quickEdit", "spark.toggleTier", "spark.setTier", "spark.status"] as const;
export const MAX_COMPLETION_TOKENS = 128;

export interface SparkStatus {
  tier: Tier;
  server: string;
  lastTtftMs: number | null;
  tokensPerSecond: number | null;
}

const position = z.object({ line: z.number().int().min(0), character: z.number().int().min(0) });
const range = z
  .object({ start: position, end: position })
  .refine(
    (r) => r.start.line < r.end.line || (r.start.line === r.end.line && r.start.character <= r.end.character),
    "range.start must not come after range.end",
  );
const inlineParams = z.object({
  textDocument: z.object({ uri: z.string().min(1) }),
  position,
});
const quickEditArgs = z.tuple([
  z.object({
    textDocument: z.object({ uri: z.string().min(1) }),
    range,
    instruction: z.string().trim().min(1, "instruction must not be empty"),
  }),
]);
const setTierArgs = z.tuple([z.enum(["spark", "deep"])]);
const refusedParams = z.object({
  bytes: z.number(),
  id: z.union([z.number(), z.string()]).optional(),
  method: z.string().optional(),
  uri: z.string().optional(),
});

function refusal(message: RefusedMessage, limit: number): string {
  const what = [message.method, message.uri].filter(Boolean).join(" ");
  return `refused a ${message.bytes}-byte message from the editor${what ? ` (${what})` : ""}: over the limit of ${limit} bytes (spark lsp --max-message-bytes)`;
}

function invalid(error: z.ZodError, what: string): ResponseError<void> {
  const detail = error.issues
    .map((issue) => `${issue.path.length ? issue.path.join(".") + ": " : ""}${issue.message}`)
    .join("; ");
  return new ResponseError(ErrorCodes.InvalidParams, `${what}: ${detail}`);
}

function cancelled(): ResponseError<void> {
  return new ResponseError(LSPErrorCodes.RequestCancelled, "request cancelled");
}

/** Tokens per second over the time after the first token; null when it cannot be told. */
function rate(tokens: number, firstAt: number | undefined, endAt: number): number | null {
  if (firstAt === undefined || tokens < 2 || endAt <= firstAt) return null;
  return Math.round(((tokens - 1) / ((endAt - firstAt) / 1000)) * 10) / 10;
}

/**
 * The file path of a `file:` URI, or undefined for any other URI and for one Node cannot turn into
 * a path here (`file://host/…`, an encoded `/`): such a document still gets completions, named by
 * its URI, and one odd URI never fails another document's request.
 */
function pathOf(uri: string): string | undefined {
  if (!uri.startsWith("file:")) return undefined;
  try {
    return fileURLToPath(uri);
  } catch {
    return undefined;
  }
}

function wait(ms: number, token: CancellationToken): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    const listener = token.onCancellationRequested(done);
    function done(): void {
      clearTimeout(timer);
      listener.dispose();
      resolve();
    }
  });
}

export class SparkLanguageServer {
  private settings: LspSettings;
  private readonly documents = new Map<string, TextDocument>();
  private readonly cache = new CompletionCache();
  private readonly ring: EditRing;
  private readonly inFlight = new Set<AbortController>();
  private latest = 0;
  private roots: string[] = [];
  private lastTtftMs: number | null = null;
  private tokensPerSecond: number | null = null;
  /** The server error last shown with window/showMessage; cleared by a success. */
  private shownError: string | undefined;
  /** `shutdown` came: a closed stdin then ends the process with 0, as `exit` does. */
  shutdownReceived = false;

  constructor(
    private readonly connection: Connection,
    settings: LspSettings,
  ) {
    this.settings = settings;
    this.ring = new EditRing((uri, from, to) => {
      const document = this.documents.get(uri);
      // A secrets file is never context of another file's completion either.
      if (!document || matchesAny(pathOf(uri) ?? "", this.settings.completions.excludePatterns)) {
        return undefined;
      }
      return document.getText({ start: { line: from, character: 0 }, end: { line: to, character: 0 } });
    });
    this.listen();
  }

  status(): SparkStatus {
    return {
      tier: this.settings.tier,
      server: this.settings.server,
      lastTtftMs: this.lastTtftMs,
      tokensPerSecond: this.tokensPerSecond,
    };
  }

  private listen(): void {
    const c = this.connection;
    c.onInitialize((params): InitializeResult => {
      try {
        this.settings = withInitializationOptions(this.settings, params.initializationOptions);
      } catch (error) {
        if (error instanceof SettingsError) throw new ResponseError(ErrorCodes.InvalidParams, error.message);
        throw error;
      }
      const folders = params.workspaceFolders ?? [];
      const roots = folders.length ? folders.map((f) => f.uri) : params.rootUri ? [params.rootUri] : [];
      this.roots = roots.map(pathOf).filter((path) => path !== undefined);
      return {
        capabilities: {
          textDocumentSync: { openClose: true, change: TextDocumentSyncKind.Incremental },
          inlineCompletionProvider: true,
          executeCommandProvider: { commands: [...COMMANDS] },
        },
        serverInfo: { name: "spark", version: "0.1.0" },
      };
    });
    c.onDidOpenTextDocument(({ textDocument: d }) => {
      this.documents.set(d.uri, TextDocument.create(d.uri, d.languageId, d.version, d.text));
    });
    c.onDidChangeTextDocument(({ textDocument, contentChanges }) => {
      this.abortAll();
      const document = this.documents.get(textDocument.uri);
      if (!document) return;
      for (const change of contentChanges) {
        if ("range" in change) this.ring.record(textDocument.uri, change.range.start.line);
      }
      this.documents.set(
        textDocument.uri,
        TextDocument.update(document, contentChanges, textDocument.version),
      );
    });
    c.onDidCloseTextDocument(({ textDocument }) => {
      this.ring.close(textDocument.uri);
      this.documents.delete(textDocument.uri);
    });
    c.onDidChangeConfiguration(({ settings }) => {
      const spark = (settings as { spark?: unknown } | null | undefined)?.spark;
      if (spark === undefined) return;
      try {
        this.update(withLiveSettings(this.settings, spark));
      } catch (error) {
        if (!(error instanceof SettingsError)) throw error;
        void c.sendNotification("window/showMessage", {
          type: MessageType.Error,
          message: `Spark: ${error.message}`,
        });
      }
    });
    c.languages.inlineCompletion.on((params, token) => this.inlineCompletion(params, token));
    c.onExecuteCommand(async ({ command, arguments: args }, token) => {
      switch (command) {
        case "spark.quickEdit":
          return this.quickEdit(args ?? [], token);
        case "spark.toggleTier":
          this.update({ ...this.settings, tier: this.settings.tier === "spark" ? "deep" : "spark" });
          return { tier: this.settings.tier };
        case "spark.setTier": {
          const parsed = setTierArgs.safeParse(args ?? []);
          if (!parsed.success) throw invalid(parsed.error, 'spark.setTier takes ["spark" | "deep"]');
          this.update({ ...this.settings, tier: parsed.data[0] });
          return { tier: this.settings.tier };
        }
        case "spark.status":
          return this.status();
        default:
          throw new ResponseError(
            ErrorCodes.InvalidParams,
            `unknown command ${JSON.stringify(command)}; Spark's commands are ${COMMANDS.join(", ")}`,
          );
      }
    });
    c.onNotification(REFUSED_METHOD, (params: unknown) => {
      const parsed = refusedParams.safeParse(params);
      if (parsed.success) this.refused(parsed.data as RefusedMessage);
    });
    c.onShutdown(() => {
      this.shutdownReceived = true;
      this.abortAll();
    });
  }

  /**
   * A message from the editor over the size limit was skipped (BoundedMessageReader delivers this in
   * its place, in order). A document it changed is forgotten, since its text here is no longer the
   * editor's: requests on it say it is not open until the editor opens it again.
   */
  private refused(message: RefusedMessage): void {
    if (message.uri !== undefined && this.documents.delete(message.uri)) {
      this.ring.close(message.uri);
      this.abortAll();
    }
    void this.connection.sendNotification("window/showMessage", {
      type: MessageType.Warning,
      message: `Spark: ${refusal(message, this.settings.maxMessageBytes)}`,
    });
  }

  private update(next: LspSettings): void {
    const previous = this.settings;
    this.settings = next;
    if (next.server !== previous.server || next.tier !== previous.tier || next.apiKey !== previous.apiKey) {
      this.abortAll();
      this.cache.clear();
      this.shownError = undefined;
    }
    if (next.server !== previous.server || next.tier !== previous.tier) this.notifyStatus();
  }

  private notifyStatus(): void {
    void this.connection.sendNotification("spark/status", this.status());
  }

  private abortAll(): void {
    for (const controller of this.inFlight) controller.abort();
    this.inFlight.clear();
  }

  /** The name the model sees: relative to a workspace folder, else the path, else the URI itself. */
  private filename(uri: string): string {
    const path = pathOf(uri);
    if (path === undefined) return uri;
    for (const root of this.roots) {
      const rel = relative(root, path);
      if (rel !== "" && !rel.startsWith("..")) return rel;
    }
    return path;
  }

  private document(uri: string): TextDocument {
    const document = this.documents.get(uri);
    if (!document) {
      throw new ResponseError(ErrorCodes.InvalidParams, `document ${uri} is not open (send didOpen first)`);
    }
    return document;
  }

  /** A server error: shown once until a request succeeds again, and answered as RequestFailed. */
  private failed(error: ServerError): ResponseError<ReturnType<ServerError["toData"]>> {
    const key = `${error.status}:${error.code}`;
    if (this.shownError !== key) {
      this.shownError = key;
      void this.connection.sendNotification("window/showMessage", {
        type: MessageType.Error,
        message: `Spark: ${error.message}`,
      });
    }
    return new ResponseError(LSPErrorCodes.RequestFailed, error.message, error.toData());
  }

  private async inlineCompletion(params: unknown, token: CancellationToken): Promise<InlineCompletionList> {
    const parsed = inlineParams.safeParse(params);
    if (!parsed.success) throw invalid(parsed.error, "textDocument/inlineCompletion");
    const { textDocument, position: at } = parsed.data;
    const document = this.document(textDocument.uri);
    // Checked before anything else: a secrets file's text never reaches a request, nor the cache.
    if (
      completionsBlocked(this.settings.completions, {
        path: pathOf(textDocument.uri),
        languageId: document.languageId,
      })
    ) {
      return { items: [] };
    }
    const sequence = ++this.latest;
    // A newer request makes older ones stale.
    this.abortAll();
    const text = document.getText();
    const offset = document.offsetAt(at);
    const prefix = text.slice(0, offset);
    const suffix = text.slice(offset);
    const cached = this.cache.get(textDocument.uri, prefix, suffix);
    if (cached !== undefined) return { items: cached === "" ? [] : [{ insertText: cached }] };

    if (this.settings.debounceMs > 0) await wait(this.settings.debounceMs, token);
    if (token.isCancellationRequested) throw cancelled();
    if (sequence !== this.latest || this.documents.get(textDocument.uri) !== document) return { items: [] };

    const controller = new AbortController();
    this.inFlight.add(controller);
    const cancel = token.onCancellationRequested(() => controller.abort());
    const settings = this.settings;
    const body = {
      model: settings.tier,
      prompt: clipPrefix(prefix, DEFAULT_CLIP.prefixLines, DEFAULT_CLIP.prefixChars),
      suffix: clipSuffix(suffix, DEFAULT_CLIP.suffixLines, DEFAULT_CLIP.suffixChars),
      input_extra: this.ring.chunks(textDocument.uri, (uri) => this.filename(uri)),
      max_tokens: MAX_COMPLETION_TOKENS,
      temperature: 0,
      stop: midLine(suffix) ? ["\n"] : ["\n\n"],
      stream: true,
    };
    let completion = "";
    let tokens = 0;
    let usageTokens: number | undefined;
    const startedAt = performance.now();
    let firstAt: number | undefined;
    try {
      for await (const chunk of postStream("/completions", body, {
        server: settings.server,
        apiKey: settings.apiKey,
        signal: controller.signal,
      })) {
        const choice = (chunk.choices as { text?: unknown }[] | undefined)?.[0];
        if (typeof choice?.text === "string" && choice.text !== "") {
          firstAt ??= performance.now();
          completion += choice.text;
          tokens++;
        }
        const usage = chunk.usage as { completion_tokens?: unknown } | undefined;
        if (typeof usage?.completion_tokens === "number") usageTokens = usage.completion_tokens;
      }
    } catch (error) {
      if (error instanceof AbortedError || controller.signal.aborted) {
        if (token.isCancellationRequested) throw cancelled();
        return { items: [] };
      }
      if (error instanceof ServerError) throw this.failed(error);
      throw error;
    } finally {
      cancel.dispose();
      this.inFlight.delete(controller);
    }
    const endAt = performance.now();
    this.shownError = undefined;
    this.lastTtftMs = firstAt === undefined ? null : Math.round((firstAt - startedAt) * 10) / 10;
    this.tokensPerSecond = rate(usageTokens ?? tokens, firstAt, endAt);
    this.notifyStatus();
    const shown = postProcess(completion, suffix) ?? "";
    this.cache.set(textDocument.uri, prefix, suffix, shown);
    return { items: shown === "" ? [] : [{ insertText: shown }] };
  }

  private async quickEdit(args: unknown[], token: CancellationToken): Promise<unknown> {
    const parsed = quickEditArgs.safeParse(args);
    if (!parsed.success) {
      throw invalid(parsed.error, "spark.quickEdit takes [{textDocument: {uri}, range, instruction}]");
    }
    const [{ textDocument, range: selected, instruction }] = parsed.data;
    const document = this.document(textDocument.uri);
    const text = document.getText();
    const start = document.offsetAt(selected.start);
    const end = document.offsetAt(selected.end);
    const selection = text.slice(start, end);
    const settings = this.settings;
    const body: Record<string, unknown> = {
      model: settings.tier,
      messages: quickEditMessages({
        filename: this.filename(textDocument.uri),
        languageId: document.languageId,
        before: text.slice(0, start),
        selection,
        after: text.slice(end),
        instruction,
      }),
      temperature: 0,
      max_tokens: quickEditMaxTokens(selection),
      stream: true,
      stream_options: { include_usage: true },
    };
    if (selection !== "") body.prediction = { type: "content", content: selection };

    const controller = new AbortController();
    const cancel = token.onCancellationRequested(() => controller.abort());
    let answer = "";
    const progress = new ProgressThrottle(
      () => stripFence(answer),
      (from, text) =>
        void this.connection.sendNotification("spark/quickEditProgress", {
          uri: textDocument.uri,
          range: selected,
          from,
          text,
        }),
    );
    let tokens = 0;
    let usageTokens: number | undefined;
    const startedAt = performance.now();
    let firstAt: number | undefined;
    try {
      for await (const chunk of postStream("/chat/completions", body, {
        server: settings.server,
        apiKey: settings.apiKey,
        signal: controller.signal,
      })) {
        const choice = (chunk.choices as { delta?: { content?: unknown } }[] | undefined)?.[0];
        const delta = choice?.delta?.content;
        if (typeof delta === "string" && delta !== "") {
          firstAt ??= performance.now();
          answer += delta;
          tokens++;
          progress.changed();
        }
        const usage = chunk.usage as { completion_tokens?: unknown } | undefined;
        if (typeof usage?.completion_tokens === "number") usageTokens = usage.completion_tokens;
      }
    } catch (error) {
      if (error instanceof AbortedError || controller.signal.aborted) throw cancelled();
      if (error instanceof ServerError) throw this.failed(error);
      throw error;
    } finally {
      progress.stop();
      cancel.dispose();
    }
    const endAt = performance.now();
    const newText = finalRewrite(answer, selection);
    // After the last progress the client's copy is the final text, so it can show it as it stands.
    progress.finish(newText);
    this.shownError = undefined;
    this.lastTtftMs = firstAt === undefined ? null : Math.round((firstAt - startedAt) * 10) / 10;
    this.tokensPerSecond = rate(usageTokens ?? tokens, firstAt, endAt);
    this.notifyStatus();
    return {
      uri: textDocument.uri,
      range: selected,
      newText,
      ttftMs: this.lastTtftMs,
      tokensPerSecond: this.tokensPerSecond,
    };
  }
}

/**
 * Serves LSP on stdin/stdout until the client says exit (the library exits then) or closes the
 * pipe (0 after `shutdown`, else 1). Stdout carries only LSP messages: console output goes to
 * stderr, and so does every problem with what the editor sent (BoundedMessageReader): a message
 * over `maxMessageBytes` is refused (a request gets an InvalidRequest answer), a body that is not
 * JSON is skipped, and a frame that cannot be read ends the process with 1, so the editor restarts
 * it instead of talking to a server that can no longer read it.
 */
export function runLanguageServer(settings: LspSettings): SparkLanguageServer {
  const toStderr = (...args: unknown[]): void => console.error(...args);
  console.log = console.info = console.debug = toStderr;
  const writer = new StreamMessageWriter(process.stdout);
  const limit = settings.maxMessageBytes;
  const reader = new BoundedMessageReader(process.stdin, limit, {
    refused(message) {
      process.stderr.write(`spark lsp: ${refusal(message, limit)}\n`);
      if (message.id === undefined || message.method === undefined) return;
      void writer.write({
        jsonrpc: "2.0",
        id: message.id,
        error: {
          code: ErrorCodes.InvalidRequest,
          message: `the ${message.bytes}-byte ${message.method} request is over spark lsp's limit of ${limit} bytes (--max-message-bytes)`,
        },
      } as Message);
    },
    skipped(reason) {
      process.stderr.write(`spark lsp: skipped ${reason}\n`);
    },
    broken(reason) {
      process.stderr.write(
        `spark lsp: cannot read the editor's messages any more (${reason}); exiting so the editor can restart it\n`,
      );
      const exit = (): never => process.exit(1);
      setTimeout(exit, 1000).unref();
      void connection
        .sendNotification("window/showMessage", {
          type: MessageType.Error,
          message: `Spark: spark lsp received a malformed message (${reason}) and restarts`,
        })
        .finally(exit);
    },
  });
  const connection = createConnection(reader, writer);
  const server = new SparkLanguageServer(connection, settings);
  const closed = (): void => process.exit(server.shutdownReceived ? 0 : 1);
  process.stdin.once("end", closed);
  process.stdin.once("close", closed);
  connection.listen();
  return server;
}
