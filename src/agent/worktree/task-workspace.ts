/**
 * Where one task (or variant) works, so that parallel tasks never write the same files: in a git
 * repository a worktree of its own on the branch `spark/<id>`, started from HEAD plus the user's
 * uncommitted changes (untracked files that are not ignored included); outside git a copy of the
 * workspace (honouring `.gitignore`) with a snapshot of the base kept beside it; or the workspace
 * itself ("in-place") when the user asks for it. Nothing lands in the user's workspace until
 * `applyTaskWorkspace`, a 3-way merge that writes nothing when any file conflicts.
 *
 * Spark's worktrees and copies live under `<sparkHome()>/worktrees/<basename(root)>-<8 hex>/<id>`,
 * one folder per workspace root; `pruneTaskWorkspaces` removes the ones no task keeps and never
 * anything outside that folder (a user's own worktrees and branches are not Spark's).
 *
 * Every git command goes through `neutralGit`. Changes are found with `diff-files` without an index
 * refresh (stat data; only racily clean entries are read back) and compared byte for byte here. Where
 * git reads or writes the work tree (the base snapshot's `git add -A` into a temporary index, the
 * checkout of a new worktree, a racily clean entry) it runs with the repository's own configuration,
 * filters included, as the user's own git would: that configuration is the user's (a sandboxed
 * command cannot write `.git`, read-only to it), and everything that could start a program without
 * being named by it (hooks, fsmonitor, pager) is neutralised.
 */
import { createHash, randomBytes } from "node:crypto";
import {
  copyFile,
  lstat,
  mkdir,
  readdir,
  readFile,
  readlink,
  realpath,
  rm,
  stat,
  symlink,
} from "node:fs/promises";
import { basename, dirname, join, relative, sep } from "node:path";
import { structuredPatch } from "diff";
import ignore, { type Ignore } from "ignore";
import { sparkHome } from "../context/spark-home.js";
import { neutralGit } from "../neutral-git.js";
import { protectedPart } from "../protected-paths.js";
import { writeFileAtomic } from "../fs/spark-data.js";
import { ToolError, Workspace } from "../workspace.js";

export type TaskWorkspaceKind = "worktree" | "copy" | "in-place";

/** Where one task (or variant) works; JSON-serialisable so the app can save it with the task. */
export interface TaskWorkspace {
  /** Task or variant id; the branch is spark/<id>. */
  id: string;
  kind: TaskWorkspaceKind;
  /** The user's workspace: where Apply lands (a real path). */
  root: string;
  /** Where the task works (=== root for in-place). */
  path: string;
  /** "spark/<id>" for kind "worktree". */
  branch?: string;
  /** The commit (git) or snapshot directory (copy) the task started from; "" in place. */
  base: string;
}

export interface TaskFileChange {
  /** Relative to root, forward slashes. */
  path: string;
  status: "added" | "modified" | "deleted";
  /** Content at base (null: absent). */
  before: string | null;
  /** Content in the task's workspace now (null: deleted). */
  after: string | null;
  added: number;
  removed: number;
  /** Unified diff (a/path b/path); "Binary files differ" for binary content. */
  patch: string;
}

export interface ApplyResult {
  applied: string[];
  conflicts: { path: string; reason: string }[];
}

/** Ids become branch names and directory names: kept to a plain, safe alphabet. */
const ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$/;
/** Outside git a task copies the workspace twice (its copy and the base): past these, it refuses. */
const MAX_COPY_FILES = 50_000;
const MAX_COPY_BYTES = 2 * 2 ** 30;
/** Beside a copy `<id>`, its base snapshot. */
const BASE_SUFFIX = ".base";
/** Git's output is read whole; a workspace's file list fits in this. */
const GIT_BUFFER = 256 * 1024 * 1024;
/** Author and committer of base commits (no identity need be configured). */
const SPARK_IDENTITY = {
  GIT_AUTHOR_NAME: "Spark",
  GIT_AUTHOR_EMAIL: "spark@localhost",
  GIT_COMMITTER_NAME: "Spark",
  GIT_COMMITTER_EMAIL: "spark@localhost",
};

function checkId(id: string): void {
  if (typeof id !== "string" || !ID.test(id)) {
    throw new ToolError(
      "invalid_argument",
      `Invalid task workspace id ${JSON.stringify(id)}: expected letters, digits, '-' or '_' (at most 80).`,
    );
  }
}

/** The folder of Spark's task workspaces for `root` (a real path). */
export function taskWorkspacesFolder(root: string): string {
  const hash = createHash("sha1").update(root).digest("hex").slice(0, 8);
  return join(sparkHome(), "worktrees", `${basename(root) || "root"}-${hash}`);
}

const toPosix = (p: string): string => (sep === "/" ? p : p.split(sep).join("/"));

function isInside(parent: string, child: string): boolean {
  const rel = relative(parent, child);
  return rel !== "" && !rel.startsWith("..") && !rel.startsWith(sep) && rel !== "..";
}

async function exists(p: string): Promise<boolean> {
  try {
    await lstat(p);
    return true;
  } catch {
    return false;
  }
}

/** What git says about `root`: undefined when it is not in a work tree. */
interface GitInfo {
  /** The top of the work tree `root` is in. */
  top: string;
  /** `root` relative to `top`, with a trailing slash ("" at the top). */
  prefix: string;
  /** The work tree's own git directory (its index lies there). */
  gitDir: string;
  /** HEAD's commit, undefined before the first commit. */
  head: string | undefined;
  /** Its tree. */
  headTree: string | undefined;
}

async function gitInfo(root: string): Promise<GitInfo | undefined> {
  // Both at once (each git start costs): the second fails before the first commit.
  const [where, head] = await Promise.all([
    neutralGit(root, [
      "rev-parse",
      "--is-inside-work-tree",
      "--show-prefix",
      "--path-format=absolute",
      "--show-toplevel",
      "--git-dir",
    ]).then(
      (out) => out.toString("utf8").split("\n"),
      () => undefined,
    ),
    neutralGit(root, ["rev-parse", "HEAD^{commit}", "HEAD^{tree}"]).then(
      (out) => out.toString("utf8").split("\n"),
      () => undefined,
    ),
  ]);
  if (where === undefined || where[0] !== "true" || where[2] === undefined || where[3] === undefined)
    return undefined;
  return {
    prefix: where[1] ?? "",
    top: where[2],
    gitDir: where[3],
    head: head?.[0] || undefined,
    headTree: head?.[1] || undefined,
  };
}

/**
 * A new task workspace for task `id` in `root`: a worktree when `root` is in a git work tree, else a
 * copy; `mode: "in-place"` uses `root` itself. Throws ToolError "invalid_argument" for a bad id and
 * "workspace_exists" when Spark already has a workspace of that id for `root`.
 */
export async function createTaskWorkspace(
  root: string,
  id: string,
  options: { mode?: "auto" | "in-place" } = {},
): Promise<TaskWorkspace> {
  checkId(id);
  const realRoot = await realpath(root);
  if (options.mode === "in-place") return { id, kind: "in-place", root: realRoot, path: realRoot, base: "" };
  const folder = taskWorkspacesFolder(realRoot);
  const dir = join(folder, id);
  if ((await exists(dir)) || (await exists(dir + BASE_SUFFIX))) {
    throw new ToolError("workspace_exists", `A task workspace ${dir} already exists.`);
  }
  await mkdir(folder, { recursive: true, mode: 0o700 });
  const git = await gitInfo(realRoot);
  if (git) return createWorktree(realRoot, id, dir, git);
  return createCopy(realRoot, id, dir);
}

/**
 * The commit of what the user sees in `git.top` now: HEAD's tree with every change of the work tree
 * (staged or not, untracked files that are not ignored) written through a temporary index, so the
 * user's index, refs and files stay as they were. HEAD itself when nothing differs.
 */
async function snapshotCommit(git: GitInfo, scratch: string, id: string): Promise<string> {
  const index = `${scratch}.index-${randomBytes(4).toString("hex")}`;
  try {
    // Starting from a copy of the user's index keeps its stat data: only changed files are hashed.
    await copyFile(join(git.gitDir, "index"), index).catch(() => undefined);
    const env = { GIT_INDEX_FILE: index };
    await neutralGit(git.top, ["add", "-A", "--ignore-errors", "--", "."], GIT_BUFFER, { env });
    const tree = (await neutralGit(git.top, ["write-tree"], GIT_BUFFER, { env })).toString("utf8").trim();
    if (git.head !== undefined && git.headTree === tree) return git.head;
    const parents = git.head === undefined ? [] : ["-p", git.head];
    const commit = await neutralGit(
      git.top,
      ["commit-tree", tree, ...parents, "-m", `spark: base of task ${id} (HEAD and uncommitted changes)`],
      GIT_BUFFER,
      { env: SPARK_IDENTITY },
    );
    return commit.toString("utf8").trim();
  } finally {
    await rm(index, { force: true });
  }
}

/**
 * The worktree on `spark/<id>` at the base. The checkout of HEAD (most of the time, in a large
 * repository) runs while the base snapshot is made; then only the files that differ between HEAD
 * and the base are checked out (`moveFreshWorktree`) and the branch moves to the base.
 */
async function createWorktree(root: string, id: string, dir: string, git: GitInfo): Promise<TaskWorkspace> {
  const branch = `spark/${id}`;
  const add = (start: string): Promise<Buffer> =>
    worktreeAdmin(git.top, () =>
      neutralGit(git.top, ["worktree", "add", "--quiet", "-b", branch, dir, start], GIT_BUFFER),
    );
  let base: string;
  if (git.head === undefined) {
    base = await snapshotCommit(git, dir, id);
    await add(base);
  } else {
    const [snapshot, added] = await Promise.allSettled([snapshotCommit(git, dir, id), add(git.head)]);
    if (snapshot.status === "rejected" || added.status === "rejected") {
      if (added.status === "fulfilled") await removeWorktree(git.top, dir, branch);
      throw snapshot.status === "rejected" ? snapshot.reason : (added as PromiseRejectedResult).reason;
    }
    base = snapshot.value;
    if (base !== git.head) {
      try {
        await moveFreshWorktree(dir, git.head, base);
        await neutralGit(dir, ["update-ref", `refs/heads/${branch}`, base, git.head]);
      } catch (error) {
        await removeWorktree(git.top, dir, branch);
        throw error;
      }
    }
  }
  const path = git.prefix === "" ? dir : join(dir, git.prefix);
  await mkdir(path, { recursive: true });
  refreshSoon(dir);
  return { id, kind: "worktree", root, path, branch, base };
}

/**
 * A fresh worktree's index was written in the same second as its files: every entry is racily clean
 * and `diff-files` would read every file back each time the task's changes are asked for. Once the
 * clock has moved on, one refresh (in the background, off the task's start) records them as clean
 * for good. A worktree removed meanwhile just fails it.
 */
function refreshSoon(dir: string): void {
  setTimeout(() => {
    neutralGit(dir, ["update-index", "-q", "--refresh"], GIT_BUFFER).catch(() => undefined);
  }, 1_500).unref();
}

/**
 * A worktree just checked out at `from` brought to `to`: the index entries of the paths that differ
 * between the two trees replaced (`update-index --index-info`), those files written
 * (`checkout-index -u`, which records their stat data) and removed ones deleted. Only those paths
 * are touched: `read-tree -m -u` would compare every file of the fresh worktree first (all of them
 * racily clean, so read back whole), hundreds of milliseconds in a large repository.
 */
async function moveFreshWorktree(dir: string, from: string, to: string): Promise<void> {
  const fields = splitZ(
    await neutralGit(dir, ["diff-tree", "-r", "-z", "--no-renames", from, to], GIT_BUFFER),
  );
  const entries: string[] = [];
  const written: string[] = [];
  const removed: string[] = [];
  for (let i = 0; i + 1 < fields.length; i += 2) {
    // ":OLDMODE NEWMODE OLDSHA NEWSHA STATUS", then the path.
    const [, newMode = "", , newSha = "", status = ""] = fields[i]!.slice(1).split(" ");
    const path = fields[i + 1]!;
    if (status === "D") {
      entries.push(`0 ${"0".repeat(newSha.length)}\t${path}`);
      removed.push(path);
    } else {
      entries.push(`${newMode} ${newSha}\t${path}`);
      if (newMode !== "160000") written.push(path);
    }
  }
  if (entries.length === 0) return;
  await neutralGit(dir, ["update-index", "-z", "--index-info"], GIT_BUFFER, {
    input: entries.map((entry) => `${entry}\0`).join(""),
  });
  for (const path of removed) await rm(join(dir, path), { force: true });
  if (written.length > 0) {
    await neutralGit(dir, ["checkout-index", "-f", "-u", "-z", "--stdin"], GIT_BUFFER, {
      input: written.map((path) => `${path}\0`).join(""),
    });
  }
}

/** Reads the `.gitignore` files of a directory tree as it is walked (nested ones apply below them). */
interface IgnoreLevel {
  dir: string;
  rules: Ignore;
}

/**
 * Every file under `top` (relative posix paths) that `.gitignore` files do not exclude, `.git`
 * never; directories are not listed, symlinks are (not followed).
 */
async function listFiles(top: string, honourIgnore: boolean): Promise<string[]> {
  const found: string[] = [];
  const walk = async (rel: string, levels: IgnoreLevel[]): Promise<void> => {
    const abs = rel === "" ? top : join(top, rel);
    let here = levels;
    if (honourIgnore) {
      try {
        const text = await readFile(join(abs, ".gitignore"), "utf8");
        here = [...levels, { dir: rel, rules: ignore().add(text) }];
      } catch {
        // No .gitignore here.
      }
    }
    const entries = await readdir(abs, { withFileTypes: true });
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    for (const entry of entries) {
      if (entry.name === ".git") continue;
      const path = rel === "" ? entry.name : `${rel}/${entry.name}`;
      const isDir = entry.isDirectory();
      if (honourIgnore && ignoredBy(here, path, isDir)) continue;
      if (isDir) await walk(path, here);
      else if (entry.isFile() || entry.isSymbolicLink()) found.push(path);
    }
  };
  await walk("", []);
  return found;
}

function ignoredBy(levels: readonly IgnoreLevel[], path: string, isDir: boolean): boolean {
  let ignored = false;
  for (const level of levels) {
    const rel = level.dir === "" ? path : path.slice(level.dir.length + 1);
    const result = level.rules.test(isDir ? `${rel}/` : rel);
    if (result.ignored) ignored = true;
    else if (result.unignored) ignored = false;
  }
  return ignored;
}

/** Copies one file or symlink (a symlink stays a link), creating its directory. */
async function copyEntry(from: string, to: string): Promise<void> {
  await mkdir(dirname(to), { recursive: true });
  const info = await lstat(from);
  if (info.isSymbolicLink()) await symlink(await readlink(from), to);
  else await copyFile(from, to);
}

async function createCopy(root: string, id: string, dir: string): Promise<TaskWorkspace> {
  const base = dir + BASE_SUFFIX;
  const tooLarge = (what: string): ToolError =>
    new ToolError(
      "workspace_too_large",
      `${root} is not a git repository and ${what}: too much to copy for a task (it would be copied twice, ` +
        "the task's copy and its base). Make it a git repository (a task then gets a worktree), add what " +
        "need not be copied to .gitignore, or run tasks in place (`spark app --in-place`).",
    );
  try {
    const files = await listFiles(root, true);
    if (files.length > MAX_COPY_FILES)
      throw tooLarge(`holds ${files.length} files (at most ${MAX_COPY_FILES})`);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await mkdir(base, { recursive: true, mode: 0o700 });
    let bytes = 0;
    for (const file of files) {
      // A file removed or unreadable while copying is left out of both (it is not the task's).
      try {
        await copyEntry(join(root, file), join(base, file));
        await copyEntry(join(base, file), join(dir, file));
        bytes += (await lstat(join(base, file))).size;
      } catch {
        await rm(join(base, file), { force: true });
      }
      if (bytes > MAX_COPY_BYTES) throw tooLarge(`holds more than ${MAX_COPY_BYTES / 2 ** 30} GiB`);
    }
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    await rm(base, { recursive: true, force: true });
    throw error;
  }
  return { id, kind: "copy", root, path: dir, base };
}

/** Re-opens a saved task workspace after a restart: undefined when it is gone. */
export async function openTaskWorkspace(saved: TaskWorkspace): Promise<TaskWorkspace | undefined> {
  try {
    if (!(await stat(saved.root)).isDirectory()) return undefined;
    if (saved.kind === "in-place") return saved;
    if (!(await stat(saved.path)).isDirectory()) return undefined;
    if (saved.kind === "copy") return (await stat(saved.base)).isDirectory() ? saved : undefined;
    if (saved.kind === "worktree") {
      const top = await worktreeTop(saved);
      return (await exists(join(top, ".git"))) ? saved : undefined;
    }
  } catch {
    return undefined;
  }
  return undefined;
}

/** The top of a task's worktree (its path may be a subdirectory of it, as root is of its repository). */
async function worktreeTop(ws: TaskWorkspace): Promise<string> {
  const dir = join(taskWorkspacesFolder(ws.root), ws.id);
  return isInside(dir, ws.path) || dir === ws.path ? dir : ws.path;
}

/** `path` relative to ws.path: the worktree-relative path with the root's prefix removed. */
async function rootPrefix(ws: TaskWorkspace): Promise<string> {
  const top = await worktreeTop(ws);
  const rel = toPosix(relative(top, ws.path));
  return rel === "" ? "" : `${rel}/`;
}

/** One changed file as bytes: the base, the task's version (null: absent). */
interface RawChange {
  path: string;
  before: Buffer | null;
  after: Buffer | null;
}

/** A file's bytes (a symlink's target), null when it does not exist or is not a file. */
async function readEntry(abs: string): Promise<Buffer | null> {
  try {
    const info = await lstat(abs);
    if (info.isSymbolicLink()) return Buffer.from(await readlink(abs));
    if (!info.isFile()) return null;
    return await readFile(abs);
  } catch {
    return null;
  }
}

/**
 * The entry at `rel` beneath a confined root, not followed: a file's bytes, a symlink's target (with
 * `link`), null when absent or neither (a FIFO is never opened).
 */
async function confinedEntry(root: Workspace, rel: string): Promise<{ bytes: Buffer | null; link: boolean }> {
  try {
    const info = await root.stat(rel, { final: "entry" });
    if (info?.isSymbolicLink()) return { bytes: Buffer.from(await root.readlink(rel)), link: true };
    if (!info?.isFile()) return { bytes: null, link: false };
    return { bytes: await root.readFile(rel, { final: "entry", allowEnvFiles: true }), link: false };
  } catch {
    return { bytes: null, link: false };
  }
}

async function isSymlink(abs: string): Promise<boolean> {
  try {
    return (await lstat(abs)).isSymbolicLink();
  } catch {
    return false;
  }
}

/** A blob of the base commit, null when the path is not in it. */
async function baseBlob(top: string, base: string, path: string): Promise<Buffer | null> {
  try {
    return await neutralGit(top, ["cat-file", "blob", `${base}:${path}`], GIT_BUFFER);
  } catch {
    return null;
  }
}

const splitZ = (out: Buffer): string[] =>
  out
    .toString("utf8")
    .split("\0")
    .filter((part) => part !== "");

async function rawChanges(ws: TaskWorkspace): Promise<RawChange[]> {
  if (ws.kind === "in-place") return [];
  const candidates = new Set<string>();
  let before: (path: string) => Promise<Buffer | null>;
  if (ws.kind === "worktree") {
    const top = await worktreeTop(ws);
    const prefix = await rootPrefix(ws);
    // Without an index refresh diff-files compares stat data only (it reads no content, so runs no
    // filter): a file touched but unchanged is a candidate, dropped below when its bytes are equal.
    const tracked = splitZ(
      await neutralGit(top, ["diff-files", "-z", "--name-only", "--ignore-submodules"], GIT_BUFFER),
    );
    const untracked = splitZ(
      await neutralGit(top, ["ls-files", "-z", "--others", "--exclude-standard"], GIT_BUFFER),
    );
    for (const path of [...tracked, ...untracked]) {
      if (path.startsWith(prefix)) candidates.add(path.slice(prefix.length));
    }
    before = (path) => baseBlob(top, ws.base, prefix + path);
  } else {
    for (const path of await listFiles(ws.path, true)) candidates.add(path);
    for (const path of await listFiles(ws.base, false)) candidates.add(path);
    before = (path) => readEntry(join(ws.base, path));
  }
  const changes: RawChange[] = [];
  for (const path of [...candidates].sort()) {
    const [was, now] = await Promise.all([before(path), readEntry(join(ws.path, path))]);
    if (was === null && now === null) continue;
    if (was !== null && now !== null && was.equals(now)) continue;
    changes.push({ path, before: was, after: now });
  }
  return changes;
}

const isBinary = (content: Buffer | null): boolean => content !== null && content.includes(0);

/** Line counts and the unified diff of one change. */
function describe(change: RawChange): TaskFileChange {
  const status = change.before === null ? "added" : change.after === null ? "deleted" : "modified";
  const before = change.before?.toString("utf8") ?? null;
  const after = change.after?.toString("utf8") ?? null;
  if (isBinary(change.before) || isBinary(change.after)) {
    return {
      path: change.path,
      status,
      before,
      after,
      added: 0,
      removed: 0,
      patch: `Binary files a/${change.path} and b/${change.path} differ\n`,
    };
  }
  const diff = structuredPatch(
    change.before === null ? "/dev/null" : `a/${change.path}`,
    change.after === null ? "/dev/null" : `b/${change.path}`,
    before ?? "",
    after ?? "",
    undefined,
    undefined,
    { context: 3 },
  );
  let added = 0;
  let removed = 0;
  const lines = [`--- ${diff.oldFileName}`, `+++ ${diff.newFileName}`];
  for (const hunk of diff.hunks) {
    // An empty side starts at line 0, as git and patch(1) write it.
    const oldStart = hunk.oldLines === 0 ? hunk.oldStart - 1 : hunk.oldStart;
    const newStart = hunk.newLines === 0 ? hunk.newStart - 1 : hunk.newStart;
    lines.push(`@@ -${oldStart},${hunk.oldLines} +${newStart},${hunk.newLines} @@`);
    for (const line of hunk.lines) {
      if (line.startsWith("+")) added++;
      else if (line.startsWith("-")) removed++;
      lines.push(line);
    }
  }
  return { path: change.path, status, before, after, added, removed, patch: `${lines.join("\n")}\n` };
}

/** The task's diff against the point it started from (empty in place: the app's change record covers it). */
export async function taskChanges(ws: TaskWorkspace): Promise<TaskFileChange[]> {
  return (await rawChanges(ws)).map(describe);
}

/** What to write in root for one file: bytes, a symlink, or a deletion. */
interface Write {
  path: string;
  content: Buffer | null;
  link: boolean;
}

/** 3-way merge of one file's text with `git merge-file`; undefined when it conflicts. */
async function mergeText(
  scratch: string,
  ours: Buffer,
  base: Buffer,
  theirs: Buffer,
): Promise<Buffer | undefined> {
  const dir = join(scratch, `.merge-${randomBytes(6).toString("hex")}`);
  await mkdir(dir, { recursive: true });
  try {
    const files = { ours: join(dir, "ours"), base: join(dir, "base"), theirs: join(dir, "theirs") };
    await Promise.all([
      writeFileAtomic(files.ours, ours),
      writeFileAtomic(files.base, base),
      writeFileAtomic(files.theirs, theirs),
    ]);
    try {
      return await neutralGit(dir, ["merge-file", "-p", files.ours, files.base, files.theirs], GIT_BUFFER);
    } catch (error) {
      // merge-file exits with the number of conflicts (> 0): a conflict, not a failure.
      if (typeof (error as { code?: unknown }).code === "number" && (error as { code: number }).code > 0)
        return undefined;
      throw error;
    }
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/**
 * Where `path` lands in the user's workspace: its directory resolved (a symlinked directory must
 * stay inside the workspace), the name itself not followed (a symlink is replaced, not written
 * through). Refused, with the reason, outside the workspace, in the home directory's secrets, and
 * in protected paths (`.git`, `.spark`, `.codex`, `.vscode`): what lands there runs code later,
 * so it never arrives without the user copying it by hand (patches to them need an approval).
 */
async function landingIn(workspace: Workspace, path: string): Promise<string | { refused: string }> {
  const parent = dirname(path);
  let dir: string;
  try {
    dir = parent === "." ? workspace.root : await workspace.resolve(parent, "write");
  } catch (error) {
    return { refused: (error as Error).message };
  }
  const target = join(dir, basename(path));
  if (workspace.isSecret(target)) return { refused: "one of the home directory's secrets" };
  const part = protectedPart(workspace.root, target);
  if (part !== undefined) {
    return {
      refused: `${part} is protected (what lands there runs code later): review the task's file and copy it by hand`,
    };
  }
  return target;
}

/**
 * 3-way merge of the task's changes (all, or those of `options.paths`) into root's current files:
 * the base is where the task started, "ours" the root's file now, "theirs" the task's. All or
 * nothing: every file is merged in memory first, and when any conflicts nothing is written and each
 * conflicting file is listed with the reason. A file already as the task has it counts as applied.
 */
export async function applyTaskWorkspace(
  ws: TaskWorkspace,
  options: { paths?: string[] } = {},
): Promise<ApplyResult> {
  if (ws.kind === "in-place") return { applied: [], conflicts: [] };
  const wanted = options.paths === undefined ? undefined : new Set(options.paths);
  const changes = (await rawChanges(ws)).filter((change) => wanted === undefined || wanted.has(change.path));
  const writes: Write[] = [];
  const applied: string[] = [];
  const conflicts: ApplyResult["conflicts"] = [];
  const scratch = taskWorkspacesFolder(ws.root);
  const workspace = await Workspace.open(ws.root);
  const targets = new Map<string, string>();
  for (const change of changes) {
    const target = await landingIn(workspace, change.path);
    if (typeof target !== "string") {
      conflicts.push({ path: change.path, reason: target.refused });
      continue;
    }
    targets.set(change.path, target);
    const ours = (await confinedEntry(workspace, change.path)).bytes;
    const link = await isSymlink(join(ws.path, change.path));
    const { before: base, after: theirs } = change;
    const same = (a: Buffer | null, b: Buffer | null): boolean =>
      a === null ? b === null : b !== null && a.equals(b);
    if ((await workspace.stat(change.path, { final: "entry" }))?.isDirectory()) {
      conflicts.push({
        path: change.path,
        reason: "the workspace has a directory where the task has a file",
      });
      continue;
    }
    if (link && theirs !== null) {
      // A link is as dangerous as where it points: never one out of the workspace or into .git.
      const refused = await workspace.linkRefusal(change.path, theirs.toString("utf8"));
      if (refused !== undefined) {
        conflicts.push({ path: change.path, reason: `a symlink to ${theirs.toString("utf8")}: ${refused}` });
        continue;
      }
    }
    applied.push(change.path);
    if (same(ours, theirs)) continue; // already there
    if (same(ours, base)) {
      writes.push({ path: change.path, content: theirs, link });
      continue;
    }
    // Both sides changed the file since the task started.
    if (theirs === null) {
      conflicts.push({
        path: change.path,
        reason: "deleted by the task, changed in the workspace since it started",
      });
    } else if (ours === null) {
      conflicts.push({
        path: change.path,
        reason: "changed by the task, deleted in the workspace since it started",
      });
    } else if (base === null) {
      conflicts.push({
        path: change.path,
        reason: "added by the task and, differently, in the workspace since it started",
      });
    } else if (link || isBinary(ours) || isBinary(base) || isBinary(theirs)) {
      conflicts.push({
        path: change.path,
        reason: "changed by the task and in the workspace (binary or link: no merge)",
      });
    } else {
      await mkdir(scratch, { recursive: true, mode: 0o700 });
      const merged = await mergeText(scratch, ours, base, theirs);
      if (merged === undefined) {
        conflicts.push({
          path: change.path,
          reason: "changed by the task and in the workspace on the same lines",
        });
      } else {
        writes.push({ path: change.path, content: merged, link: false });
      }
    }
  }
  if (conflicts.length > 0) return { applied: [], conflicts };
  // Through the confined layer: a link at a target is replaced, never written through, and no
  // protected name is ever written (landingIn refused them above; the layer refuses them again).
  for (const write of writes) {
    if (write.content === null) await workspace.remove(write.path);
    else if (write.link) await workspace.symlink(write.path, write.content.toString("utf8"));
    else await workspace.writeFile(write.path, write.content);
  }
  return { applied, conflicts: [] };
}

/**
 * Puts one file of the task's workspace back as it was at the base (a per-file discard); a file the
 * task added is removed. Throws ToolError "invalid_argument" for a path outside the workspace.
 */
export async function restoreTaskFile(ws: TaskWorkspace, path: string): Promise<void> {
  if (ws.kind === "in-place") return;
  if (!isInside(ws.path, join(ws.path, path))) {
    throw new ToolError(
      "invalid_argument",
      `${JSON.stringify(path)} is not a path inside the task's workspace.`,
    );
  }
  // As Apply: not through a symlink out of the task's workspace, never its `.git` or other protected paths.
  const taskRoot = await Workspace.open(ws.path);
  const target = await landingIn(taskRoot, path);
  if (typeof target !== "string") throw new ToolError("invalid_argument", `${path}: ${target.refused}`);
  let base: Buffer | null;
  let link = false;
  if (ws.kind === "worktree") {
    const top = await worktreeTop(ws);
    const full = (await rootPrefix(ws)) + toPosix(path);
    base = await baseBlob(top, ws.base, full);
    if (base !== null) {
      const entry = (await neutralGit(top, ["ls-tree", ws.base, "--", full])).toString("utf8");
      link = entry.startsWith("120000 ");
    }
  } else {
    base = await readEntry(join(ws.base, path));
    link = await isSymlink(join(ws.base, path));
  }
  if (base === null) await taskRoot.remove(path);
  else if (link) await taskRoot.symlink(path, base.toString("utf8"));
  else await taskRoot.writeFile(path, base);
}

/**
 * Git's worktree bookkeeping (`.git/worktrees/*`) is not safe against itself: two `git worktree add`
 * at once on one repository can fail ("failed to read .git/worktrees/ID/commondir"). Every add,
 * remove and prune of one repository runs one at a time, in this process, through this chain.
 */
const worktreeAdminChains = new Map<string, Promise<unknown>>();
function worktreeAdmin<T>(top: string, run: () => Promise<T>): Promise<T> {
  const previous = worktreeAdminChains.get(top) ?? Promise.resolve();
  const next = previous.then(run, run);
  const settled = next.then(
    () => undefined,
    () => undefined,
  );
  worktreeAdminChains.set(top, settled);
  void settled.then(() => {
    if (worktreeAdminChains.get(top) === settled) worktreeAdminChains.delete(top);
  });
  return next;
}

/** Removes one of Spark's worktrees and its branch, whatever state it is in. */
async function removeWorktree(top: string, dir: string, branch: string | undefined): Promise<void> {
  try {
    await worktreeAdmin(top, () => neutralGit(top, ["worktree", "remove", "--force", "--force", dir]));
  } catch {
    // Already gone, or locked: the directory goes, and `worktree prune` forgets it.
    await rm(dir, { recursive: true, force: true });
    await worktreeAdmin(top, () => neutralGit(top, ["worktree", "prune"])).catch(() => undefined);
  }
  if (branch !== undefined) await neutralGit(top, ["branch", "-D", "--", branch]).catch(() => undefined);
}

/** Removes the worktree (or copy and its snapshot) and its spark/<id> branch; in place: nothing. */
export async function discardTaskWorkspace(ws: TaskWorkspace): Promise<void> {
  if (ws.kind === "in-place") return;
  const folder = taskWorkspacesFolder(ws.root);
  const dir = join(folder, ws.id);
  if (ws.kind === "copy") {
    await rm(dir, { recursive: true, force: true });
    await rm(dir + BASE_SUFFIX, { recursive: true, force: true });
    return;
  }
  const git = await gitInfo(ws.root);
  if (git === undefined) {
    // No repository (any more): what is there is a copy, or a worktree directory git cannot remove.
    await rm(dir, { recursive: true, force: true });
    await rm(dir + BASE_SUFFIX, { recursive: true, force: true });
    return;
  }
  await removeWorktree(git.top, dir, ws.branch ?? `spark/${ws.id}`);
}

/** `git worktree list --porcelain`: each worktree's path and branch (refs/heads/…). */
async function listWorktrees(top: string): Promise<{ path: string; branch: string | undefined }[]> {
  const out = (await neutralGit(top, ["worktree", "list", "--porcelain", "-z"], GIT_BUFFER)).toString("utf8");
  const worktrees: { path: string; branch: string | undefined }[] = [];
  for (const field of out.split("\0")) {
    if (field.startsWith("worktree "))
      worktrees.push({ path: field.slice("worktree ".length), branch: undefined });
    else if (field.startsWith("branch ") && worktrees.length > 0)
      worktrees[worktrees.length - 1]!.branch = field.slice("branch ".length);
  }
  return worktrees;
}

/**
 * Removes Spark's worktrees and copies of `root` whose id `keep` rejects (a crash leaves none for
 * ever), then `git worktree prune`. Only what lies in `taskWorkspacesFolder(root)` is Spark's; a
 * branch goes only with its worktree there, and only when it is that worktree's `spark/<id>`.
 */
export async function pruneTaskWorkspaces(
  root: string,
  keep: (id: string) => boolean,
): Promise<{ removed: string[] }> {
  const realRoot = await realpath(root);
  const folder = taskWorkspacesFolder(realRoot);
  const removed: string[] = [];
  const git = await gitInfo(realRoot);
  const registered = new Set<string>();
  if (git !== undefined) {
    for (const worktree of await listWorktrees(git.top)) {
      if (dirname(worktree.path) !== folder) continue;
      const id = basename(worktree.path);
      registered.add(id);
      if (!ID.test(id) || keep(id)) continue;
      const branch = worktree.branch === `refs/heads/spark/${id}` ? `spark/${id}` : undefined;
      await removeWorktree(git.top, worktree.path, branch);
      removed.push(id);
    }
  }
  const names = await readdir(folder).catch((): string[] => []);
  for (const name of names) {
    // `<id>`, `<id>.base` (a copy's snapshot), `<id>.index-HEX` (a base snapshot's index, cut short).
    const id = name.replace(/(\.base|\.index-[0-9a-f]{8})$/, "");
    if (!ID.test(id) || keep(id) || registered.has(name)) continue;
    // A copy, its snapshot, or a worktree directory git no longer knows: all Spark's.
    await rm(join(folder, name), { recursive: true, force: true });
    if (!removed.includes(id)) removed.push(id);
  }
  if (git !== undefined) {
    const top = git.top;
    await worktreeAdmin(top, () => neutralGit(top, ["worktree", "prune"])).catch(() => undefined);
  }
  return { removed };
}

/** Disk the task's workspace takes (bytes of its files, excluding git's shared object store). */
export async function taskWorkspaceBytes(ws: TaskWorkspace): Promise<number> {
  if (ws.kind === "in-place") return 0;
  const sizeOf = async (dir: string): Promise<number> => {
    let total = 0;
    let entries;
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      return 0;
    }
    for (const entry of entries) {
      const abs = join(dir, entry.name);
      if (entry.isDirectory()) total += await sizeOf(abs);
      else {
        try {
          total += (await lstat(abs)).size;
        } catch {
          // Removed while counting.
        }
      }
    }
    return total;
  };
  const dir = join(taskWorkspacesFolder(ws.root), ws.id);
  return (await sizeOf(dir)) + (ws.kind === "copy" ? await sizeOf(ws.base) : 0);
}
