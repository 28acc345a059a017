/**
 * Issue 30 defect 6: one instance's start-up prune must not delete another instance's live
 * worktrees. Real git, and two real processes: a child process makes a task workspace (a running
 * variant's, whose `variant-…` id no saved task names) and writes un-applied work in it; this
 * process prunes the same folder as a second `spark app` does at start (keeping only its own saved
 * ids). While the child runs, its workspace stays; once it is killed (`kill -9`, no clean-up), the
 * next prune removes it, with its branch and its owner's mark. A mark whose pid is dead, or whose
 * pid now belongs to another process (a re-used pid), owns nothing.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, readFile, realpath, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  createTaskWorkspace,
  discardTaskWorkspace,
  pruneTaskWorkspaces,
  taskWorkspacesFolder,
} from "../src/agent/worktree/task-workspace.js";
import { commitInit, git, sparkHomeForFile } from "./helpers/git.js";

const REPO_ROOT = fileURLToPath(new URL("..", import.meta.url));
const temps = sparkHomeForFile("spark-owners-home-");
const { dirs } = temps;

async function repo(): Promise<string> {
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), "spark-owners-")));
  dirs.push(root);
  await writeFile(path.join(root, "a.txt"), "one\n");
  commitInit(root);
  return root;
}

/**
 * Another Spark process: makes the workspace `id` of `root`, writes `work.txt` in it (un-applied
 * work), says where, and runs until killed.
 */
async function otherInstance(root: string, id: string) {
  const program = `
    import { writeFile } from "node:fs/promises";
    import { createTaskWorkspace } from ${JSON.stringify(path.join(REPO_ROOT, "src/agent/worktree/task-workspace.ts"))};
    const ws = await createTaskWorkspace(${JSON.stringify(root)}, ${JSON.stringify(id)});
    await writeFile(ws.path + "/work.txt", "un-applied work\\n");
    console.log(JSON.stringify(ws));
    setInterval(() => {}, 60_000);
  `;
  const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", program], {
    cwd: REPO_ROOT,
    env: { ...process.env, SPARK_HOME: temps.home },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const exited = once(child, "exit");
  const [line] = (await Promise.race([
    once(createInterface({ input: child.stdout }), "line"),
    exited.then(() => {
      throw new Error("the other instance exited before making its workspace");
    }),
  ])) as [string];
  const ws = JSON.parse(line) as { path: string; branch: string };
  return { child, exited, ws };
}

test("a running instance's variant worktree survives another instance's prune, and goes once that instance is dead", async () => {
  const root = await repo();
  const id = "variant-0a1b2c3d-1";
  const other = await otherInstance(root, id);
  try {
    assert.ok(existsSync(path.join(other.ws.path, "work.txt")));
    // This instance keeps only its own saved tasks (none): the variant's id is not among them.
    const first = await pruneTaskWorkspaces(root, () => false);
    assert.deepEqual(first.removed, []);
    assert.equal(readFileSync(path.join(other.ws.path, "work.txt"), "utf8"), "un-applied work\n");
    assert.match(git(root, "branch", "--list", `spark/${id}`), new RegExp(id));
  } finally {
    other.child.kill("SIGKILL");
    await other.exited;
  }
  // Its owner is dead: the workspace is stale now, and goes with its branch and mark.
  const second = await pruneTaskWorkspaces(root, () => false);
  assert.deepEqual(second.removed, [id]);
  assert.equal(existsSync(other.ws.path), false);
  assert.equal(git(root, "branch", "--list", `spark/${id}`), "");
  assert.equal(existsSync(path.join(taskWorkspacesFolder(root), `${id}.owner`)), false);
});

test("a mark whose pid is dead or re-used owns nothing; this process's own workspaces follow `keep`", async () => {
  const root = await repo();
  const folder = taskWorkspacesFolder(root);
  const dead = await createTaskWorkspace(root, "dead-owner");
  const reused = await createTaskWorkspace(root, "reused-pid");
  const mine = await createTaskWorkspace(root, "mine");
  // A process that has exited: its pid runs nothing now.
  const gone = spawn(process.execPath, ["-e", ""], { stdio: "ignore" });
  const deadPid = gone.pid!;
  await once(gone, "exit");
  const mark = JSON.parse(await readFile(path.join(folder, "mine.owner"), "utf8")) as {
    pid: number;
    started: string | null;
    host: string;
  };
  assert.equal(mark.pid, process.pid);
  await writeFile(path.join(folder, "dead-owner.owner"), JSON.stringify({ ...mark, pid: deadPid }));
  // This very pid, as if re-used: a process that started at another time is not the owner.
  await writeFile(
    path.join(folder, "reused-pid.owner"),
    JSON.stringify({ ...mark, pid: process.ppid, started: mark.started === null ? null : "1" }),
  );
  const { removed } = await pruneTaskWorkspaces(root, (id) => id === "mine");
  assert.deepEqual(
    [...removed].sort(),
    mark.started === null ? ["dead-owner"] : ["dead-owner", "reused-pid"],
  );
  assert.equal(existsSync(dead.path), false);
  assert.ok(existsSync(mine.path));
  if (mark.started !== null) assert.equal(existsSync(reused.path), false);
  await discardTaskWorkspace(mine);
  assert.equal(existsSync(path.join(folder, "mine.owner")), false);
  await discardTaskWorkspace(reused);
});
