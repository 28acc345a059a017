/**
 * Issue 30 defect 9: an untracked nested repository without a commit (`git init newlib` not
 * committed yet) made git refuse the base snapshot of every task worktree (`'newlib/' does not have
 * a commit checked out`, `spark exec --worktree` exited 2), and an agent's `git init sub` made a
 * `--worktree` session's final commit fail. Such a folder is taken as plain files: its `.git` left
 * out, the `.gitignore` files above it honoured. Real git; the CLI end to end with the script engine
 * as the agent.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, realpath, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import {
  createTaskWorkspace,
  discardTaskWorkspace,
  taskWorkspacesFolder,
} from "../src/agent/worktree/task-workspace.js";
import { taskChanges } from "../src/agent/worktree/task-changes.js";
import { commitTaskWorkspace } from "../src/client/worktree-session.js";
import { file, freshDir, jsonLines, runToExit } from "./helpers/cli.js";
import { commitInit, git, sparkHomeForFile } from "./helpers/git.js";

const { dirs } = sparkHomeForFile("spark-nested-home-");

/**
 * A repository (a.txt committed, `*.log` ignored) where the user has run `git init newlib` and
 * written files there without committing, and has one dirty file.
 */
async function repoWithNewlib(root: string): Promise<void> {
  await writeFile(path.join(root, "a.txt"), "one\n");
  await writeFile(path.join(root, ".gitignore"), "*.log\n");
  commitInit(root);
  git(root, "init", "-q", path.join(root, "newlib"));
  await mkdir(path.join(root, "newlib", "src"));
  await writeFile(path.join(root, "newlib", "src", "lib.ts"), "export const lib = 1;\n");
  await writeFile(path.join(root, "newlib", "build.log"), "ignored by the outer .gitignore\n");
  await writeFile(path.join(root, "a.txt"), "one\ndirty\n");
}

test("a task worktree starts with an uncommitted nested repository's files as plain files; the task's own `git init sub` is listed and committed", async () => {
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), "spark-nested-")));
  dirs.push(root);
  await repoWithNewlib(root);
  const ws = await createTaskWorkspace(root, "nested");
  assert.equal(ws.kind, "worktree");
  assert.equal(readFileSync(path.join(ws.path, "a.txt"), "utf8"), "one\ndirty\n");
  assert.equal(
    readFileSync(path.join(ws.path, "newlib", "src", "lib.ts"), "utf8"),
    "export const lib = 1;\n",
  );
  assert.equal(existsSync(path.join(ws.path, "newlib", ".git")), false, "the nested .git stays out");
  assert.equal(existsSync(path.join(ws.path, "newlib", "build.log")), false, "ignored above: left out");
  assert.deepEqual(await taskChanges(ws), []);
  // The user's index and files are as they were.
  assert.equal(git(root, "status", "--porcelain"), " M a.txt\n?? newlib/\n");

  // The agent makes a repository of its own in the worktree and writes in it.
  git(ws.path, "init", "-q", "sub");
  await writeFile(path.join(ws.path, "sub", "s.txt"), "by the task\n");
  assert.deepEqual(
    (await taskChanges(ws)).map((change) => [change.path, change.status]),
    [["sub/s.txt", "added"]],
  );
  const commit = await commitTaskWorkspace(ws, "task result");
  assert.ok(commit);
  const files = git(root, "ls-tree", "-r", "--name-only", "spark/nested").split("\n").filter(Boolean);
  assert.deepEqual(files.sort(), [".gitignore", "a.txt", "newlib/src/lib.ts", "sub/s.txt"]);
  await discardTaskWorkspace(ws);
  assert.equal(existsSync(path.join(taskWorkspacesFolder(root), "nested")), false);
});

test("spark exec --worktree in a repository with an uncommitted nested repository runs, and commits the agent's `git init sub` with its result", async () => {
  const workspace = freshDir("nested-ws-");
  await repoWithNewlib(workspace);
  const command = "git init -q sub && echo 'by the agent' > sub/s.txt && cat newlib/src/lib.ts";
  const steps = file(
    "nested-repo.jsonl",
    [
      { output: [{ type: "function_call", name: "shell", arguments: JSON.stringify({ command }) }] },
      { output: [{ type: "message", text: "Made sub." }] },
    ]
      .map((line) => JSON.stringify(line))
      .join("\n") + "\n",
  );
  const home = freshDir("nested-home-");
  const run = await runToExit(
    [
      "exec",
      "--json",
      "--worktree",
      "-C",
      workspace,
      "--engine",
      "script",
      "--script",
      steps,
      "--sandbox",
      "off",
      "--approval",
      "never",
      "make sub",
    ],
    { SPARK_HOME: home },
  );
  assert.equal(run.code, 0, run.stderr);
  const events = jsonLines<{ type: string; branch?: string; files?: { path: string }[] }>(run.stdout);
  const result = events.find((event) => event.type === "worktree");
  assert.ok(result?.branch, run.stdout);
  assert.deepEqual(
    result.files?.map((f) => f.path),
    ["sub/s.txt"],
  );
  const files = git(workspace, "ls-tree", "-r", "--name-only", result.branch).split("\n").filter(Boolean);
  assert.deepEqual(files.sort(), [".gitignore", "a.txt", "newlib/src/lib.ts", "sub/s.txt"]);
  assert.equal(git(workspace, "show", `${result.branch}:sub/s.txt`), "by the agent\n");
  // The user's own files are untouched.
  assert.equal(existsSync(path.join(workspace, "sub")), false);
});
