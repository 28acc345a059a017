/**
 * A task's changes and getting them into the user's workspace: its diff against where it started
 * (`taskChanges`), Apply (`applyTaskWorkspace`, a 3-way merge that writes nothing when any file
 * conflicts) and a per-file discard in the task's own workspace (`restoreTaskFile`). Every read of
 * the task's workspace and every write of the user's goes through the confined file layer
 * (fs/confined.ts).
 */
import { randomBytes } from "node:crypto";
import { lstat, mkdir, readFile, readlink, rm } from "node:fs/promises";
import { basename, dirname, join } from "node:path";
import { structuredPatch } from "diff";
import { writeFileAtomic } from "../fs/spark-data.js";
import { neutralGit } from "../neutral-git.js";
import { protectedPart } from "../protected-paths.js";
import { ToolError, Workspace } from "../workspace.js";
import {
  GIT_BUFFER,
  isInside,
  listFiles,
  rootPrefix,
  splitZ,
  taskWorkspacesFolder,
  toPosix,
  worktreeTop,
  type TaskWorkspace,
} from "./task-workspace.js";

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
