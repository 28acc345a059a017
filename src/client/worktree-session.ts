/**
 * `--worktree` for the terminal clients: a session (`spark`, `spark exec`) that works in a
 * TaskWorkspace of its own. What it leaves behind is said in these words, and `spark exec
 * --worktree` commits its result to the workspace's branch `spark/<id>` (the worktree itself and
 * its index are left as they are: `taskChanges` keeps reading the diff against the base).
 */
import { copyFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { neutralGit } from "../agent/sandbox/neutral-git.js";
import type { TaskFileChange } from "../agent/worktree/task-changes.js";
import type { TaskWorkspace } from "../agent/worktree/task-workspace.js";

const GIT_BUFFER = 256 * 1024 * 1024;
const IDENTITY = {
  GIT_AUTHOR_NAME: "Spark",
  GIT_AUTHOR_EMAIL: "spark@localhost",
  GIT_COMMITTER_NAME: "Spark",
  GIT_COMMITTER_EMAIL: "spark@localhost",
};

const text = (out: Buffer): string => out.toString("utf8").trim();

/**
 * Commits every file of the worktree (untracked ones not ignored included) on top of its branch,
 * through a temporary index (the worktree's own index stays at the base), and moves the branch
 * there. Returns the commit, or undefined when the branch already holds exactly these files or the
 * workspace is not a worktree.
 */
export async function commitTaskWorkspace(ws: TaskWorkspace, message: string): Promise<string | undefined> {
  if (ws.kind !== "worktree" || ws.branch === undefined) return undefined;
  const top = text(await neutralGit(ws.path, ["rev-parse", "--show-toplevel"]));
  const gitDir = text(await neutralGit(top, ["rev-parse", "--path-format=absolute", "--git-dir"]));
  const ref = `refs/heads/${ws.branch}`;
  const parent = text(await neutralGit(top, ["rev-parse", "--verify", `${ref}^{commit}`]));
  const index = join(tmpdir(), `spark-commit-${randomBytes(6).toString("hex")}.index`);
  try {
    // The worktree's index has the stat data of the base's files: only changed files are hashed.
    await copyFile(join(gitDir, "index"), index).catch(() => undefined);
    const env = { GIT_INDEX_FILE: index };
    // Loaded here, not at start: the TUI imports this file for its headers.
    const { addWorkTree } = await import("../agent/worktree/task-workspace.js");
    await addWorkTree(top, env);
    const tree = text(await neutralGit(top, ["write-tree"], GIT_BUFFER, { env }));
    if (text(await neutralGit(top, ["rev-parse", `${parent}^{tree}`])) === tree) return undefined;
    const commit = text(
      await neutralGit(top, ["commit-tree", tree, "-p", parent, "-m", message], GIT_BUFFER, {
        env: IDENTITY,
      }),
    );
    await neutralGit(top, ["update-ref", "-m", "spark: task result", ref, commit, parent]);
    return commit;
  } finally {
    await rm(index, { force: true });
  }
}

/** `N files changed (+A −R)`. */
export function changeSummary(changes: readonly TaskFileChange[]): string {
  const added = changes.reduce((sum, c) => sum + c.added, 0);
  const removed = changes.reduce((sum, c) => sum + c.removed, 0);
  return `${changes.length} file${changes.length === 1 ? "" : "s"} changed (+${added} −${removed})`;
}

/** One line per file: `  M path +A −R` (A added, M modified, D deleted). */
export function changeLines(changes: readonly TaskFileChange[]): string[] {
  const letter = { added: "A", modified: "M", deleted: "D" } as const;
  return changes.map((c) => `  ${letter[c.status]} ${c.path} +${c.added} −${c.removed}`);
}

/** What the session works in, for a header: `worktree spark/ID at PATH` or `copy at PATH`. */
export function describeTaskWorkspace(ws: TaskWorkspace): string {
  if (ws.kind === "worktree") return `worktree ${ws.branch ?? ws.id} at ${ws.path}`;
  if (ws.kind === "copy") return `a copy of the workspace at ${ws.path}`;
  return "the workspace itself";
}

/**
 * A `--worktree` session ends: changes not yet in the user's files are committed to its branch and
 * the worktree is kept (lines say where and how to land them); otherwise (no changes, or all
 * applied already) the worktree and branch are removed.
 */
export async function leaveTaskWorkspace(ws: TaskWorkspace, message: string): Promise<string[]> {
  const { discardTaskWorkspace } = await import("../agent/worktree/task-workspace.js");
  const { taskChanges, workspaceEntryText } = await import("../agent/worktree/task-changes.js");
  const changes = await taskChanges(ws);
  const pending: TaskFileChange[] = [];
  for (const change of changes) {
    // Through the confined layer: a link in the user's files is compared as a link, never followed.
    if ((await workspaceEntryText(ws.root, change.path)) !== change.after) pending.push(change);
  }
  if (pending.length === 0) {
    await discardTaskWorkspace(ws);
    return [
      changes.length === 0
        ? "worktree removed (the session changed no files)"
        : "worktree removed (its changes are applied)",
    ];
  }
  const commit = await commitTaskWorkspace(ws, message);
  if (ws.kind !== "worktree" || !ws.branch) {
    return [`the session's changes (not applied) stay in ${ws.path}: ${changeSummary(pending)}`];
  }
  return [
    `the session's changes (not applied) are on branch ${ws.branch}${commit ? ` (commit ${commit.slice(0, 10)})` : ""}: ${changeSummary(pending)}`,
    `worktree: ${ws.path}`,
    `land them: git diff ${ws.base.slice(0, 10)} ${ws.branch} | git apply · drop them: git worktree remove --force ${ws.path} && git branch -D ${ws.branch}`,
  ];
}
