/**
 * A task's changes and getting them into the user's workspace: its diff against where it started
 * (`taskChanges`), Apply (`applyTaskWorkspace`, a 3-way merge that writes nothing when any file
 * conflicts) and a per-file discard in the task's own workspace (`restoreTaskFile`). Every read of
 * the task's workspace and every write of the user's goes through the confined file layer
 * (fs/confined.ts).
 */
import { basename, dirname, join } from "node:path";
import { structuredPatch } from "diff";
import { withScratchDir, writeFileAtomic } from "../fs/spark-data.js";
import { contentDiff } from "../files/file-diff.js";
import { neutralGit } from "../sandbox/neutral-git.js";
import type { FileDiff } from "../thread-item.js";
import { protectedPart } from "../sandbox/protected-paths.js";
import { ToolError, Workspace } from "../files/workspace.js";
import {
  GIT_BUFFER,
  isInside,
  listFiles,
  rootPrefix,
  splitZ,
  uncommittedRepositories,
  taskWorkspacesFolder,
  toPosix,
  worktreeTop,
  type TaskWorkspace,
} from "./task-workspace.js";

export interface TaskFileChange {
  /** Relative to root, forward slashes. */
  path: string;
  status: "added" | "modified" | "deleted";
  /** Content at base (null: absent); a symlink as `symlink → TARGET` (see `links`). */
  before: string | null;
  /** Content in the task's workspace now (null: deleted); a symlink as `symlink → TARGET`. */
  after: string | null;
  /** Present when either side is a symlink: its target on each side (null: not a link there). */
  links?: { before: string | null; after: string | null };
  added: number;
  removed: number;
  /** Unified diff (a/path b/path); "Binary files differ" for binary content. */
  patch: string;
}

export interface ApplyResult {
  applied: string[];
  conflicts: { path: string; reason: string }[];
}

/** One side of a change: a file's bytes or a symlink's target. */
interface Side {
  bytes: Buffer;
  link: boolean;
}

/** One changed file: the base, the task's version (null: absent). */
interface RawChange {
  path: string;
  before: Side | null;
  after: Side | null;
}

/**
 * The entry at `rel` beneath a confined root, not followed: a file's bytes or a symlink's target;
 * null when absent or neither (a FIFO is never opened, a link never followed).
 */
async function confinedEntry(root: Workspace, rel: string): Promise<Side | null> {
  try {
    const info = await root.stat(rel, { final: "entry" });
    if (info?.isSymbolicLink()) return { bytes: Buffer.from(await root.readlink(rel)), link: true };
    if (!info?.isFile()) return null;
    return { bytes: await root.readFile(rel, { final: "entry", allowEnvFiles: true }), link: false };
  } catch {
    return null;
  }
}

/** A path of the base commit: its blob and whether it is a symlink (mode 120000); null when absent. */
async function baseEntry(top: string, base: string, path: string): Promise<Side | null> {
  try {
    const listed = (await neutralGit(top, ["ls-tree", "-z", base, "--", path], GIT_BUFFER)).toString("utf8");
    const match = /^(\d+) blob ([0-9a-f]+)\t/.exec(listed);
    if (!match) return null;
    const bytes = await neutralGit(top, ["cat-file", "blob", match[2]!], GIT_BUFFER);
    return { bytes, link: match[1] === "120000" };
  } catch {
    return null;
  }
}

const sameSide = (a: Side | null, b: Side | null): boolean =>
  a === null || b === null ? a === b : a.link === b.link && a.bytes.equals(b.bytes);

async function rawChanges(ws: TaskWorkspace): Promise<RawChange[]> {
  if (ws.kind === "in-place") return [];
  const candidates = new Set<string>();
  let before: (path: string) => Promise<Side | null>;
  // The task's workspace is the model's: read through the confined layer, links never followed.
  const task = await Workspace.open(ws.path);
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
    // A repository the task made without committing (`git init sub`) is listed as `sub/`: its
    // files are plain files of the task's, as its result's commit takes them (addWorkTree).
    const nested = await uncommittedRepositories(top, untracked);
    const inNested = await Promise.all(nested.map((rel) => listFiles(top, true, rel)));
    for (const path of [...tracked, ...untracked, ...inNested.flat()]) {
      if (path.startsWith(prefix) && !path.endsWith("/")) candidates.add(path.slice(prefix.length));
    }
    before = (path) => baseEntry(top, ws.base, prefix + path);
  } else {
    const baseRoot = await Workspace.open(ws.base);
    for (const path of await listFiles(task, true)) candidates.add(path);
    for (const path of await listFiles(baseRoot, false)) candidates.add(path);
    before = (path) => confinedEntry(baseRoot, path);
  }
  const changes: RawChange[] = [];
  for (const path of [...candidates].sort()) {
    const [was, now] = await Promise.all([before(path), confinedEntry(task, path)]);
    if (sameSide(was, now)) continue;
    changes.push({ path, before: was, after: now });
  }
  return changes;
}

const isBinary = (side: Side | null): boolean => side !== null && !side.link && side.bytes.includes(0);

/** How a side is shown: a file's text, a link as `symlink → TARGET` (never as if it were a file). */
function shown(side: Side | null): string | null {
  if (side === null) return null;
  return side.link ? `symlink → ${side.bytes.toString("utf8")}` : side.bytes.toString("utf8");
}

/**
 * A path in a diff header, quoted as git quotes it when it holds a control character, a quote or a
 * backslash: a file named `README\n+++ fake` must not forge a header line.
 */
export function quotePath(path: string): string {
  const needsQuotes = [...path].some(
    (c) => c.charCodeAt(0) < 0x20 || c === "\x7f" || c === '"' || c === "\\",
  );
  if (!needsQuotes) return path;
  const escaped = [...Buffer.from(path, "utf8")]
    .map((byte) => {
      const named: Record<number, string> = {
        7: "\\a",
        8: "\\b",
        9: "\\t",
        10: "\\n",
        11: "\\v",
        12: "\\f",
        13: "\\r",
        34: '\\"',
        92: "\\\\",
      };
      if (named[byte] !== undefined) return named[byte];
      if (byte < 0x20 || byte === 0x7f) return `\\${byte.toString(8).padStart(3, "0")}`;
      return String.fromCharCode(byte);
    })
    .join("");
  // Bytes above 0x7f were kept one by one: put the UTF-8 sequences back together.
  return `"${Buffer.from(escaped, "latin1").toString("utf8")}"`;
}

/** Line counts and the unified diff of one change (a link shown as a link). */
function describe(change: RawChange): TaskFileChange {
  const status = change.before === null ? "added" : change.after === null ? "deleted" : "modified";
  const before = shown(change.before);
  const after = shown(change.after);
  const links =
    change.before?.link || change.after?.link
      ? {
          links: {
            before: change.before?.link ? change.before.bytes.toString("utf8") : null,
            after: change.after?.link ? change.after.bytes.toString("utf8") : null,
          },
        }
      : {};
  const oldName = change.before === null ? "/dev/null" : quotePath(`a/${change.path}`);
  const newName = change.after === null ? "/dev/null" : quotePath(`b/${change.path}`);
  if (isBinary(change.before) || isBinary(change.after)) {
    return {
      path: change.path,
      status,
      before,
      after,
      ...links,
      added: 0,
      removed: 0,
      patch: `Binary files ${oldName === "/dev/null" ? oldName : oldName} and ${newName} differ\n`,
    };
  }
  const diff = structuredPatch(oldName, newName, before ?? "", after ?? "", undefined, undefined, {
    context: 3,
  });
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
  return {
    path: change.path,
    status,
    before,
    after,
    ...links,
    added,
    removed,
    patch: `${lines.join("\n")}\n`,
  };
}

/**
 * The review's diff of one change (file-diff.ts): a link is said to be one, with its target, never
 * shown as if its target were a one-line file.
 */
export function taskFileDiff(change: TaskFileChange): FileDiff {
  const diff = contentDiff(change.path, change.before, change.after);
  if (change.links === undefined) return diff;
  const side = (target: string | null, text: string | null): string =>
    target !== null ? `symlink → ${target}` : text === null ? "nothing" : "a file";
  return {
    ...diff,
    note: `${side(change.links.before, change.before)} becomes ${side(change.links.after, change.after)}`,
  };
}

/**
 * What `path` holds in the user's workspace now, shown as `TaskFileChange.after` shows it (a link as
 * `symlink → TARGET`), through the confined layer; null when absent or not a file or link. For
 * "already applied" checks.
 */
export async function workspaceEntryText(root: string, path: string): Promise<string | null> {
  try {
    return shown(await confinedEntry(await Workspace.open(root), path));
  } catch {
    return null;
  }
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
  return withScratchDir(scratch, async (dir) => {
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
  });
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
    const ours = await confinedEntry(workspace, change.path);
    const { before: base, after: theirs } = change;
    if ((await workspace.stat(change.path, { final: "entry" }))?.isDirectory()) {
      conflicts.push({
        path: change.path,
        reason: "the workspace has a directory where the task has a file",
      });
      continue;
    }
    if (theirs?.link) {
      // A link is as dangerous as where it points: never one out of the workspace, into .git or at a secret.
      const refused = await workspace.linkRefusal(change.path, theirs.bytes.toString("utf8"));
      if (refused !== undefined) {
        conflicts.push({
          path: change.path,
          reason: `a symlink to ${theirs.bytes.toString("utf8")}: ${refused}; nothing is applied until it is discarded`,
        });
        continue;
      }
    }
    applied.push(change.path);
    if (sameSide(ours, theirs)) continue; // already there
    if (sameSide(ours, base)) {
      writes.push({ path: change.path, content: theirs?.bytes ?? null, link: theirs?.link === true });
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
    } else if (
      theirs.link ||
      ours.link ||
      base.link ||
      isBinary(ours) ||
      isBinary(base) ||
      isBinary(theirs)
    ) {
      conflicts.push({
        path: change.path,
        reason: "changed by the task and in the workspace (binary or link: no merge)",
      });
    } else {
      const merged = await mergeText(scratch, ours.bytes, base.bytes, theirs.bytes);
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
  let side: Side | null;
  if (ws.kind === "worktree") {
    const top = await worktreeTop(ws);
    side = await baseEntry(top, ws.base, (await rootPrefix(ws)) + toPosix(path));
  } else {
    side = await confinedEntry(await Workspace.open(ws.base), path);
  }
  const base = side?.bytes ?? null;
  const link = side?.link === true;
  if (base === null) await taskRoot.remove(path);
  else if (link) await taskRoot.symlink(path, base.toString("utf8"));
  else await taskRoot.writeFile(path, base);
}
