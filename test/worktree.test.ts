/**
 * The task workspace seam (agent/worktree/task-workspace.ts) on real git repositories in temp dirs:
 * a task's worktree starts from HEAD plus the user's uncommitted and untracked (not ignored) files,
 * leaves the user's index, refs and files alone, applies with a 3-way merge that writes nothing on
 * a conflict, is discarded with its branch, and is pruned when stale without touching a user's own
 * worktree or branch; outside git the same round trip runs on a copy.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, readdir, readFile, realpath, rm, symlink, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { test } from "node:test";
import { detectSandbox } from "../src/agent/sandbox/sandbox.js";
import { runCommand } from "../src/agent/sandbox/shell.js";
import {
  createTaskWorkspace,
  discardTaskWorkspace,
  openTaskWorkspace,
  pruneTaskWorkspaces,
  taskWorkspaceBytes,
  taskWorkspacesFolder,
} from "../src/agent/worktree/task-workspace.js";
import { applyTaskWorkspace, restoreTaskFile, taskChanges } from "../src/agent/worktree/task-changes.js";
import { commitInit, git, sparkHomeForFile } from "./helpers/git.js";

const { dirs } = sparkHomeForFile("spark-wt-home-");

/** A repository with one commit (a.txt, keep.txt, .gitignore ignoring `*.log`). */
async function repo(): Promise<string> {
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), "spark-wt-")));
  dirs.push(root);
  await writeFile(path.join(root, "a.txt"), "one\ntwo\nthree\nfour\nfive\nsix\nseven\n");
  await writeFile(path.join(root, "keep.txt"), "kept\n");
  await writeFile(path.join(root, ".gitignore"), "*.log\n");
  commitInit(root);
  return root;
}

const read = (file: string): string => readFileSync(file, "utf8");

test("a task's worktree carries the user's uncommitted and untracked changes, not ignored files, and leaves the user's index and refs alone", async () => {
  const root = await repo();
  await writeFile(path.join(root, "keep.txt"), "kept, edited\n");
  await writeFile(path.join(root, "staged.txt"), "staged\n");
  git(root, "add", "staged.txt");
  await writeFile(path.join(root, "new.txt"), "untracked\n");
  await writeFile(path.join(root, "debug.log"), "ignored\n");
  await rm(path.join(root, "a.txt"));
  const indexBefore = await readFile(path.join(root, ".git", "index"));
  const refsBefore = git(root, "for-each-ref");
  const statusBefore = git(root, "status", "--porcelain");

  const ws = await createTaskWorkspace(root, "task1");
  assert.equal(ws.kind, "worktree");
  assert.equal(ws.branch, "spark/task1");
  assert.equal(ws.root, root);
  assert.ok(ws.path.startsWith(taskWorkspacesFolder(root)));
  assert.equal(read(path.join(ws.path, "keep.txt")), "kept, edited\n");
  assert.equal(read(path.join(ws.path, "staged.txt")), "staged\n");
  assert.equal(read(path.join(ws.path, "new.txt")), "untracked\n");
  assert.equal(existsSync(path.join(ws.path, "debug.log")), false, "ignored files stay out");
  assert.equal(existsSync(path.join(ws.path, "a.txt")), false, "a file the user deleted is not there");
  // The base is a commit on top of HEAD; nothing of the user's changed.
  assert.equal(git(root, "rev-parse", `${ws.base}^`).trim(), git(root, "rev-parse", "HEAD").trim());
  assert.deepEqual(await readFile(path.join(root, ".git", "index")), indexBefore);
  assert.equal(git(root, "status", "--porcelain"), statusBefore);
  const refsAfter = git(root, "for-each-ref");
  assert.equal(refsAfter.replace(/^.*refs\/heads\/spark\/task1\n/m, ""), refsBefore);
  assert.deepEqual(await taskChanges(ws), [], "a fresh task has no changes");
  assert.deepEqual(await openTaskWorkspace(ws), ws);
  assert.ok((await taskWorkspaceBytes(ws)) > 0);

  // `git status` works inside the worktree (its .git file points into the repository).
  assert.equal(git(ws.path, "status", "--porcelain"), "");
  await discardTaskWorkspace(ws);
});

test("apply merges a task's changes into files the user changed meanwhile; a conflict writes nothing and names the file", async () => {
  const root = await repo();
  const ws = await createTaskWorkspace(root, "merge");
  await writeFile(path.join(ws.path, "a.txt"), "one\ntwo\nthree\nfour\nfive\nsix\nseven, by the task\n");
  await writeFile(path.join(ws.path, "added.txt"), "new file\n");
  await rm(path.join(ws.path, "keep.txt"));
  const changes = await taskChanges(ws);
  assert.deepEqual(
    changes.map((change) => [change.path, change.status, change.added, change.removed]),
    [
      ["a.txt", "modified", 1, 1],
      ["added.txt", "added", 1, 0],
      ["keep.txt", "deleted", 0, 1],
    ],
  );
  assert.match(changes[0]!.patch, /^--- a\/a\.txt\n\+\+\+ b\/a\.txt\n@@ /);
  assert.match(changes[0]!.patch, /\n\+seven, by the task\n/);

  // The user edits another part of a.txt meanwhile: a clean 3-way merge.
  await writeFile(path.join(root, "a.txt"), "one, by the user\ntwo\nthree\nfour\nfive\nsix\nseven\n");
  assert.deepEqual(await applyTaskWorkspace(ws), {
    applied: ["a.txt", "added.txt", "keep.txt"],
    conflicts: [],
  });
  assert.equal(
    read(path.join(root, "a.txt")),
    "one, by the user\ntwo\nthree\nfour\nfive\nsix\nseven, by the task\n",
  );
  assert.equal(read(path.join(root, "added.txt")), "new file\n");
  assert.equal(existsSync(path.join(root, "keep.txt")), false);

  // A second task changes the same line as the user: nothing written, the file listed.
  await writeFile(path.join(root, "keep.txt"), "kept\n");
  const other = await createTaskWorkspace(root, "conflict");
  await writeFile(path.join(other.path, "a.txt"), "one, by task two\ntwo\nthree\nfour\nfive\nsix\nseven\n");
  await writeFile(path.join(other.path, "keep.txt"), "kept by task two\n");
  await writeFile(path.join(root, "a.txt"), "one, changed again\ntwo\nthree\nfour\nfive\nsix\nseven\n");
  const result = await applyTaskWorkspace(other);
  assert.deepEqual(result.applied, []);
  assert.deepEqual(
    result.conflicts.map((conflict) => conflict.path),
    ["a.txt"],
  );
  assert.equal(read(path.join(root, "a.txt")), "one, changed again\ntwo\nthree\nfour\nfive\nsix\nseven\n");
  assert.equal(read(path.join(root, "keep.txt")), "kept\n", "no file of a conflicting apply is written");
  // Applying the file that does not conflict alone works.
  assert.deepEqual(await applyTaskWorkspace(other, { paths: ["keep.txt"] }), {
    applied: ["keep.txt"],
    conflicts: [],
  });
  assert.equal(read(path.join(root, "keep.txt")), "kept by task two\n");

  // Per-file discard: the task's file goes back to its base.
  await restoreTaskFile(other, "keep.txt");
  assert.equal(read(path.join(other.path, "keep.txt")), "kept\n");
  assert.deepEqual(
    (await taskChanges(other)).map((change) => change.path),
    ["a.txt"],
  );
  await discardTaskWorkspace(ws);
  await discardTaskWorkspace(other);
});

test("apply never writes a protected path (.vscode, .git…) nor through a symlink that leads out of the workspace", async () => {
  const root = await repo();
  await mkdir(path.join(root, "data"));
  await writeFile(path.join(root, "data", "kept.txt"), "kept\n");
  git(root, "add", ".");
  git(root, "commit", "-q", "-m", "data");
  const ws = await createTaskWorkspace(root, "guarded");
  await mkdir(path.join(ws.path, ".vscode"));
  await writeFile(path.join(ws.path, ".vscode", "tasks.json"), '{"runOn": "folderOpen"}\n');
  await writeFile(path.join(ws.path, "data", "new.txt"), "new\n");
  await writeFile(path.join(ws.path, "fine.txt"), "fine\n");
  // Meanwhile data/ became a symlink to a directory outside the workspace.
  const outside = await mkdtemp(path.join(os.tmpdir(), "spark-wt-outside-"));
  dirs.push(outside);
  await rm(path.join(root, "data"), { recursive: true });
  await symlink(outside, path.join(root, "data"));

  const result = await applyTaskWorkspace(ws);
  assert.deepEqual(result.applied, []);
  assert.deepEqual(
    result.conflicts.map((c) => c.path),
    [".vscode/tasks.json", "data/new.txt"],
  );
  assert.match(result.conflicts[0]!.reason, /protected/);
  assert.match(result.conflicts[1]!.reason, /outside the workspace/);
  assert.equal(existsSync(path.join(root, ".vscode")), false);
  assert.equal(existsSync(path.join(root, "fine.txt")), false, "nothing of a refused apply is written");
  assert.deepEqual(await readdir(outside), []);
  assert.deepEqual(await applyTaskWorkspace(ws, { paths: ["fine.txt"] }), {
    applied: ["fine.txt"],
    conflicts: [],
  });
  // Per-file discard keeps to the task's workspace too, and never touches its .git.
  await assert.rejects(restoreTaskFile(ws, ".git"), { code: "invalid_argument" });
  await assert.rejects(restoreTaskFile(ws, "../escape.txt"), { code: "invalid_argument" });
  assert.match(readFileSync(path.join(ws.path, ".git"), "utf8"), /^gitdir: /);
  await discardTaskWorkspace(ws);
});

test("six tasks created and discarded at once on one repository all succeed (git's worktree bookkeeping is serialised)", async () => {
  const root = await repo();
  await writeFile(path.join(root, "a.txt"), "uncommitted\n");
  const ids = ["par-1", "par-2", "par-3", "par-4", "par-5", "par-6"];
  const made = await Promise.all(ids.map((id) => createTaskWorkspace(root, id)));
  for (const ws of made) {
    assert.equal(ws.kind, "worktree");
    assert.equal(read(path.join(ws.path, "a.txt")), "uncommitted\n");
  }
  assert.equal(git(root, "worktree", "list").trim().split("\n").length, 1 + ids.length);
  await Promise.all(made.map((ws) => discardTaskWorkspace(ws)));
  assert.equal(git(root, "worktree", "list").trim().split("\n").length, 1);
  assert.equal(git(root, "branch", "--list", "spark/*"), "");
});

test("discard removes the worktree and its branch", async () => {
  const root = await repo();
  const ws = await createTaskWorkspace(root, "gone");
  await writeFile(path.join(ws.path, "a.txt"), "changed\n");
  await discardTaskWorkspace(ws);
  assert.equal(existsSync(ws.path), false);
  assert.equal(git(root, "branch", "--list", "spark/gone"), "");
  assert.doesNotMatch(git(root, "worktree", "list"), /gone/);
  assert.equal(await openTaskWorkspace(ws), undefined);
  assert.equal(read(path.join(root, "a.txt")), "one\ntwo\nthree\nfour\nfive\nsix\nseven\n");
});

test("prune removes Spark's stale worktrees, keeps live ones and never touches a user's own worktree or branch", async () => {
  const root = await repo();
  const live = await createTaskWorkspace(root, "live");
  const stale = await createTaskWorkspace(root, "stale");
  // A stale one whose directory was already removed by hand.
  const vanished = await createTaskWorkspace(root, "vanished");
  await rm(vanished.path, { recursive: true, force: true });
  // The user's own worktree and a branch of theirs named like Spark's.
  const userTree = path.join(path.dirname(root), `${path.basename(root)}-user-tree`);
  dirs.push(userTree);
  git(root, "worktree", "add", "-q", "-b", "feature", userTree);
  git(root, "branch", "spark/mine");
  // Junk a crash could leave in Spark's folder.
  await mkdir(path.join(taskWorkspacesFolder(root), "half-made"), { recursive: true });
  await writeFile(path.join(taskWorkspacesFolder(root), "cut-short.index-0123abcd"), "");

  const { removed } = await pruneTaskWorkspaces(root, (id) => id === "live");
  assert.deepEqual([...removed].sort(), ["cut-short", "half-made", "stale", "vanished"]);
  assert.equal(existsSync(path.join(taskWorkspacesFolder(root), "cut-short.index-0123abcd")), false);
  assert.ok(existsSync(live.path));
  assert.equal(existsSync(stale.path), false);
  assert.equal(existsSync(path.join(taskWorkspacesFolder(root), "half-made")), false);
  const branches = git(root, "branch", "--list", "--format=%(refname:short)")
    .split("\n")
    .filter(Boolean)
    .sort();
  assert.deepEqual(branches, ["feature", "main", "spark/live", "spark/mine"]);
  assert.ok(existsSync(userTree));
  assert.match(git(root, "worktree", "list"), /user-tree/);
  assert.doesNotMatch(git(root, "worktree", "list"), /stale|vanished/);
  await discardTaskWorkspace(live);
});

test("a workspace below the repository's top works in the same place of the worktree", async () => {
  const top = await repo();
  await mkdir(path.join(top, "sub"));
  await writeFile(path.join(top, "sub", "s.txt"), "sub\n");
  git(top, "add", ".");
  git(top, "commit", "-q", "-m", "sub");
  const root = path.join(top, "sub");
  const ws = await createTaskWorkspace(root, "subdir");
  assert.equal(path.basename(ws.path), "sub");
  assert.equal(read(path.join(ws.path, "s.txt")), "sub\n");
  await writeFile(path.join(ws.path, "s.txt"), "sub, changed\n");
  assert.deepEqual(
    (await taskChanges(ws)).map((change) => change.path),
    ["s.txt"],
  );
  assert.deepEqual((await applyTaskWorkspace(ws)).applied, ["s.txt"]);
  assert.equal(read(path.join(root, "s.txt")), "sub, changed\n");
  await discardTaskWorkspace(ws);
  assert.equal(existsSync(path.join(taskWorkspacesFolder(root), "subdir")), false);
});

test("outside git a task works on a copy honouring .gitignore, with a base snapshot, round trip", async () => {
  const root = await realpath(await mkdtemp(path.join(os.tmpdir(), "spark-wt-plain-")));
  dirs.push(root);
  await writeFile(path.join(root, "a.txt"), "one\ntwo\nthree\nfour\nfive\n");
  await writeFile(path.join(root, ".gitignore"), "build/\n");
  await mkdir(path.join(root, "build"));
  await writeFile(path.join(root, "build", "out.js"), "built\n");
  await mkdir(path.join(root, "src"));
  await writeFile(path.join(root, "src", ".gitignore"), "*.tmp\n");
  await writeFile(path.join(root, "src", "x.ts"), "x\n");
  await writeFile(path.join(root, "src", "y.tmp"), "tmp\n");

  const ws = await createTaskWorkspace(root, "copy1");
  assert.equal(ws.kind, "copy");
  assert.notEqual(ws.path, root);
  assert.equal(read(path.join(ws.path, "src", "x.ts")), "x\n");
  assert.equal(existsSync(path.join(ws.path, "build")), false);
  assert.equal(existsSync(path.join(ws.path, "src", "y.tmp")), false);
  assert.deepEqual(await taskChanges(ws), []);

  await writeFile(path.join(ws.path, "a.txt"), "one\ntwo\nthree\nfour\nfive, by the task\n");
  await writeFile(path.join(ws.path, "src", "z.ts"), "z\n");
  await writeFile(path.join(root, "a.txt"), "one, by the user\ntwo\nthree\nfour\nfive\n");
  assert.deepEqual(
    (await taskChanges(ws)).map((change) => [change.path, change.status]),
    [
      ["a.txt", "modified"],
      ["src/z.ts", "added"],
    ],
  );
  assert.deepEqual(await applyTaskWorkspace(ws), { applied: ["a.txt", "src/z.ts"], conflicts: [] });
  assert.equal(read(path.join(root, "a.txt")), "one, by the user\ntwo\nthree\nfour\nfive, by the task\n");
  assert.equal(read(path.join(root, "src", "z.ts")), "z\n");
  assert.deepEqual(await openTaskWorkspace(ws), ws);

  await discardTaskWorkspace(ws);
  assert.equal(existsSync(ws.path), false);
  assert.equal(existsSync(ws.base), false);
  assert.equal(await openTaskWorkspace(ws), undefined);

  const inPlace = await createTaskWorkspace(root, "here", { mode: "in-place" });
  assert.deepEqual(inPlace, { id: "here", kind: "in-place", root, path: root, base: "" });
});

test("a bad id is refused with a code", async () => {
  const root = await repo();
  await assert.rejects(createTaskWorkspace(root, "../escape"), { code: "invalid_argument" });
  await assert.rejects(createTaskWorkspace(root, ""), { code: "invalid_argument" });
});

test("inside a task's worktree a sandboxed command can run git status and git diff, and cannot write .git", async (t) => {
  const sandbox = await detectSandbox();
  if (sandbox.kind === "none") {
    t.skip(`no usable bubblewrap: ${sandbox.reason}`);
    return;
  }
  // The repository and the worktree both lie under /tmp, which the sandbox replaces with its own.
  const root = await repo();
  const ws = await createTaskWorkspace(root, "sandboxed");
  await writeFile(path.join(ws.path, "a.txt"), "changed in the task\n");
  const run = (command: string) =>
    runCommand(["bash", "-c", command], { workspaceRoot: ws.path, cwd: ws.path, sandbox, timeoutMs: 60_000 });
  const status = await run("git status --porcelain && git diff --stat");
  assert.equal(status.exitCode, 0, status.output);
  assert.match(status.output, / M a\.txt/);
  assert.match(status.output, /a\.txt \| /);
  const commonDir = path.join(root, ".git");
  const write = await run(
    `echo x > .git; echo y > ${JSON.stringify(path.join(commonDir, "planted"))}; git config core.fsmonitor evil`,
  );
  assert.notEqual(write.exitCode, 0);
  assert.match(read(path.join(ws.path, ".git")), /^gitdir: /);
  assert.equal(existsSync(path.join(commonDir, "planted")), false);
  assert.doesNotMatch(git(root, "config", "--list", "--local"), /fsmonitor/);
  await discardTaskWorkspace(ws);
});

test("links in a task's worktree: shown as links, Apply refuses those out of the workspace or into .git and lands one inside as a link; a newline in a name forges no header (issue 30 defect 5)", async () => {
  const root = await repo();
  const ws = await createTaskWorkspace(root, "links");
  // What a prompt-injected task leaves in its worktree.
  await symlink("/root/.ssh/id_rsa", path.join(ws.path, "notes.md"));
  await symlink(".git/hooks/post-checkout", path.join(ws.path, "build.sh"));
  await symlink("/", path.join(ws.path, "assets"));
  await symlink("keep.txt", path.join(ws.path, "keep-link.txt"));
  await writeFile(path.join(ws.path, "README\n+++ fake"), "forged\n");
  const changes = await taskChanges(ws);
  const byPath = new Map(changes.map((change) => [change.path, change]));
  const notes = byPath.get("notes.md")!;
  assert.deepEqual(notes.links, { before: null, after: "/root/.ssh/id_rsa" });
  assert.equal(notes.after, "symlink → /root/.ssh/id_rsa", "a link is shown as a link, not as a text file");
  assert.match(notes.patch, /\n\+symlink → \/root\/\.ssh\/id_rsa/);
  const { taskFileDiff } = await import("../src/agent/worktree/task-changes.js");
  assert.equal(taskFileDiff(notes).note, "nothing becomes symlink → /root/.ssh/id_rsa");
  const forged = byPath.get("README\n+++ fake")!;
  assert.match(forged.patch, /^--- \/dev\/null\n\+\+\+ "b\/README\\n\+\+\+ fake"\n@@ /);
  assert.ok(!forged.patch.split("\n").includes("+++ fake"), "no forged header line");

  // Apply of everything: the three links are conflicts, nothing is written.
  const result = await applyTaskWorkspace(ws);
  assert.deepEqual(result.applied, []);
  assert.deepEqual(result.conflicts.map((c) => c.path).sort(), ["assets", "build.sh", "notes.md"]);
  assert.match(result.conflicts.find((c) => c.path === "build.sh")!.reason, /\.git/);
  assert.match(result.conflicts.find((c) => c.path === "notes.md")!.reason, /outside/);
  for (const name of ["notes.md", "build.sh", "assets", "keep-link.txt"])
    assert.equal(existsSync(path.join(root, name)), false, `${name} did not land`);
  // The link inside the workspace (and the oddly named file) land, the link as a link.
  const fine = await applyTaskWorkspace(ws, { paths: ["keep-link.txt", "README\n+++ fake"] });
  assert.deepEqual(fine.conflicts, []);
  const { readlinkSync } = await import("node:fs");
  assert.equal(readlinkSync(path.join(root, "keep-link.txt")), "keep.txt");
  assert.equal(read(path.join(root, "README\n+++ fake")), "forged\n");
  await discardTaskWorkspace(ws);
});
