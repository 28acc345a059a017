/**
 * Where one task (or variant) works, so that parallel tasks never write the same files: in a git
 * repository a worktree of its own on the branch `spark/<id>`, started from HEAD plus the user's
 * uncommitted changes (untracked files that are not ignored included); outside git a copy of the
 * workspace (honouring `.gitignore`) with a snapshot of the base kept beside it; or the workspace
 * itself ("in-place") when the user asks for it. Nothing lands in the user's workspace until
 * `applyTaskWorkspace` (task-changes.ts), a 3-way merge that writes nothing when any file conflicts.
 *
 * Spark's worktrees and copies live under `<sparkHome()>/worktrees/<basename(root)>-<8 hex>/<id>`,
 * one folder per workspace root; `pruneTaskWorkspaces` removes the ones no task keeps and never
 * anything outside that folder (a user's own worktrees and branches are not Spark's), nor a
 * workspace another running Spark owns (owners.ts: `<id>.owner` beside it).
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
import { copyFile, lstat, mkdir, readdir, realpath, rm, stat, symlink } from "node:fs/promises";
import { basename, dirname, join, relative, sep } from "node:path";
import ignore, { type Ignore } from "ignore";
import { sparkHome } from "../context/spark-home.js";
import { removeOwnTree } from "../fs/spark-data.js";
import { neutralGit } from "../sandbox/neutral-git.js";
import { claimWorkspace, releaseWorkspace, workspaceOwner } from "./owners.js";
import { ToolError, Workspace } from "../files/workspace.js";

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

/** Ids become branch names and directory names: kept to a plain, safe alphabet. */
const ID = /^[A-Za-z0-9][A-Za-z0-9_-]{0,79}$/;
/** Outside git a task copies the workspace twice (its copy and the base): past these, it refuses. */
const MAX_COPY_FILES = 50_000;
const MAX_COPY_BYTES = 2 * 2 ** 30;
/** Beside a copy `<id>`, its base snapshot. */
export const BASE_SUFFIX = ".base";
/** Git's output is read whole; a workspace's file list fits in this. */
export const GIT_BUFFER = 256 * 1024 * 1024;
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

export const toPosix = (p: string): string => (sep === "/" ? p : p.split(sep).join("/"));

export function isInside(parent: string, child: string): boolean {
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
  // Marked before it exists: another instance's prune that sees the workspace sees its owner.
  await claimWorkspace(folder, id);
  try {
    const git = await gitInfo(realRoot);
    if (git) return await createWorktree(realRoot, id, dir, git);
    return await createCopy(realRoot, id, dir);
  } catch (error) {
    await releaseWorkspace(folder, id).catch(() => undefined);
    throw error;
  }
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
    await addWorkTree(git.top, env);
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
 * `git add -A` of every file of `top`'s work tree into the index `env.GIT_INDEX_FILE` names (untracked
 * files that are not ignored included). An untracked folder holding a repository of its own without
 * a commit (`git init newlib` not committed yet; an agent's `git init sub`) makes git refuse the
 * whole add (`'newlib/' does not have a commit checked out`): then such folders are taken as plain
 * files (their `.git` left out, the `.gitignore` files above and in them honoured), the rest as git
 * adds it. A nested repository with a commit stays what git makes of it (a gitlink).
 */
export async function addWorkTree(top: string, env: Record<string, string>): Promise<void> {
  const add = (exclude: readonly string[]): Promise<Buffer> =>
    neutralGit(
      top,
      ["add", "-A", "--ignore-errors", "--", ".", ...exclude.map((rel) => `:(exclude,literal)${rel}`)],
      GIT_BUFFER,
      { env },
    );
  try {
    await add([]);
    return;
  } catch (error) {
    // Only this refusal has a way round; anything else is the caller's to report.
    if (!/does not have a commit checked out/.test(String((error as { stderr?: unknown }).stderr ?? "")))
      throw error;
  }
  const untracked = splitZ(
    await neutralGit(top, ["ls-files", "-z", "--others", "--exclude-standard"], GIT_BUFFER, {
      env,
    }),
  );
  const nested = await uncommittedRepositories(top, untracked);
  await add(nested);
  const root = await Workspace.open(top);
  const files: string[] = [];
  for (const rel of nested) files.push(...(await listFiles(root, true, rel)));
  if (files.length === 0) return;
  await neutralGit(top, ["update-index", "--add", "-z", "--stdin"], GIT_BUFFER, {
    env,
    input: files.map((file) => `${file}\0`).join(""),
  });
}

/**
 * Which of `untracked` (paths relative to `top` from `ls-files --others`; a folder git stops at ends
 * in "/") hold a repository of their own without a commit: returned without their "/". A folder
 * whose `.git` git cannot read as a repository counts as one (its files are plain files).
 */
export async function uncommittedRepositories(top: string, untracked: readonly string[]): Promise<string[]> {
  const found: string[] = [];
  if (!untracked.some((entry) => entry.endsWith("/"))) return found;
  const root = await Workspace.open(top);
  for (const entry of untracked) {
    if (!entry.endsWith("/")) continue;
    const rel = entry.slice(0, -1);
    if ((await root.stat(`${rel}/.git`, { final: "entry" }).catch(() => undefined)) === undefined) continue;
    const committed = await neutralGit(join(top, rel), ["rev-parse", "--verify", "-q", "HEAD^{commit}"]).then(
      () => true,
      () => false,
    );
    if (!committed) found.push(rel);
  }
  return found;
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

export const splitZ = (out: Buffer): string[] =>
  out
    .toString("utf8")
    .split("\0")
    .filter((part) => part !== "");

/** Reads the `.gitignore` files of a directory tree as it is walked (nested ones apply below them). */
interface IgnoreLevel {
  dir: string;
  rules: Ignore;
}

/**
 * Every file under `top` (relative posix paths) that `.gitignore` files do not exclude, `.git`
 * never; directories are not listed, symlinks are (not followed), FIFOs and other special files are
 * not. Through the confined layer: a directory swapped for a link is not descended into, a
 * `.gitignore` FIFO is not waited on. With `under` (a folder relative to `top`), only the files
 * below it, the `.gitignore` files of the folders above it honoured too.
 */
export async function listFiles(
  top: string | Workspace,
  honourIgnore: boolean,
  under = "",
): Promise<string[]> {
  const root = typeof top === "string" ? await Workspace.open(top) : top;
  const found: string[] = [];
  const readRules = async (dir: string): Promise<IgnoreLevel | undefined> => {
    const text = await root
      .readFile(dir === "" ? ".gitignore" : `${dir}/.gitignore`, { final: "entry", maxBytes: 1024 * 1024 })
      .catch(() => undefined);
    return text === undefined ? undefined : { dir, rules: ignore().add(text.toString("utf8")) };
  };
  const walk = async (rel: string, levels: IgnoreLevel[]): Promise<void> => {
    let here = levels;
    if (honourIgnore) {
      const level = await readRules(rel);
      if (level !== undefined) here = [...levels, level];
    }
    const entries = await root.readdir(rel === "" ? "." : rel).catch(() => []);
    for (const entry of entries) {
      if (entry.name === ".git") continue;
      const isDir = entry.kind === "directory";
      if (honourIgnore && ignoredBy(here, entry.rel, isDir)) continue;
      if (isDir) await walk(entry.rel, here);
      else if (entry.kind === "file" || entry.kind === "symlink") found.push(entry.rel);
    }
  };
  const above: IgnoreLevel[] = [];
  if (honourIgnore && under !== "") {
    const parts = under.split("/");
    for (let i = 0; i < parts.length; i++) {
      const level = await readRules(parts.slice(0, i).join("/"));
      if (level !== undefined) above.push(level);
    }
  }
  await walk(under, above);
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

/**
 * Copies one file or symlink (a symlink stays a link, whatever it points to: the copy is Spark's,
 * and Apply judges links before they land) between two confined roots, the mode kept. Only a
 * regular file is read; anything else throws.
 */
async function copyEntry(from: Workspace, to: Workspace, rel: string): Promise<number> {
  const info = await from.stat(rel, { final: "entry" });
  if (info?.isSymbolicLink()) {
    const target = await from.readlink(rel);
    await to.mkdir(dirname(rel) === "." ? "." : dirname(rel));
    await rawLink(to, rel, target);
    return info.size;
  }
  const bytes = await from.readFile(rel, { final: "entry", allowEnvFiles: true, maxBytes: MAX_COPY_BYTES });
  await to.writeFile(rel, bytes, { mode: (info?.mode ?? 0o644) & 0o7777 });
  return bytes.length;
}

/**
 * Makes a link in one of Spark's own copies as it was in the user's workspace, without judging its
 * target (Apply does, before anything lands in the user's tree): the copy must show the task what
 * the workspace holds.
 */
async function rawLink(root: Workspace, rel: string, target: string): Promise<void> {
  await symlink(target, join(root.root, rel));
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
    const user = await Workspace.open(root);
    const files = await listFiles(user, true);
    if (files.length > MAX_COPY_FILES)
      throw tooLarge(`holds ${files.length} files (at most ${MAX_COPY_FILES})`);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await mkdir(base, { recursive: true, mode: 0o700 });
    const [baseRoot, copyRoot] = await Promise.all([Workspace.open(base), Workspace.open(dir)]);
    let bytes = 0;
    for (const file of files) {
      // A file removed or unreadable while copying (a FIFO now…) is left out of both (it is not the task's).
      try {
        bytes += await copyEntry(user, baseRoot, file);
        await copyEntry(baseRoot, copyRoot, file);
      } catch {
        await baseRoot.remove(file).catch(() => undefined);
        await copyRoot.remove(file).catch(() => undefined);
      }
      if (bytes > MAX_COPY_BYTES) throw tooLarge(`holds more than ${MAX_COPY_BYTES / 2 ** 30} GiB`);
    }
  } catch (error) {
    await removeOwnTree(dir);
    await removeOwnTree(base);
    throw error;
  }
  return { id, kind: "copy", root, path: dir, base };
}

/**
 * Re-opens a saved task workspace after a restart: undefined when it is gone. It becomes this
 * process's (owners.ts) unless another running Spark owns it.
 */
export async function openTaskWorkspace(saved: TaskWorkspace): Promise<TaskWorkspace | undefined> {
  const found = await findTaskWorkspace(saved);
  if (found !== undefined && found.kind !== "in-place") {
    const folder = taskWorkspacesFolder(found.root);
    if ((await workspaceOwner(folder, found.id)) === "none")
      await claimWorkspace(folder, found.id).catch(() => undefined);
  }
  return found;
}

async function findTaskWorkspace(saved: TaskWorkspace): Promise<TaskWorkspace | undefined> {
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
export async function worktreeTop(ws: TaskWorkspace): Promise<string> {
  const dir = join(taskWorkspacesFolder(ws.root), ws.id);
  return isInside(dir, ws.path) || dir === ws.path ? dir : ws.path;
}

/** `path` relative to ws.path: the worktree-relative path with the root's prefix removed. */
export async function rootPrefix(ws: TaskWorkspace): Promise<string> {
  const top = await worktreeTop(ws);
  const rel = toPosix(relative(top, ws.path));
  return rel === "" ? "" : `${rel}/`;
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
    await removeOwnTree(dir);
    await worktreeAdmin(top, () => neutralGit(top, ["worktree", "prune"])).catch(() => undefined);
  }
  if (branch !== undefined) await neutralGit(top, ["branch", "-D", "--", branch]).catch(() => undefined);
}

/** Removes the worktree (or copy and its snapshot) and its spark/<id> branch; in place: nothing. */
export async function discardTaskWorkspace(ws: TaskWorkspace): Promise<void> {
  if (ws.kind === "in-place") return;
  const folder = taskWorkspacesFolder(ws.root);
  const dir = join(folder, ws.id);
  const git = ws.kind === "copy" ? undefined : await gitInfo(ws.root);
  if (git === undefined) {
    // A copy; or no repository (any more): a worktree directory git cannot remove.
    await removeOwnTree(dir);
    await removeOwnTree(dir + BASE_SUFFIX);
  } else {
    await removeWorktree(git.top, dir, ws.branch ?? `spark/${ws.id}`);
  }
  await releaseWorkspace(folder, ws.id);
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
 * branch goes only with its worktree there, and only when it is that worktree's `spark/<id>`. A
 * workspace another running process owns (owners.ts) is never removed, whatever `keep` says: it is
 * that process's live work (another app's task, a variant running now).
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
  const owners = new Map<string, Promise<"self" | "other" | "none">>();
  const ownedElsewhere = async (id: string): Promise<boolean> => {
    if (!owners.has(id)) owners.set(id, workspaceOwner(folder, id));
    return (await owners.get(id)) === "other";
  };
  if (git !== undefined) {
    for (const worktree of await listWorktrees(git.top)) {
      if (dirname(worktree.path) !== folder) continue;
      const id = basename(worktree.path);
      registered.add(id);
      if (!ID.test(id) || keep(id) || (await ownedElsewhere(id))) continue;
      const branch = worktree.branch === `refs/heads/spark/${id}` ? `spark/${id}` : undefined;
      await removeWorktree(git.top, worktree.path, branch);
      removed.push(id);
    }
  }
  const names = await readdir(folder).catch((): string[] => []);
  for (const name of names) {
    // `<id>`, `<id>.base` (a copy's snapshot), `<id>.index-HEX` (a base snapshot's index, cut
    // short), `<id>.owner` (its owner's mark, owners.ts).
    const id = name.replace(/(\.base|\.index-[0-9a-f]{8}|\.owner)$/, "");
    if (!ID.test(id) || keep(id) || registered.has(name) || (await ownedElsewhere(id))) continue;
    // A copy, its snapshot, or a worktree directory git no longer knows: all Spark's.
    await removeOwnTree(join(folder, name));
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
  // By descriptors through the confined layer: a directory swapped for a link is not counted.
  const sizeOf = async (dir: string): Promise<number> => {
    let total = 0;
    try {
      const root = await Workspace.open(dir, { home: "" });
      await root.walkTree(".", async (entry, _open, stat) => {
        if (entry.kind !== "directory") total += (await stat())?.size ?? 0;
      });
    } catch {
      // Gone meanwhile.
    }
    return total;
  };
  const dir = join(taskWorkspacesFolder(ws.root), ws.id);
  return (await sizeOf(dir)) + (ws.kind === "copy" ? await sizeOf(ws.base) : 0);
}
