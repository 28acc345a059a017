/**
 * The Codex `apply_patch` tool: parses the patch format (Add / Update / Delete File, `*** Move to:`,
 * `@@` hunks, `*** End of File`) and applies it to a workspace all-or-nothing.
 *
 * Contract:
 * - Every path goes through the confined file layer (fs/confined.ts): resolved beneath the workspace
 *   root before anything is read or written, read as regular files only, written by a rename that
 *   replaces (never follows) whatever entry is at the landing path.
 * - Every new file content is computed in memory first; the disk is only touched once every operation
 *   succeeded. Writes are atomic per file (deletes come last); when a write fails midway, the files
 *   already written are restored from their in-memory originals (best effort) and the error rethrown.
 *   A patch that fails to parse or apply leaves the disk exactly as it was.
 * - Hunks are located in order, each searched from the end of the previous one, with increasing
 *   tolerance (exact, trailing whitespace, surrounding whitespace, unicode punctuation), like Codex.
 *   Context lines keep the file's own text; only removed and added lines change. The file's line
 *   endings (CRLF stays CRLF) and its trailing newline (or lack of one) are preserved.
 * - Operations in one patch see each other's effects (Add then Update of the same file works).
 * - Paths resolve through symlinks inside the workspace: updating or deleting a symlink changes or
 *   removes its target. `*** Move to:` refuses to overwrite an existing file.
 * - A patch that would write, move or delete a protected path (`.git`, agent and editor settings:
 *   see protected-paths.ts), checked on the resolved path, fails with ToolError "protected_path"
 *   unless `allowProtected` says the user approved it (`protectedWrites` tells which ones a patch
 *   touches, so the caller can ask first).
 */
import path from "node:path";
import { ToolError, type Workspace } from "./workspace.js";

export interface HunkLine {
  /** " " context, "-" removed, "+" added. */
  op: " " | "-" | "+";
  text: string;
}

export interface PatchHunk {
  /** The text after `@@ `: a line that must be found before the hunk, which is searched after it. */
  header?: string;
  lines: HunkLine[];
  /** `*** End of File` followed the hunk: its old lines are anchored at the end of the file. */
  endOfFile: boolean;
  /** 1-based line of the hunk's first line in the patch text. */
  line: number;
}

export type PatchOperation =
  | { kind: "add"; path: string; contents: string; line: number }
  | { kind: "delete"; path: string; line: number }
  | { kind: "update"; path: string; moveTo?: string; hunks: PatchHunk[]; line: number };

export interface PatchChange {
  /** Workspace-relative posix path. */
  path: string;
  kind: "add" | "update" | "delete";
  /** Workspace-relative destination of a `*** Move to:`. */
  movedTo?: string;
}

/** One file a patch changes: its content before and after (`null`: absent), for a diff. */
export interface PatchFile {
  /** Workspace-relative posix path. */
  path: string;
  before: Buffer | null;
  after: string | Buffer | null;
}

export interface PatchResult {
  changes: PatchChange[];
  /** The files that change, in first-touch order (a move is its source, gone, and its destination). */
  files: PatchFile[];
  /** Codex-style: "Success. Updated the following files:\nA new.txt\nM src/app.ts\nD old.txt". */
  summary: string;
}

/**
 * The disk operations of the write phase, on workspace-relative landing paths; replaceable so that
 * tests can make one fail midway.
 */
export interface PatchIO {
  writeFile(rel: string, content: string | Uint8Array): Promise<void>;
  deleteFile(rel: string): Promise<void>;
}

export interface ApplyPatchOptions {
  io?: Partial<PatchIO>;
  /** The user approved writing protected paths (see protected-paths.ts); default false. */
  allowProtected?: boolean;
}

const BEGIN = "*** Begin Patch";
const END = "*** End Patch";
const END_OF_FILE = "*** End of File";
const FILE_HEADER = /^\*\*\* (Add File|Delete File|Update File):(.*)$/;
const MOVE_TO = /^\*\*\* Move to:(.*)$/;
const HEREDOC_OPEN = /^(?:apply_patch\s+)?<<-?\s*(['"]?)([A-Za-z_][\w-]*)\1\s*$/;
const UNIFIED_HUNK = /^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@(.*)$/;

function invalid(lineNo: number, message: string): ToolError {
  return new ToolError("patch_invalid", `apply_patch: invalid patch: line ${lineNo}: ${message}`);
}

function show(line: string): string {
  return JSON.stringify(line.length > 80 ? `${line.slice(0, 80)}…` : line);
}

/**
 * Parses a patch. Tolerates surrounding whitespace, a heredoc wrapper (`<<'EOF'` … `EOF`, also
 * `apply_patch <<"EOF"`), CRLF, and blank hunk lines that lost their leading space. Throws ToolError
 * "patch_invalid" naming the (1-based) line and what was expected there.
 */
export function parsePatch(text: string): PatchOperation[] {
  const lines = text.replace(/\r\n/g, "\n").split("\n");
  const at = (i: number): string => lines[i] ?? "";
  let start = 0;
  let end = lines.length - 1;
  const skipBlank = (): void => {
    while (start <= end && at(start).trim() === "") start++;
    while (end >= start && at(end).trim() === "") end--;
  };
  skipBlank();
  if (start > end) throw invalid(1, `expected "${BEGIN}", got an empty patch`);

  const heredoc = HEREDOC_OPEN.exec(at(start).trim());
  if (heredoc) {
    start++;
    if (end >= start && at(end).trim() === heredoc[2]) end--;
    skipBlank();
    if (start > end) throw invalid(start + 1, `expected "${BEGIN}" after the heredoc line`);
  }
  if (at(start).trim() !== BEGIN) {
    throw invalid(start + 1, `expected "${BEGIN}", got ${show(at(start))}`);
  }
  if (end === start || at(end).trim() !== END) {
    throw invalid(end + 1, `expected the patch to end with "${END}", got ${show(at(end))}`);
  }

  const ops: PatchOperation[] = [];
  let i = start + 1;
  const isBoundary = (line: string): boolean => line.startsWith("*** ") && line.trimEnd() !== END_OF_FILE;

  while (i < end) {
    const headerLine = at(i).trim();
    if (headerLine === "") {
      i++;
      continue;
    }
    const header = FILE_HEADER.exec(headerLine);
    if (!header) {
      throw invalid(
        i + 1,
        `expected "*** Add File: PATH", "*** Update File: PATH", "*** Delete File: PATH" or "${END}", got ${show(at(i))}`,
      );
    }
    const opLine = i + 1;
    const filePath = (header[2] ?? "").trim();
    if (filePath === "") throw invalid(opLine, `missing path after "*** ${header[1]}:"`);
    i++;

    if (header[1] === "Delete File") {
      ops.push({ kind: "delete", path: filePath, line: opLine });
      continue;
    }

    if (header[1] === "Add File") {
      const content: string[] = [];
      let blanks = 0;
      for (; i < end && !isBoundary(at(i)); i++) {
        const line = at(i);
        if (line.startsWith("+")) {
          for (; blanks > 0; blanks--) content.push("");
          content.push(line.slice(1));
        } else if (line.trim() === "") {
          blanks++;
        } else {
          throw invalid(
            i + 1,
            `expected a line starting with "+" (content of the new file ${filePath}), got ${show(line)}`,
          );
        }
      }
      ops.push({
        kind: "add",
        path: filePath,
        contents: content.map((l) => `${l}\n`).join(""),
        line: opLine,
      });
      continue;
    }

    let moveTo: string | undefined;
    const move = MOVE_TO.exec(at(i).trim());
    if (move) {
      moveTo = (move[1] ?? "").trim();
      if (moveTo === "") throw invalid(i + 1, `missing path after "*** Move to:"`);
      i++;
    }
    const hunks: PatchHunk[] = [];
    let hunk: PatchHunk | undefined;
    // Indexes of the current hunk's context lines that were bare empty lines in the patch.
    const bare = new Set<number>();
    const close = (): void => {
      if (!hunk) return;
      // A bare empty line at the end of a hunk is usually the blank line before the next operation.
      const last = hunk.lines.length - 1;
      let keep = last;
      while (keep >= 0 && hunk.lines[keep]?.op === " " && hunk.lines[keep]?.text === "" && bare.has(keep))
        keep--;
      if (keep < last) hunk.lines.splice(keep + 1);
      if (hunk.lines.length === 0) throw invalid(hunk.line, `the hunk has no lines`);
      hunks.push(hunk);
      hunk = undefined;
    };
    for (; i < end && !isBoundary(at(i)); i++) {
      const line = at(i);
      if (line.startsWith("@@")) {
        close();
        bare.clear();
        const unified = UNIFIED_HUNK.exec(line.trimEnd());
        const rest = (unified ? (unified[1] ?? "") : line.slice(2)).trim();
        hunk = { lines: [], endOfFile: false, line: i + 1 };
        if (rest !== "") hunk.header = rest;
        continue;
      }
      if (line.trimEnd() === END_OF_FILE) {
        if (!hunk || hunk.lines.length === 0)
          throw invalid(i + 1, `"${END_OF_FILE}" must follow a hunk's lines`);
        hunk.endOfFile = true;
        close();
        continue;
      }
      if (!hunk) {
        if (line.trim() === "") continue;
        // Codex accepts the first hunk without an "@@" line.
        if (hunks.length > 0) throw invalid(i + 1, `expected "@@" to start the next hunk, got ${show(line)}`);
        hunk = { lines: [], endOfFile: false, line: i + 1 };
        bare.clear();
      }
      const first = line[0];
      if (first === " " || first === "-" || first === "+") {
        hunk.lines.push({ op: first, text: line.slice(1) });
      } else if (line.trim() === "") {
        bare.add(hunk.lines.length);
        hunk.lines.push({ op: " ", text: "" });
      } else {
        throw invalid(
          i + 1,
          `expected a hunk line starting with " " (context), "-" (removed), "+" (added) or "@@", got ${show(line)}`,
        );
      }
    }
    close();
    if (hunks.length === 0 && moveTo === undefined) {
      throw invalid(opLine, `"*** Update File: ${filePath}" has no hunks`);
    }
    ops.push(
      moveTo === undefined
        ? { kind: "update", path: filePath, hunks, line: opLine }
        : { kind: "update", path: filePath, moveTo, hunks, line: opLine },
    );
  }
  if (ops.length === 0) throw invalid(end + 1, `the patch has no operations`);
  return ops;
}

const PUNCTUATION: Record<string, string> = {
  "\u2018": "'",
  "\u2019": "'",
  "\u201A": "'",
  "\u201B": "'",
  "\u2032": "'",
  "\u201C": '"',
  "\u201D": '"',
  "\u201E": '"',
  "\u201F": '"',
  "\u2033": '"',
  "\u00AB": '"',
  "\u00BB": '"',
  "\u2010": "-",
  "\u2011": "-",
  "\u2012": "-",
  "\u2013": "-",
  "\u2014": "-",
  "\u2015": "-",
  "\u2212": "-",
  "\u2026": "...",
  "\u00A0": " ",
  "\u2002": " ",
  "\u2003": " ",
  "\u2009": " ",
  "\u202F": " ",
};
const PUNCTUATION_RE = new RegExp(`[${Object.keys(PUNCTUATION).join("")}]`, "g");

/** The comparison levels, most exact first. */
const LEVELS: ((s: string) => string)[] = [
  (s) => s,
  (s) => s.trimEnd(),
  (s) => s.trim(),
  (s) => s.replace(PUNCTUATION_RE, (c) => PUNCTUATION[c] ?? c).trim(),
];

/** A file's lines with lazily normalised copies per level. */
class LineIndex {
  private readonly cache: (string[] | undefined)[] = [];
  constructor(readonly lines: readonly string[]) {}

  private level(n: number): readonly string[] {
    const normalise = LEVELS[n] ?? LEVELS[0]!;
    return (this.cache[n] ??= this.lines.map(normalise));
  }

  /** First index >= start where `pattern` matches, at the first level that matches anywhere; -1 if none. */
  seek(pattern: readonly string[], start: number, endOfFile: boolean): number {
    if (pattern.length === 0) return start;
    const last = this.lines.length - pattern.length;
    if (last < start) return -1;
    for (let n = 0; n < LEVELS.length; n++) {
      const normalise = LEVELS[n] ?? LEVELS[0]!;
      const wanted = pattern.map(normalise);
      const lines = this.level(n);
      const matchesAt = (pos: number): boolean => wanted.every((w, k) => lines[pos + k] === w);
      if (endOfFile) {
        if (matchesAt(last)) return last;
        continue;
      }
      for (let pos = start; pos <= last; pos++) if (matchesAt(pos)) return pos;
    }
    return -1;
  }
}

interface FileText {
  lines: string[];
  /** The original ending of each line: "\n", "\r\n", or "" for a last line without one. */
  endings: string[];
  eol: "\n" | "\r\n";
  trailingNewline: boolean;
}

function splitText(content: string): FileText {
  if (content === "") return { lines: [], endings: [], eol: "\n", trailingNewline: true };
  const parts = content.split("\n");
  const trailingNewline = parts[parts.length - 1] === "";
  if (trailingNewline) parts.pop();
  const lines: string[] = [];
  const endings: string[] = [];
  let crlf = 0;
  parts.forEach((part, k) => {
    const terminated = k < parts.length - 1 || trailingNewline;
    if (terminated && part.endsWith("\r")) {
      crlf++;
      lines.push(part.slice(0, -1));
      endings.push("\r\n");
    } else {
      lines.push(part);
      endings.push(terminated ? "\n" : "");
    }
  });
  const lf = lines.length - crlf - (trailingNewline ? 0 : 1);
  return { lines, endings, eol: crlf > lf ? "\r\n" : "\n", trailingNewline };
}

interface OutLine {
  text: string;
  ending: string;
}

function joinText(out: OutLine[], file: FileText): string {
  return out
    .map((line, k) => {
      const isLast = k === out.length - 1;
      if (isLast && !file.trailingNewline) return line.text;
      return line.text + (line.ending === "" ? file.eol : line.ending);
    })
    .join("");
}

function conflict(display: string, hunkNo: number, what: string, lines: readonly string[]): ToolError {
  const shown = lines.slice(0, 6).map((l) => `  ${l}`);
  if (lines.length > 6) shown.push(`  … (${lines.length - 6} more lines)`);
  return new ToolError(
    "patch_conflict",
    `apply_patch: hunk ${hunkNo} of ${display} does not apply: ${what}\n${shown.join("\n")}\nNo file was changed.`,
  );
}

/** Applies the hunks of an Update to `content`; throws ToolError "patch_conflict" when one does not apply. */
function applyHunks(content: string, hunks: readonly PatchHunk[], display: string): string {
  const file = splitText(content);
  const index = new LineIndex(file.lines);
  const out: OutLine[] = [];
  let cursor = 0;
  const copyUntil = (pos: number): void => {
    for (; cursor < pos; cursor++)
      out.push({ text: file.lines[cursor] ?? "", ending: file.endings[cursor] ?? "" });
  };

  hunks.forEach((hunk, k) => {
    const hunkNo = k + 1;
    let from = cursor;
    if (hunk.header !== undefined) {
      const found = index.seek([hunk.header], from, false);
      if (found < 0) throw conflict(display, hunkNo, "could not find its @@ line", [hunk.header]);
      from = found + 1;
    }
    let ops = hunk.lines;
    let old = ops.filter((l) => l.op !== "+").map((l) => l.text);
    let pos: number;
    if (old.length === 0) {
      pos = hunk.header !== undefined ? from : file.lines.length;
    } else {
      pos = hunk.endOfFile ? index.seek(old, from, true) : -1;
      if (pos < 0) pos = index.seek(old, from, false);
      // A trailing blank context line often stands for the end of the file, which has no line.
      while (
        pos < 0 &&
        ops.length > 0 &&
        ops[ops.length - 1]?.op === " " &&
        ops[ops.length - 1]?.text === ""
      ) {
        ops = ops.slice(0, -1);
        old = old.slice(0, -1);
        if (old.length === 0) break;
        pos = hunk.endOfFile ? index.seek(old, from, true) : -1;
        if (pos < 0) pos = index.seek(old, from, false);
      }
      if (pos < 0)
        throw conflict(
          display,
          hunkNo,
          "expected to find",
          hunk.lines.filter((l) => l.op !== "+").map((l) => l.text),
        );
    }
    copyUntil(pos);
    for (const line of ops) {
      if (line.op === "+") {
        out.push({ text: line.text, ending: "" });
      } else {
        if (line.op === " ") out.push({ text: file.lines[cursor] ?? "", ending: file.endings[cursor] ?? "" });
        cursor++;
      }
    }
  });
  copyUntil(file.lines.length);
  return joinText(out, file);
}

type Content = string | Buffer | null;

/**
 * Applies a patch to the workspace, all or nothing (see the module comment). Throws ToolError
 * "patch_invalid", "patch_conflict", "file_exists", "not_found", "not_a_file", "not_a_directory"
 * or "outside_workspace";
 * on a failure no file is left changed.
 */
export async function applyPatch(
  workspace: Workspace,
  text: string,
  options: ApplyPatchOptions = {},
): Promise<PatchResult> {
  const allowProtected = options.allowProtected === true;
  const plan = await planPatch(workspace, text, allowProtected);
  const io: PatchIO = {
    writeFile:
      options.io?.writeFile ??
      (async (rel, content) => {
        await workspace.writeFile(rel, content, { allowProtected });
      }),
    deleteFile:
      options.io?.deleteFile ??
      (async (rel) => {
        await workspace.remove(rel, { allowProtected });
      }),
  };
  await commit(workspace, plan.planned, plan.originals, io, allowProtected);
  return { changes: plan.changes, files: plan.files, summary: summarize(plan.changes) };
}

/**
 * What `applyPatch` would change, without writing anything: the same parsing, path checks and
 * hunk matching (so it throws the same errors), protected paths allowed (the caller asks about
 * those). For an approval that shows the patch's diff before the user answers.
 */
export async function previewPatch(
  workspace: Workspace,
  text: string,
): Promise<{ changes: PatchChange[]; files: PatchFile[] }> {
  const plan = await planPatch(workspace, text, true);
  return { changes: plan.changes, files: plan.files };
}

interface PatchPlan {
  changes: PatchChange[];
  files: PatchFile[];
  planned: Map<string, Content>;
  originals: Map<string, Buffer | null>;
}

/** Every new content of a patch, computed in memory; the disk is only read. */
async function planPatch(workspace: Workspace, text: string, allowProtected: boolean): Promise<PatchPlan> {
  const ops = parsePatch(text);

  // Landing path (workspace-relative) → planned content (null: absent); originals: the bytes there
  // before the patch (null: absent).
  const planned = new Map<string, Content>();
  const originals = new Map<string, Buffer | null>();
  const load = async (rel: string, display: string): Promise<Content> => {
    if (planned.has(rel)) return planned.get(rel) ?? null;
    const info = await workspace.stat(rel, { final: "entry" });
    let bytes: Buffer | null = null;
    if (info?.isDirectory()) {
      throw new ToolError(
        "not_a_file",
        `apply_patch: ${display} is a directory, not a file. No file was changed.`,
      );
    }
    if (info !== undefined) bytes = await workspace.readFile(rel, { final: "entry" });
    originals.set(rel, bytes);
    planned.set(rel, bytes);
    return bytes;
  };

  const resolveWrite = async (p: string): Promise<string> => {
    const where = await workspace.locate(p);
    if (where.protectedPart !== undefined && !allowProtected) {
      throw new ToolError(
        "protected_path",
        `apply_patch: ${p} is in ${where.protectedPart}, a protected path (its contents run outside the sandbox ` +
          "later), and the user has not approved changing it. No file was changed.",
      );
    }
    return where.rel;
  };

  const changes: PatchChange[] = [];
  for (const op of ops) {
    const abs = await resolveWrite(op.path);
    const display = abs;
    const current = await load(abs, display);
    if (op.kind === "add") {
      if (current !== null) {
        throw new ToolError(
          "file_exists",
          `apply_patch: cannot add ${display}: it already exists. No file was changed.`,
        );
      }
      await assertParentIsDirectory(workspace, abs);
      planned.set(abs, op.contents);
      changes.push({ path: display, kind: "add" });
      continue;
    }
    if (current === null) {
      const verb = op.kind === "delete" ? "delete" : "update";
      throw new ToolError(
        "not_found",
        `apply_patch: cannot ${verb} ${display}: it does not exist. No file was changed.`,
      );
    }
    if (op.kind === "delete") {
      planned.set(abs, null);
      changes.push({ path: display, kind: "delete" });
      continue;
    }
    const next =
      op.hunks.length === 0
        ? current
        : applyHunks(typeof current === "string" ? current : current.toString("utf8"), op.hunks, display);
    if (op.moveTo === undefined) {
      planned.set(abs, next);
      changes.push({ path: display, kind: "update" });
      continue;
    }
    const dest = await resolveWrite(op.moveTo);
    const destDisplay = dest;
    if (dest !== abs) {
      if ((await load(dest, destDisplay)) !== null) {
        throw new ToolError(
          "file_exists",
          `apply_patch: cannot move ${display} to ${destDisplay}: it already exists. No file was changed.`,
        );
      }
      await assertParentIsDirectory(workspace, dest);
      planned.set(abs, null);
    }
    planned.set(dest, next);
    changes.push({ path: display, kind: "update", movedTo: destDisplay });
  }

  const files = [...planned]
    .filter(([abs, next]) => !sameBytes(next, originals.get(abs) ?? null))
    .map(([rel, after]) => ({ path: rel, before: originals.get(rel) ?? null, after }));
  return { changes, files, planned, originals };
}

/**
 * The protected paths (workspace-relative, e.g. ".git") that `text` would write, move or delete,
 * after resolving symlinks; empty for a patch that does not parse or touches none of them (applying
 * it reports its errors). Paths outside the workspace are left to `applyPatch` to refuse.
 */
export async function protectedWrites(workspace: Workspace, text: string): Promise<string[]> {
  let ops: PatchOperation[];
  try {
    ops = parsePatch(text);
  } catch {
    return [];
  }
  const found = new Set<string>();
  for (const op of ops) {
    for (const p of op.kind === "update" && op.moveTo !== undefined ? [op.path, op.moveTo] : [op.path]) {
      try {
        const part = (await workspace.locate(p)).protectedPart;
        if (part !== undefined) found.add(part);
      } catch {
        // Refused by applyPatch itself.
      }
    }
  }
  return [...found];
}

/** Refuses a new file whose nearest existing ancestor is a file rather than a directory. */
async function assertParentIsDirectory(workspace: Workspace, rel: string): Promise<void> {
  for (let dir = path.posix.dirname(rel); dir !== "." && dir !== ""; dir = path.posix.dirname(dir)) {
    const info = await workspace.stat(dir);
    if (info === undefined) continue;
    if (info.isDirectory()) return;
    throw new ToolError(
      "not_a_directory",
      `apply_patch: cannot create ${rel}: ${dir} is a file, not a directory. No file was changed.`,
    );
  }
}

function sameBytes(a: Content, b: Buffer | null): boolean {
  if (a === null || b === null) return a === b;
  return (typeof a === "string" ? Buffer.from(a, "utf8") : a).equals(b);
}

/** The first missing directory on the way to `rel` (what writing it creates), or undefined. */
async function firstMissingDir(workspace: Workspace, rel: string): Promise<string | undefined> {
  let missing: string | undefined;
  for (let dir = path.posix.dirname(rel); dir !== "." && dir !== ""; dir = path.posix.dirname(dir)) {
    if ((await workspace.stat(dir)) !== undefined) break;
    missing = dir;
  }
  return missing;
}

/** Writes (in first-touch order) then deletes; on failure restores what was done and rethrows. */
async function commit(
  workspace: Workspace,
  planned: Map<string, Content>,
  originals: Map<string, Buffer | null>,
  io: PatchIO,
  allowProtected: boolean,
): Promise<void> {
  const steps = [...planned].filter(([rel, next]) => !sameBytes(next, originals.get(rel) ?? null));
  const ordered = [
    ...steps.filter(([, next]) => next !== null),
    ...steps.filter(([, next]) => next === null),
  ];
  const done: { rel: string; createdDir: string | undefined }[] = [];
  try {
    for (const [rel, next] of ordered) {
      if (next === null) {
        await io.deleteFile(rel);
        done.push({ rel, createdDir: undefined });
      } else {
        const createdDir = await firstMissingDir(workspace, rel);
        done.push({ rel, createdDir });
        await io.writeFile(rel, next);
      }
    }
  } catch (error) {
    for (const { rel, createdDir } of done.reverse()) {
      const original = originals.get(rel) ?? null;
      try {
        if (original === null) await workspace.remove(rel, { allowProtected });
        else await workspace.writeFile(rel, original, { allowProtected });
      } catch {
        // Best effort: keep restoring the others.
      }
      if (createdDir !== undefined)
        await removeEmptyDirs(workspace, path.posix.dirname(rel), createdDir, allowProtected);
    }
    throw error;
  }
}

/** Removes `dir` and its parents up to and including `top` while they are empty. */
async function removeEmptyDirs(
  workspace: Workspace,
  dir: string,
  top: string,
  allowProtected: boolean,
): Promise<void> {
  for (let current = dir; current !== "." && current !== ""; current = path.posix.dirname(current)) {
    try {
      await workspace.remove(current, { allowProtected });
    } catch {
      return;
    }
    if (current === top) return;
  }
}

function summarize(changes: readonly PatchChange[]): string {
  const lines = [
    ...changes.filter((c) => c.kind === "add").map((c) => `A ${c.path}`),
    ...changes.filter((c) => c.kind === "update").map((c) => `M ${c.movedTo ?? c.path}`),
    ...changes.filter((c) => c.kind === "delete").map((c) => `D ${c.path}`),
  ];
  return `Success. Updated the following files:\n${lines.join("\n")}`;
}
