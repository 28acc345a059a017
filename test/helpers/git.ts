/**
 * Real git for the task-workspace tests: `git` that reads no system or global config (so the
 * machine's settings never change what a test sees), a first commit made the same way everywhere,
 * and a temporary SPARK_HOME (where task worktrees live) for a whole test file, restored after it.
 */
import { execFileSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, before } from "node:test";

/** `git ARGS…` in `cwd` without the system's or the user's config; its stdout. */
export function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", args, {
    cwd,
    encoding: "utf8",
    env: { ...process.env, GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null" },
  });
}

/** Makes `root` a repository on `main` (a committer of its own) whose commit "init" holds all it has. */
export function commitInit(root: string): void {
  git(root, "init", "-q", "-b", "main");
  git(root, "config", "user.email", "user@example.com");
  git(root, "config", "user.name", "User");
  git(root, "add", ".");
  git(root, "commit", "-q", "-m", "init");
}

export interface FileTemps {
  /** Folders removed after the file's tests (its SPARK_HOME among them): push a test's own here. */
  readonly dirs: string[];
  /** The file's SPARK_HOME, once its `before` ran. */
  home: string;
}

/**
 * A fresh SPARK_HOME (`$TMPDIR/PREFIX…`) for the calling test file: set in its `before`, the old
 * value put back in its `after`, which also removes every folder in `dirs`.
 */
export function sparkHomeForFile(prefix: string): FileTemps {
  const temps: FileTemps = { dirs: [], home: "" };
  const savedHome = process.env.SPARK_HOME;
  before(async () => {
    temps.home = await mkdtemp(path.join(os.tmpdir(), prefix));
    temps.dirs.push(temps.home);
    process.env.SPARK_HOME = temps.home;
  });
  after(async () => {
    if (savedHome === undefined) delete process.env.SPARK_HOME;
    else process.env.SPARK_HOME = savedHome;
    await Promise.all(temps.dirs.map((dir) => rm(dir, { recursive: true, force: true })));
  });
  return temps;
}
