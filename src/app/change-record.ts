/**
 * A task's own record of the files its patches changed: each file's content before the task first
 * touched it and after its latest change. It gives the review its per-file diffs (whether or not
 * the workspace is a git repository, and only this task's changes when several tasks share one
 * workspace) and lets a revert put back exactly what was there.
 */
import { readFileSync, realpathSync } from "node:fs";
import { rm } from "node:fs/promises";
import { isAbsolute, relative, resolve } from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { parsePatch, structuredPatch, type StructuredPatchHunk } from "diff";
import { writeFileAtomic, type Workspace } from "../agent/workspace.js";
import type { DiffLine, FileDiff } from "./protocol.js";

/** Content of a file, `null` when it did not exist. */
export interface FileChange {
  before: string | null;
  after: string | null;
}

/** Files larger than this are recorded as changed but not diffed or restored. */
const MAX_RECORDED_BYTES = 2 * 1024 * 1024;

export class ChangeRecord {
  readonly #files = new Map<string, FileChange>();

  constructor(
    private readonly workspace: Workspace,
    saved: Record<string, FileChange> = {},
  ) {
    for (const [path, change] of Object.entries(saved)) this.#files.set(path, change);
  }

  get paths(): string[] {
    return [...this.#files.keys()].filter((path) => {
      const change = this.#files.get(path)!;
      return change.before !== change.after;
    });
  }

  toJSON(): Record<string, FileChange> {
    return Object.fromEntries(this.#files);
  }

  /**
   * Before a patch runs: keeps the current content of paths this task has not touched yet.
   * Synchronous, because the patch starts writing as soon as the agent's event returns.
   */
  before(paths: readonly string[]): void {
    for (const path of paths) {
      if (this.#files.has(path)) continue;
      const content = this.#read(path);
      this.#files.set(path, { before: content, after: content });
    }
  }

  /** After a patch ran (or failed): the content now. */
  after(paths: readonly string[]): void {
    for (const path of paths) {
      const change = this.#files.get(path) ?? { before: null, after: null };
      change.after = this.#read(path);
      this.#files.set(path, change);
    }
  }

  diffs(): FileDiff[] {
    return this.paths.map((path) => fileDiff(path, this.#files.get(path)!));
  }

  diffsOf(paths: readonly string[]): FileDiff[] {
    return paths
      .filter((path) => this.#files.has(path))
      .map((path) => fileDiff(path, this.#files.get(path)!));
  }

  /** Puts back what was there before the task (one path, or all); returns the paths restored. */
  async revert(path?: string): Promise<string[]> {
    const paths = path === undefined ? this.paths : [path];
    const restored: string[] = [];
    for (const p of paths) {
      const change = this.#files.get(p);
      if (!change) continue;
      const target = await this.workspace.resolve(p, "write");
      if (change.before === null) await rm(target, { force: true });
      else await writeFileAtomic(target, change.before);
      this.#files.delete(p);
      restored.push(p);
    }
    return restored;
  }

  /** Forgets the record (the changes are kept). */
  keep(): void {
    this.#files.clear();
  }

  /**
   * A file's content now, or null when it is missing or not inside the workspace (a symlink that
   * points out is not followed there). Synchronous: `before` runs while the patch waits to write.
   */
  #read(path: string): string | null {
    let abs: string;
    try {
      abs = realpathSync(resolve(this.workspace.root, path));
    } catch {
      return null;
    }
    const inside = relative(this.workspace.root, abs);
    if (inside.startsWith("..") || isAbsolute(inside)) return null;
    try {
      const buffer = readFileSync(abs);
      return buffer.length > MAX_RECORDED_BYTES
        ? `[${buffer.length} bytes, not recorded]`
        : buffer.toString("utf8");
    } catch {
      return null;
    }
  }
}

const run = promisify(execFile);

/**
 * The review of a task's changes. In a git repository each file the task changed is shown as git
 * sees it against HEAD (what a commit would hold, the user's own uncommitted edits included);
 * files git does not track, or where git shows nothing, come from the task's record.
 */
export async function reviewDiffs(
  root: string,
  record: ChangeRecord,
): Promise<{ files: FileDiff[]; source: "git" | "record" }> {
  const recorded = record.diffs();
  if (recorded.length === 0 || !(await isGitWorkTree(root))) return { files: recorded, source: "record" };
  const files: FileDiff[] = [];
  for (const diff of recorded) {
    let text = "";
    try {
      text = (await run("git", ["-C", root, "diff", "--no-color", "--no-ext-diff", "HEAD", "--", diff.path]))
        .stdout;
    } catch {
      // not in HEAD (a new repository, an untracked file): the record's diff stands
    }
    const parsed = text.trim() === "" ? undefined : parsePatch(text)[0];
    files.push(
      parsed && parsed.hunks.length > 0 ? { ...toFileDiff(diff.path, diff.kind, parsed.hunks) } : diff,
    );
  }
  return { files, source: "git" };
}

async function isGitWorkTree(root: string): Promise<boolean> {
  try {
    const { stdout } = await run("git", ["-C", root, "rev-parse", "--is-inside-work-tree"]);
    return stdout.trim() === "true";
  } catch {
    return false;
  }
}

export function fileDiff(path: string, change: FileChange): FileDiff {
  const patch = structuredPatch(path, path, change.before ?? "", change.after ?? "", "", "", { context: 3 });
  const kind = change.before === null ? "add" : change.after === null ? "delete" : "update";
  return toFileDiff(path, kind, patch.hunks);
}

function toFileDiff(path: string, kind: FileDiff["kind"], hunks: readonly StructuredPatchHunk[]): FileDiff {
  const lines: DiffLine[] = [];
  let added = 0;
  let removed = 0;
  for (const hunk of hunks) {
    lines.push({
      kind: "hunk",
      text: `@@ -${hunk.oldStart},${hunk.oldLines} +${hunk.newStart},${hunk.newLines} @@`,
    });
    for (const line of hunk.lines) {
      if (line.startsWith("\\")) continue; // "\ No newline at end of file"
      const kind = line[0] === "+" ? "add" : line[0] === "-" ? "del" : "context";
      if (kind === "add") added++;
      if (kind === "del") removed++;
      lines.push({ kind, text: line.slice(1) });
    }
  }
  return { path, kind, lines, added, removed };
}
