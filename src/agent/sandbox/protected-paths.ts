/**
 * Places inside the workspace whose contents run code later, outside the sandbox, without the user
 * running anything from the project: writing there is how an agent leaves its box. Patches to them
 * always need the user's approval (approval.ts `decidePatch`, enforced again by `applyPatch`), and
 * the sandbox re-binds the existing ones read-only over the writable workspace (sandbox.ts).
 *
 * The list, matched against every component of a path (case-insensitively, for case-insensitive
 * file systems):
 * - `.git`, a directory or a file (`gitdir: …` of a worktree or submodule), at any depth: git runs
 *   what its config names at the next git command the user types (core.fsmonitor, core.hooksPath,
 *   diff and merge drivers, textconv, filters, pagers, aliases), and hooks on commit, checkout,
 *   merge…; none of it is tracked or shown in a diff. A `.git` file could also be repointed at a
 *   gitdir the agent wrote. Where a `.git` file points inside the workspace, that gitdir is
 *   protected too.
 * - `.spark` and `.codex`: coding agents' own project settings, which can widen what an agent may
 *   do or name programs to start (MCP servers); an agent must not grant itself more (Codex protects
 *   `.codex` the same way).
 * - `.vscode`: editors run what it names as soon as the folder is opened (tasks with
 *   `runOn: folderOpen`, interpreter, formatter and terminal paths in settings.json, and agent
 *   settings such as auto-approval of tools).
 *
 * Not on the list, deliberately: `.gitmodules` (git refuses `update = !command` from it) and
 * `.gitattributes` (the drivers it names must be defined in the protected config), `.envrc`
 * (direnv runs it only after `direnv allow`, which a change revokes), and build files, scripts and
 * hooks tracked in the project (`package.json`, `Makefile`, `.husky/`): changing those is the
 * agent's job, they run only when the user runs the project, and they show up in the diff.
 *
 * Limits: the sandbox can only re-bind what exists when a command starts; the names missing at the
 * workspace root are covered by empty read-only placeholders (sandbox.ts), but a command that creates
 * a new nested `.git` (`git -C sub init`) can write into it in that same command (git run in that
 * directory later reads it; Spark's own git commands neutralise configuration, change-record.ts);
 * nested `.git`s are found by a
 * bounded breadth-first scan (`PROTECTED_SCAN_MAX_DIRS` directories, `node_modules` skipped); and a
 * `.git` that is a symlink cannot be pinned (its target is protected when it is inside the
 * workspace). Patches check every path they write at any depth, after resolving symlinks.
 */
import path from "node:path";
import { ConfinedRoot } from "../fs/confined.js";
import { isProtectedName } from "../fs/protected-names.js";

export { PROTECTED_NAMES } from "../fs/protected-names.js";

/** Directories the sandbox's scan for nested protected paths visits at most, per command. */
export const PROTECTED_SCAN_MAX_DIRS = 4096;

/** Directories never scanned: package trees that do not hold repositories. */
const SCAN_SKIP = new Set(["node_modules"]);

function isInside(root: string, candidate: string): boolean {
  const rel = path.relative(root, candidate);
  return rel === "" || (rel !== ".." && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
}

/**
 * The protected directory or file that `absPath` (a real path) is or lies in, relative to the
 * workspace root and posix-style (e.g. ".git" for ".git/hooks/pre-commit"), or undefined.
 */
export function protectedPart(workspaceRoot: string, absPath: string): string | undefined {
  if (!isInside(workspaceRoot, absPath)) return undefined;
  const parts = path.relative(workspaceRoot, absPath).split(path.sep);
  const index = parts.findIndex(isProtectedName);
  return index < 0 ? undefined : parts.slice(0, index + 1).join("/");
}

/**
 * Where a `.git` file (`gitdir: PATH`) points when that is inside the workspace (its real path), or
 * undefined. Read through the confined layer: a `.git` FIFO is refused at once, never waited on.
 */
async function gitdirOf(root: ConfinedRoot, gitFile: string): Promise<string | undefined> {
  try {
    const text = (await root.readFile(gitFile, { final: "entry", maxBytes: 64 * 1024 })).toString("utf8");
    const match = /^gitdir:\s*(.+?)\s*$/m.exec(text);
    if (!match) return undefined;
    const target = path.resolve(path.dirname(root.absolute(gitFile)), match[1]!);
    if (!isInside(root.root, target)) return undefined;
    return (await root.locate(target)).abs;
  } catch {
    return undefined;
  }
}

/**
 * The existing protected paths of the workspace, as real paths inside it, for the sandbox to re-bind
 * read-only: every protected name found by a breadth-first scan (not following symlinked
 * directories, not descending into protected directories or `node_modules`, at most
 * `PROTECTED_SCAN_MAX_DIRS` directories), symlinked ones by their target when it is inside the
 * workspace, and the gitdirs that `.git` files point to inside the workspace. Outer paths come
 * before the paths inside them; never throws. The scan goes through the confined layer (a directory
 * swapped for a link is not followed, a `.git` FIFO not read).
 */
export async function findProtectedPaths(workspaceRoot: string): Promise<string[]> {
  let root: ConfinedRoot;
  try {
    root = await ConfinedRoot.open(workspaceRoot, { home: "" });
  } catch {
    return [];
  }
  const found = new Set<string>();
  const add = (abs: string): void => {
    if (isInside(root.root, abs) && abs !== root.root) found.add(abs);
  };
  let level = [""];
  let visited = 0;
  while (level.length > 0 && visited < PROTECTED_SCAN_MAX_DIRS) {
    const dirs = level.slice(0, PROTECTED_SCAN_MAX_DIRS - visited);
    visited += dirs.length;
    const next: string[] = [];
    await Promise.all(
      dirs.map(async (dir) => {
        let entries;
        try {
          entries = await root.readdir(dir === "" ? "." : dir);
        } catch {
          return;
        }
        for (const entry of entries) {
          if (isProtectedName(entry.name)) {
            if (entry.kind === "symlink") {
              const target = await root.locate(entry.rel).catch(() => undefined);
              if (target !== undefined && target.kind !== "absent") add(target.abs);
            } else {
              add(root.absolute(entry.rel));
            }
            if (entry.name.toLowerCase() === ".git" && entry.kind === "file") {
              const gitdir = await gitdirOf(root, entry.rel);
              if (gitdir !== undefined) add(gitdir);
            }
          } else if (entry.kind === "directory" && !SCAN_SKIP.has(entry.name)) {
            next.push(entry.rel);
          }
        }
      }),
    );
    level = next.sort();
  }
  // A protected path inside another one is covered by it.
  const sorted = [...found].sort();
  return sorted.filter((p) => !sorted.some((outer) => outer !== p && isInside(outer, p)));
}
