/**
 * A task's own record of the files its patches changed: each file's content before the task first
 * touched it and after its latest change. It gives the review its per-file diffs (whether or not
 * the workspace is a git repository, and only this task's changes when several tasks share one
 * workspace) and lets a revert put back exactly what was there.
 */
import { contentDiff } from "../agent/files/file-diff.js";
import { isGitWorkTree, neutralGit } from "../agent/sandbox/neutral-git.js";
import type { Workspace } from "../agent/files/workspace.js";
import type { FileDiff } from "../agent/thread-item.js";

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
      // Through the confined layer: a link left at the path is replaced, never written through,
      // and protected names are never written by a revert.
      if (change.before === null) await this.workspace.remove(p);
      else await this.workspace.writeFile(p, change.before);
      this.#files.delete(p);
      restored.push(p);
    }
    return restored;
  }

  /** Forgets the record of one path, or all (the changes are kept). */
  keep(path?: string): void {
    if (path === undefined) this.#files.clear();
    else this.#files.delete(path);
  }

  /**
   * A file's content now, or null when it is missing or not inside the workspace (a symlink that
   * points out is not followed there). Synchronous: `before` runs while the patch waits to write.
   */
  #read(path: string): string | null {
    const buffer = this.bytesNow(path, MAX_RECORDED_BYTES);
    if (buffer === "too_large") return `[more than ${MAX_RECORDED_BYTES} bytes, not recorded]`;
    return buffer === null ? null : buffer.toString("utf8");
  }

  /**
   * The bytes of `path` now through the confined layer (links resolved beneath the workspace, a
   * regular file only, never waited on); null when it is missing or cannot be read there.
   */
  bytesNow(path: string, cap: number): Buffer | null | "too_large" {
    try {
      return this.workspace.readFileSync(path, { maxBytes: cap, allowEnvFiles: true });
    } catch (error) {
      if ((error as { code?: unknown }).code === "too_large") return "too_large";
      return null;
    }
  }
}

/**
 * The review of a task's changes. In a git repository each file the task changed is shown against
 * its content in HEAD (what a commit would hold, the user's own uncommitted edits included); files
 * not in HEAD, binary or too large ones, or where nothing differs, come from the task's record. The
 * diff is computed here from HEAD's blob and the file as it is, never by `git diff`, so nothing the
 * repository's configuration names (fsmonitor, filters, textconv, diff drivers) can run.
 */
export async function reviewDiffs(
  root: string,
  record: ChangeRecord,
): Promise<{ files: FileDiff[]; source: "git" | "record" }> {
  const recorded = record.diffs();
  if (recorded.length === 0 || !(await isGitWorkTree(root))) return { files: recorded, source: "record" };
  const files: FileDiff[] = [];
  for (const diff of recorded) {
    files.push((await headDiff(root, record, diff.path)) ?? diff);
  }
  return { files, source: "git" };
}

/** `path` from HEAD to now, or undefined when HEAD does not have it or there is nothing to show. */
async function headDiff(root: string, record: ChangeRecord, path: string): Promise<FileDiff | undefined> {
  let head: Buffer;
  try {
    head = await neutralGit(root, ["cat-file", "blob", `HEAD:./${path}`], MAX_RECORDED_BYTES);
  } catch {
    return undefined; // not in HEAD (a new repository, an untracked file), or too large
  }
  const now = record.bytesNow(path, MAX_RECORDED_BYTES);
  if (now === "too_large") return undefined;
  if (head.includes(0) || (now !== null && now.includes(0))) return undefined;
  const before = head.toString("utf8");
  const after = now === null ? "" : now.toString("utf8");
  if (now !== null && before === after) return undefined;
  const diff = contentDiff(path, before, now === null ? null : after);
  return diff.lines.length === 0 ? undefined : diff;
}

/** The diff of one recorded change (see file-diff.ts: bounded in time, binary files noted). */
export function fileDiff(path: string, change: FileChange): FileDiff {
  return contentDiff(path, change.before, change.after);
}
