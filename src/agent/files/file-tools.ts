/**
 * The agent's read-only file tools: `readFile`, `listFiles` and `searchFiles`. Every path and every
 * read goes through the confined file layer (fs/confined.ts, the workspace as its root): resolved
 * beneath the root, regular files only (a FIFO is refused, never waited on), secrets refused
 * (the home directory's, `.env` files). Listing and searching share one walk that yields files in
 * sorted order, honours `.gitignore` files at every level (and `.git/info/exclude`) the way git
 * does, always skips `.git` and the home directory's secrets, and never follows symlinked
 * directories (a symlinked file is included only when its target is a file inside the workspace).
 */
import path from "node:path";
import type { Worker } from "node:worker_threads";
import ignore, { type Ignore } from "ignore";
import { readPrefix } from "../fs/confined.js";
import { ToolError, type Workspace } from "./workspace.js";

export const READ_DEFAULT_LIMIT = 2000;
export const LIST_DEFAULT_LIMIT = 1000;
export const SEARCH_DEFAULT_LIMIT = 200;
/** Files larger than this are read in chunks, never whole. */
export const READ_WHOLE_MAX_BYTES = 1024 * 1024;
/** Files larger than this are skipped by `searchFiles`. */
export const SEARCH_MAX_FILE_BYTES = 2 * 1024 * 1024;
/** `readFile` cuts longer lines (marking the result truncated) so one minified line cannot flood the context. */
export const READ_MAX_LINE_CHARS = 2000;
/** `searchFiles` cuts longer matching lines around the match. */
export const SEARCH_MAX_LINE_CHARS = 300;
/** A NUL byte in this many leading bytes marks a file as binary. */
const BINARY_SNIFF_BYTES = 8192;
const CHUNK_BYTES = 64 * 1024;
const SEARCH_CONCURRENCY = 16;
/** How long one search may run before it is stopped. */
export const SEARCH_TIMEOUT_MS = 10_000;

export interface ReadFileArgs {
  path: string;
  /** 1-based first line to return (default 1). */
  offset?: number;
  /** Maximum number of lines to return (default 2000). */
  limit?: number;
}

export interface ReadFileResult {
  /** The selected lines without their line terminators (CR included), joined with "\n". */
  text: string;
  totalLines: number;
  /** True when lines after the returned ones exist or a returned line was cut. */
  truncated: boolean;
}

export interface ListFilesArgs {
  /** A directory inside the workspace (default: the root). */
  path?: string;
  /** Maximum number of files (default 1000). */
  limit?: number;
}

export interface ListFilesResult {
  /** Workspace-relative posix paths, sorted. */
  files: string[];
  truncated: boolean;
}

export interface SearchFilesArgs {
  /** JavaScript RegExp source, matched against each line. */
  pattern: string;
  /** A directory or file inside the workspace (default: the root). */
  path?: string;
  /** A glob such as "*.ts" or "*.{ts,tsx}", matched against the file's basename (or its path if it has a "/"). */
  glob?: string;
  /** Maximum number of matches (default 200). */
  limit?: number;
  ignoreCase?: boolean;
}

export interface SearchMatch {
  /** Workspace-relative posix path. */
  path: string;
  /** 1-based line number. */
  line: number;
  text: string;
}

export interface SearchFilesResult {
  matches: SearchMatch[];
  truncated: boolean;
}

function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isInteger(value) || value < 1) {
    throw new ToolError("invalid_argument", `${name} must be a positive integer, got ${String(value)}.`);
  }
  return value;
}

function looksBinary(bytes: Uint8Array): boolean {
  return bytes.subarray(0, BINARY_SNIFF_BYTES).includes(0);
}

/** Collects lines [first, first + count) of a byte stream fed in chunks, and counts all lines. */
class LineWindow {
  readonly lines: string[] = [];
  cut = false;
  private lineNo = 1;
  private parts: Buffer[] = [];
  private partBytes = 0;
  private pending = false;
  private readonly maxLineBytes = READ_MAX_LINE_CHARS * 4 + 4;

  constructor(
    private readonly first: number,
    private readonly count: number,
  ) {}

  private inWindow(): boolean {
    return this.lineNo >= this.first && this.lineNo < this.first + this.count;
  }

  feed(chunk: Buffer): void {
    let pos = 0;
    while (pos < chunk.length) {
      const nl = chunk.indexOf(10, pos);
      const end = nl === -1 ? chunk.length : nl;
      if (end > pos) {
        this.pending = true;
        if (this.inWindow() && this.partBytes < this.maxLineBytes) {
          const piece = chunk.subarray(pos, Math.min(end, pos + this.maxLineBytes - this.partBytes));
          this.parts.push(Buffer.from(piece));
          this.partBytes += piece.length;
          if (piece.length < end - pos) this.cut = true;
        }
      }
      if (nl === -1) return;
      this.finishLine();
      pos = nl + 1;
    }
  }

  private finishLine(): void {
    if (this.inWindow()) {
      let line = Buffer.concat(this.parts).toString("utf8");
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line.length > READ_MAX_LINE_CHARS) {
        line = `${line.slice(0, READ_MAX_LINE_CHARS)}…`;
        this.cut = true;
      }
      this.lines.push(line);
    }
    this.lineNo++;
    this.parts = [];
    this.partBytes = 0;
    this.pending = false;
  }

  /** Ends the stream; returns the total number of lines. */
  end(): number {
    if (this.pending) this.finishLine();
    return this.lineNo - 1;
  }
}

/**
 * Reads lines `offset .. offset + limit - 1` of a text file. Throws ToolError "not_a_file" for a
 * directory or a binary file (a NUL byte in its first 8 KiB) and "invalid_argument" for an offset past
 * the end. Files over 1 MiB are streamed in chunks instead of being read whole.
 */
export async function readFile(ws: Workspace, args: ReadFileArgs): Promise<ReadFileResult> {
  const offset = positiveInteger("offset", args.offset, 1);
  const limit = positiveInteger("limit", args.limit, READ_DEFAULT_LIMIT);
  const where = await ws.locate(args.path);
  if (where.kind === "absent") {
    throw new ToolError("not_found", `${args.path} does not exist (in the workspace ${ws.root}).`);
  }
  if (where.kind === "directory") {
    throw new ToolError(
      "not_a_file",
      `${args.path} is a directory, not a file; use listFiles to see what it contains.`,
    );
  }
  const window = new LineWindow(offset, limit);
  await ws.withFile(where.rel, { final: "entry" }, async ({ handle, info }) => {
    if (info.size <= READ_WHOLE_MAX_BYTES) {
      const bytes = await readPrefix(handle, READ_WHOLE_MAX_BYTES + 1);
      if (looksBinary(bytes)) throw binaryFile(args.path);
      window.feed(bytes);
      return;
    }
    const buffer = Buffer.allocUnsafe(CHUNK_BYTES);
    let first = true;
    for (;;) {
      const { bytesRead } = await handle.read(buffer, 0, CHUNK_BYTES, null);
      if (bytesRead === 0) break;
      const chunk = buffer.subarray(0, bytesRead);
      if (first && looksBinary(chunk)) throw binaryFile(args.path);
      first = false;
      window.feed(chunk);
    }
  });
  const totalLines = window.end();
  if (offset > 1 && offset > totalLines) {
    throw new ToolError(
      "invalid_argument",
      `offset ${offset} is past the end of ${args.path}, which has ${totalLines} line${totalLines === 1 ? "" : "s"}.`,
    );
  }
  return {
    text: window.lines.join("\n"),
    totalLines,
    truncated: window.cut || offset + limit - 1 < totalLines,
  };
}

function binaryFile(p: string): ToolError {
  return new ToolError(
    "not_a_file",
    `${p} looks like a binary file (it contains NUL bytes); readFile only reads text files.`,
  );
}

/** Files under a directory (recursively), sorted, honouring .gitignore. Throws ToolError "not_a_directory" for a file. */
export async function listFiles(ws: Workspace, args: ListFilesArgs = {}): Promise<ListFilesResult> {
  const limit = positiveInteger("limit", args.limit, LIST_DEFAULT_LIMIT);
  const base = await ws.locate(args.path ?? ".");
  if (base.kind === "absent") throw new ToolError("not_found", `${args.path} does not exist.`);
  if (base.kind !== "directory") {
    throw new ToolError(
      "not_a_directory",
      `${args.path ?? "."} is a file, not a directory; use readFile to read it.`,
    );
  }
  const files: string[] = [];
  for await (const entry of walkFiles(ws, base.rel)) {
    if (files.length === limit) return { files, truncated: true };
    files.push(entry.rel);
  }
  return { files, truncated: false };
}

export interface SearchOptions {
  /** Stops the search (ToolError "cancelled"). */
  signal?: AbortSignal;
  /** The search's time budget (default `SEARCH_TIMEOUT_MS`); past it, ToolError "timeout". */
  timeoutMs?: number;
}

/** Idle search workers kept for the next search (at most one), unref'd so they never hold the process. */
const idleWorkers: Worker[] = [];

/** worker_threads loads with the first search, not with the agent (start-up, figure 34). */
async function startSearchWorker(): Promise<Worker> {
  const { Worker } = await import("node:worker_threads");
  const here = import.meta.url;
  if (!here.endsWith(".ts")) return new Worker(new URL("./search-worker.js", here));
  // Running from source (tsx): a worker does not inherit the TypeScript loader, so it registers it.
  const tsx = JSON.stringify(import.meta.resolve("tsx/esm/api"));
  const entry = JSON.stringify(new URL("./search-worker.ts", here).href);
  return new Worker(`import(${tsx}).then((tsx) => { tsx.register(); return import(${entry}); });`, {
    eval: true,
  });
}

function seconds(ms: number): string {
  return `${Number((ms / 1000).toFixed(1))} s`;
}

/**
 * Lines matching a regular expression in the files under a directory (or in one file), in path then
 * line order. Skips binary files and files over 2 MiB. Throws ToolError "invalid_argument" for an
 * invalid pattern or glob.
 *
 * The search (the walk, the .gitignore rules and the matching) runs in a worker thread, because a
 * regular expression can backtrack for longer than anyone will wait (`^(a+)+$` on a line of 40 a's
 * and a !) and a regex cannot be interrupted on the thread that runs it: the worker is terminated
 * when `timeoutMs` passes (ToolError "timeout", telling the model to simplify the pattern) or
 * `signal` aborts (ToolError "cancelled"), and the agent's event loop stays free meanwhile.
 */
export async function searchFiles(
  ws: Workspace,
  args: SearchFilesArgs,
  options: SearchOptions = {},
): Promise<SearchFilesResult> {
  const timeoutMs = options.timeoutMs ?? SEARCH_TIMEOUT_MS;
  const cancelled = () => new ToolError("cancelled", "The search was cancelled by the user.");
  if (options.signal?.aborted) throw cancelled();
  const worker = idleWorkers.pop() ?? (await startSearchWorker());
  if (options.signal?.aborted) {
    worker.unref();
    if (idleWorkers.length === 0) idleWorkers.push(worker);
    else void worker.terminate();
    throw cancelled();
  }
  worker.ref();
  return new Promise<SearchFilesResult>((resolve, reject) => {
    const finish = (outcome: { result: SearchFilesResult } | { error: Error }, reusable: boolean) => {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", onAbort);
      worker.off("message", onMessage);
      worker.off("error", onError);
      worker.off("exit", onExit);
      if (reusable && idleWorkers.length === 0) {
        worker.unref();
        idleWorkers.push(worker);
      } else {
        void worker.terminate();
      }
      if ("result" in outcome) resolve(outcome.result);
      else reject(outcome.error);
    };
    const onMessage = (reply: SearchReply) => {
      if (reply.ok) finish({ result: reply.result }, true);
      else
        finish(
          { error: reply.code ? new ToolError(reply.code, reply.message) : new Error(reply.message) },
          true,
        );
    };
    const onError = (error: Error) => finish({ error }, false);
    const onExit = (code: number) =>
      finish({ error: new Error(`the search worker exited (${code})`) }, false);
    const onAbort = () => finish({ error: cancelled() }, false);
    const timer = setTimeout(() => {
      finish(
        {
          error: new ToolError(
            "timeout",
            `The search timed out after ${seconds(timeoutMs)} and was stopped: the pattern may backtrack ` +
              "catastrophically (nested or overlapping quantifiers such as (a+)+ or (a|a)*), or the search " +
              "covers too many files. Simplify the pattern, or narrow the search with path or glob.",
          ),
        },
        false,
      );
    }, timeoutMs);
    options.signal?.addEventListener("abort", onAbort, { once: true });
    worker.on("message", onMessage);
    worker.on("error", onError);
    worker.on("exit", onExit);
    const request: SearchRequest = { root: ws.root, secrets: ws.secrets, args };
    worker.postMessage(request);
  });
}

/** A search for the worker (search-worker.ts). */
export interface SearchRequest {
  root: string;
  /** `Workspace.secrets` of the caller's workspace. */
  secrets: readonly string[];
  args: SearchFilesArgs;
}

export type SearchReply =
  { ok: true; result: SearchFilesResult } | { ok: false; code: string | undefined; message: string };

/**
 * `searchFiles` on the calling thread, without a time limit: only for the search worker, or for
 * callers that trust the pattern.
 */
export async function searchFilesInThread(ws: Workspace, args: SearchFilesArgs): Promise<SearchFilesResult> {
  const limit = positiveInteger("limit", args.limit, SEARCH_DEFAULT_LIMIT);
  if (typeof args.pattern !== "string" || args.pattern === "") {
    throw new ToolError("invalid_argument", "pattern must be a non-empty regular expression.");
  }
  let regex: RegExp;
  try {
    regex = new RegExp(args.pattern, args.ignoreCase === true ? "i" : "");
  } catch (error) {
    throw new ToolError(
      "invalid_argument",
      `Invalid regular expression ${JSON.stringify(args.pattern)}: ${(error as Error).message}. ` +
        `The pattern is JavaScript RegExp source; escape special characters, e.g. "foo\\(" to find "foo(".`,
    );
  }
  const glob = args.glob === undefined || args.glob === "" ? undefined : globToRegExp(args.glob);
  const base = await ws.locate(args.path ?? ".");
  if (base.kind === "absent") throw new ToolError("not_found", `${args.path} does not exist.`);

  const candidates =
    base.kind === "directory" ? walkFiles(ws, base.rel) : single({ read: base.rel, rel: base.rel });
  const matches: SearchMatch[] = [];
  const queue: Promise<SearchMatch[]>[] = [];
  const take = async (): Promise<boolean> => {
    const found = (await queue.shift()) ?? [];
    matches.push(...found);
    return matches.length > limit;
  };
  let full = false;
  for await (const entry of candidates) {
    if (glob && !glob.regex.test(glob.onPath ? entry.rel : path.posix.basename(entry.rel))) continue;
    queue.push(searchFile(ws, entry, regex, limit + 1));
    if (queue.length >= SEARCH_CONCURRENCY && (await take())) {
      full = true;
      break;
    }
  }
  while (!full && queue.length > 0) full = await take();
  return { matches: matches.slice(0, limit), truncated: matches.length > limit };
}

async function* single(entry: WalkEntry): AsyncGenerator<WalkEntry> {
  yield entry;
}

async function searchFile(
  ws: Workspace,
  entry: WalkEntry,
  regex: RegExp,
  max: number,
): Promise<SearchMatch[]> {
  const found: SearchMatch[] = [];
  try {
    // Through the confined layer: a file over the cap, a FIFO or a secret is no result.
    const bytes = await ws.readFile(entry.read, { maxBytes: SEARCH_MAX_FILE_BYTES });
    if (looksBinary(bytes)) return found;
    const lines = bytes.toString("utf8").split("\n");
    for (let k = 0; k < lines.length && found.length < max; k++) {
      let line = lines[k] ?? "";
      if (line.endsWith("\r")) line = line.slice(0, -1);
      const match = regex.exec(line);
      if (match) found.push({ path: entry.rel, line: k + 1, text: clip(line, match.index, match[0].length) });
    }
  } catch {
    // A file that vanished or cannot be read is not a search result.
  }
  return found;
}

/** Cuts a long line to SEARCH_MAX_LINE_CHARS, keeping the match in view. */
function clip(line: string, index: number, length: number): string {
  if (line.length <= SEARCH_MAX_LINE_CHARS) return line;
  if (index + length <= SEARCH_MAX_LINE_CHARS) return `${line.slice(0, SEARCH_MAX_LINE_CHARS)}…`;
  const start = Math.max(0, Math.min(index - 100, line.length - SEARCH_MAX_LINE_CHARS));
  const end = start + SEARCH_MAX_LINE_CHARS;
  return `…${line.slice(start, end)}${end < line.length ? "…" : ""}`;
}

/** A shell-style glob: `*`, `?`, `**`, `[abc]`/`[!abc]`, `{a,b}`. Throws ToolError "invalid_argument". */
function globToRegExp(glob: string): { regex: RegExp; onPath: boolean } {
  let source = "";
  let braces = 0;
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] ?? "";
    if (c === "*") {
      if (glob[i + 1] === "*") {
        i++;
        if (glob[i + 1] === "/") {
          i++;
          source += "(?:.*/)?";
        } else {
          source += ".*";
        }
      } else {
        source += "[^/]*";
      }
    } else if (c === "?") {
      source += "[^/]";
    } else if (c === "[") {
      const close = glob.indexOf("]", i + 2);
      if (close === -1) {
        source += "\\[";
      } else {
        let body = glob.slice(i + 1, close).replace(/\\/g, "\\\\");
        if (body.startsWith("!")) body = `^${body.slice(1)}`;
        source += `[${body}]`;
        i = close;
      }
    } else if (c === "{") {
      braces++;
      source += "(?:";
    } else if (c === "}" && braces > 0) {
      braces--;
      source += ")";
    } else if (c === "," && braces > 0) {
      source += "|";
    } else {
      source += c.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");
    }
  }
  if (braces > 0)
    throw new ToolError("invalid_argument", `Invalid glob ${JSON.stringify(glob)}: unclosed "{".`);
  try {
    return { regex: new RegExp(`^${source}$`), onPath: glob.includes("/") };
  } catch (error) {
    throw new ToolError(
      "invalid_argument",
      `Invalid glob ${JSON.stringify(glob)}: ${(error as Error).message}.`,
    );
  }
}

interface WalkEntry {
  /** Where to read the file (a symlinked file's target), workspace-relative. */
  read: string;
  /** Workspace-relative posix path of the entry itself. */
  rel: string;
}

interface RuleSet {
  /** Workspace-relative posix directory the rules belong to ("" for the root). */
  dir: string;
  rules: Ignore;
}

const IGNORE_CASE = process.platform === "darwin" || process.platform === "win32";

async function loadRules(ws: Workspace, file: string, dir: string): Promise<RuleSet | undefined> {
  try {
    const text = (await ws.readFile(file, { maxBytes: 1024 * 1024 })).toString("utf8");
    return { dir, rules: ignore({ ignorecase: IGNORE_CASE }).add(text) };
  } catch {
    return undefined;
  }
}

/**
 * Whether a workspace-relative path (directories with a trailing "/") is ignored: like git, the
 * deepest .gitignore with a matching rule decides.
 */
function isIgnored(rel: string, ruleSets: readonly RuleSet[]): boolean {
  for (let k = ruleSets.length - 1; k >= 0; k--) {
    const set = ruleSets[k];
    if (!set) continue;
    const local = set.dir === "" ? rel : rel.slice(set.dir.length + 1);
    if (local === "" || local === "/") continue;
    const result = set.rules.test(local);
    if (result.ignored) return true;
    if (result.unignored) return false;
  }
  return false;
}

/**
 * Yields the files under `baseRel` (workspace-relative, "" for the root) in sorted order of their
 * relative paths. The .gitignore files of the directories above it apply too, unless it is itself
 * ignored: a directory asked for explicitly is walked with only its own (nested) rules.
 */
async function* walkFiles(ws: Workspace, baseRel: string): AsyncGenerator<WalkEntry> {
  let inherited: RuleSet[] = [];
  const exclude = await loadRules(ws, ".git/info/exclude", "");
  if (exclude) inherited.push(exclude);
  if (baseRel !== "") {
    const parts = baseRel.split("/");
    for (let depth = 0; depth < parts.length; depth++) {
      const dir = parts.slice(0, depth).join("/");
      const set = await loadRules(ws, dir === "" ? ".gitignore" : `${dir}/.gitignore`, dir);
      if (set) inherited.push(set);
    }
    if (isIgnored(`${baseRel}/`, inherited) || parts.includes(".git")) inherited = [];
  }
  yield* walkDir(ws, baseRel, inherited);
}

async function* walkDir(ws: Workspace, rel: string, inherited: RuleSet[]): AsyncGenerator<WalkEntry> {
  let entries;
  try {
    entries = await ws.readdir(rel === "" ? "." : rel);
  } catch {
    return;
  }
  let ruleSets = inherited;
  if (entries.some((e) => e.name === ".gitignore" && e.kind === "file")) {
    const own = await loadRules(ws, rel === "" ? ".gitignore" : `${rel}/.gitignore`, rel);
    if (own) ruleSets = [...inherited, own];
  }
  const keyed = entries
    .filter((e) => e.name !== ".git")
    .map((e) => ({ entry: e, key: e.kind === "directory" ? `${e.name}/` : e.name }))
    .sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  for (const { entry } of keyed) {
    const childRel = rel === "" ? entry.name : `${rel}/${entry.name}`;
    if (ws.isSecret(ws.absolute(childRel))) continue;
    if (entry.kind === "directory") {
      if (!isIgnored(`${childRel}/`, ruleSets)) yield* walkDir(ws, childRel, ruleSets);
    } else if (entry.kind === "file") {
      if (!isIgnored(childRel, ruleSets)) yield { read: childRel, rel: childRel };
    } else if (entry.kind === "symlink" && !isIgnored(childRel, ruleSets)) {
      const target = await symlinkedFile(ws, childRel);
      if (target !== undefined) yield { read: target, rel: childRel };
    }
  }
}

/** Where a symlink lands when it is a regular file inside the workspace (not a secret). */
async function symlinkedFile(ws: Workspace, link: string): Promise<string | undefined> {
  try {
    const where = await ws.locate(link);
    return where.kind === "file" ? where.rel : undefined;
  } catch {
    return undefined;
  }
}
