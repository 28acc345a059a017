/**
 * Checkpoints (src/agent/checkpoints): a turn's file writes and a command's changes are recorded
 * before they happen; undo puts the exact bytes back (binary included, deleted files re-created,
 * created ones removed) and redo takes the undo back, in a git work tree (private refs, the user's
 * branches, index and HEAD untouched) and outside git (Spark's folder under SPARK_HOME).
 */
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, readFileSync, statSync } from "node:fs";
import { chmod, mkdtemp, rm, unlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, describe, it } from "node:test";
import { Checkpoints, CheckpointError, describeRestore } from "../src/agent/checkpoints/checkpoints.js";
import { writeFileAtomic } from "../src/agent/fs/spark-data.js";
import { workspaceFixture } from "./helpers/workspace.js";

const home = await mkdtemp(path.join(tmpdir(), "spark-checkpoints-home-"));
after(() => rm(home, { recursive: true, force: true }));

const BINARY = Buffer.from([0, 1, 2, 255, 254, 0, 10, 13, 10, 0x80]);

function git(root: string, ...args: string[]): string {
  return execFileSync("git", ["-C", root, ...args], {
    encoding: "utf8",
    env: {
      ...process.env,
      GIT_AUTHOR_NAME: "t",
      GIT_AUTHOR_EMAIL: "t@t",
      GIT_COMMITTER_NAME: "t",
      GIT_COMMITTER_EMAIL: "t@t",
    },
  });
}

function sh(root: string, script: string): void {
  execFileSync("bash", ["-c", script], { cwd: root });
}

const bytes = (root: string, rel: string): Buffer => readFileSync(path.join(root, rel));

/**
 * Turn 1: a patch-like write of a.txt, a new file, and a command that deletes bin.dat, rewrites
 * run.sh and creates out.log. Turn 2: another write of a.txt.
 */
async function runTwoTurns(checkpoints: Checkpoints, root: string): Promise<void> {
  checkpoints.beginTurn();
  await checkpoints.beforeWrite(["a.txt", "new/created.txt"]);
  await writeFileAtomic(path.join(root, "a.txt"), "a changed by turn 1\n");
  await writeFileAtomic(path.join(root, "new/created.txt"), "made by turn 1\n");
  await checkpoints.beforeCommand();
  sh(root, "rm bin.dat && printf 'echo two\\n' > run.sh && echo log > out.log");
  await checkpoints.afterCommand();
  const first = await checkpoints.endTurn();
  assert.deepEqual([...(first?.files.keys() ?? [])].sort(), [
    "a.txt",
    "bin.dat",
    "new/created.txt",
    "out.log",
    "run.sh",
  ]);

  checkpoints.beginTurn();
  await checkpoints.beforeWrite(["a.txt"]);
  await writeFileAtomic(path.join(root, "a.txt"), "a changed by turn 2\n");
  // A command that changes nothing is no part of the checkpoint.
  await checkpoints.beforeCommand();
  sh(root, "cat a.txt > /dev/null");
  await checkpoints.afterCommand();
  const second = await checkpoints.endTurn();
  assert.deepEqual([...(second?.files.keys() ?? [])], ["a.txt"]);

  // A turn that touched nothing in the end leaves no checkpoint.
  checkpoints.beginTurn();
  await checkpoints.beforeWrite(["a.txt"]);
  assert.equal(await checkpoints.endTurn(), undefined);
}

async function checkUndoRedo(checkpoints: Checkpoints, root: string): Promise<void> {
  const original = { a: bytes(root, "a.txt"), bin: bytes(root, "bin.dat"), run: bytes(root, "run.sh") };
  const runMode = statSync(path.join(root, "run.sh")).mode & 0o777;
  await runTwoTurns(checkpoints, root);

  // Undo the last turn: a.txt as turn 1 left it.
  const undoLast = await checkpoints.undo();
  assert.deepEqual(undoLast.turns, [2]);
  assert.equal(describeRestore(undoLast), "restored a.txt");
  assert.equal(bytes(root, "a.txt").toString(), "a changed by turn 1\n");

  // Redo it, then undo back to before turn 1.
  const redo = await checkpoints.redo();
  assert.deepEqual(redo.turns, [2]);
  assert.equal(bytes(root, "a.txt").toString(), "a changed by turn 2\n");
  const undoAll = await checkpoints.undo(1);
  assert.deepEqual(undoAll.turns, [1, 2]);
  assert.equal(
    describeRestore(undoAll),
    "restored a.txt, run.sh; re-created bin.dat; removed new/created.txt, out.log",
  );
  assert.deepEqual(bytes(root, "a.txt"), original.a);
  assert.deepEqual(
    bytes(root, "bin.dat"),
    original.bin,
    "the binary file deleted by a command is back, byte for byte",
  );
  assert.deepEqual(bytes(root, "run.sh"), original.run);
  assert.equal(statSync(path.join(root, "run.sh")).mode & 0o777, runMode, "its mode too");
  assert.equal(existsSync(path.join(root, "new/created.txt")), false);
  assert.equal(existsSync(path.join(root, "out.log")), false);
  await assert.rejects(checkpoints.undo(), (error: unknown) => {
    assert.ok(error instanceof CheckpointError);
    assert.equal(error.code, "nothing_to_undo");
    return true;
  });

  // Redo: everything as the two turns left it.
  const redoAll = await checkpoints.redo();
  assert.deepEqual(redoAll.turns, [1, 2]);
  assert.equal(bytes(root, "a.txt").toString(), "a changed by turn 2\n");
  assert.equal(existsSync(path.join(root, "bin.dat")), false);
  assert.equal(bytes(root, "out.log").toString(), "log\n");
  assert.equal(bytes(root, "new/created.txt").toString(), "made by turn 1\n");
  await assert.rejects(checkpoints.redo(), { code: "nothing_to_redo" });
}

describe("checkpoints", () => {
  it("undo and redo restore exact bytes outside git (Spark's folder)", async () => {
    const { root, ws } = await workspaceFixture("spark-cp-plain-", {
      "a.txt": "original a\r\nno newline at end",
      "bin.dat": BINARY,
      "run.sh": "echo one\n",
    });
    await chmod(path.join(root, "run.sh"), 0o755);
    const checkpoints = await Checkpoints.open(ws, "plain-session", home);
    assert.equal(checkpoints.kind, "folder");
    await checkUndoRedo(checkpoints, root);
    const dir = path.join(home, "checkpoints", "plain-session");
    assert.ok(existsSync(path.join(dir, "1.json")) && existsSync(path.join(dir, "2.json")));
    const manifest = JSON.parse(readFileSync(path.join(dir, "1.json"), "utf8")) as {
      files: Record<string, { kind: string }>;
    };
    assert.equal(manifest.files["new/created.txt"]?.kind, "absent");
    const resumed = await Checkpoints.open(ws, "plain-session", home);
    assert.equal(
      describeRestore(await resumed.undo(1)),
      "restored a.txt, run.sh; re-created bin.dat; removed new/created.txt, out.log",
    );
    assert.deepEqual(bytes(root, "bin.dat"), BINARY);
  });

  it("undo and redo restore exact bytes in git, through private refs only", async () => {
    const { root, ws } = await workspaceFixture("spark-cp-git-", {
      "a.txt": "original a\r\nno newline at end",
      "bin.dat": BINARY,
      "run.sh": "echo one\n",
      "staged.txt": "committed\n",
      ".gitignore": "ignored/\n",
    });
    await chmod(path.join(root, "run.sh"), 0o755);
    git(root, "init", "-q", "-b", "main");
    git(root, "add", "-A");
    git(root, "commit", "-q", "-m", "init");
    // The user's own state: a staged edit, an unstaged one, a branch, an ignored file.
    await writeFile(path.join(root, "staged.txt"), "staged by the user\n");
    git(root, "add", "staged.txt");
    await writeFile(path.join(root, "a.txt"), "user's unstaged a\n");
    git(root, "branch", "feature");
    await writeFile(path.join(root, ".gitignore"), "ignored/\n");
    const state = (): string[] => [
      git(root, "rev-parse", "HEAD"),
      git(root, "symbolic-ref", "HEAD"),
      git(root, "for-each-ref", "refs/heads", "refs/tags"),
      git(root, "ls-files", "-s"),
      git(root, "stash", "list"),
    ];
    const userState = state();

    const checkpoints = await Checkpoints.open(ws, "git-session", home);
    assert.equal(checkpoints.kind, "git");
    await checkUndoRedo(checkpoints, root);
    assert.deepEqual(state(), userState, "HEAD, branches and the index are as the user left them");
    assert.equal(
      existsSync(path.join(home, "checkpoints", "git-session")),
      false,
      "nothing in Spark's folder",
    );

    // Each turn is a commit under refs/spark/checkpoints/TURN of the session's own repository,
    // holding the earlier contents; the user's repository has no ref of Spark's.
    const store = (...args: string[]): string => git(root, "--git-dir", checkpoints.location, ...args);
    assert.ok(checkpoints.location.startsWith(home), "the session's repository is in SPARK_HOME");
    assert.equal(git(root, "for-each-ref", "refs/spark/"), "");
    const refs = store("for-each-ref", "--format=%(refname)", "refs/spark/").trim().split("\n");
    assert.deepEqual(refs, ["refs/spark/checkpoints/1", "refs/spark/checkpoints/2"]);
    assert.equal(store("show", "refs/spark/checkpoints/1:a.txt"), "user's unstaged a\n");
    assert.equal(store("show", "refs/spark/checkpoints/2:a.txt"), "a changed by turn 1\n");
    const manifest = store("log", "-1", "--format=%B", "refs/spark/checkpoints/1");
    assert.match(manifest, /"new\/created.txt": \{\s*"kind": "absent"/);
    // The same session opened again (resumed, an app restart) can undo its saved turns, and numbers on.
    const resumed = await Checkpoints.open(ws, "git-session", home);
    assert.deepEqual(
      resumed.checkpoints.map((c) => c.turn),
      [1, 2],
    );
    assert.equal(describeRestore(await resumed.undo()), "restored a.txt");
    assert.equal(bytes(root, "a.txt").toString(), "a changed by turn 1\n");
    resumed.beginTurn();
    assert.equal(resumed.turn, 3);
    await resumed.endTurn();
    // Cleared (its task deleted, its worktree discarded): the refs go, nothing is left to undo.
    await resumed.clear();
    assert.equal(store("for-each-ref", "refs/spark/"), "");
    await assert.rejects(resumed.undo(), { code: "nothing_to_undo" });
  });

  it("the git store is capped, oldest first; the user's .git does not grow; /undo of a dropped turn says so (issue 30 defect 7)", async () => {
    const MiB = 1024 * 1024;
    const { root, ws } = await workspaceFixture("spark-cp-cap-", { "keep.txt": "kept\n" });
    git(root, "init", "-q", "-b", "main");
    git(root, "add", "-A");
    git(root, "commit", "-q", "-m", "init");
    const userObjects = (): string => git(root, "count-objects", "-v");
    const before = userObjects();
    // A cap of 12 MiB (512 MiB in use) and turns that each rewrite two 2 MiB files.
    const checkpoints = await Checkpoints.open(ws, "cap-session", home, { maxStoreBytes: 12 * MiB });
    // Incompressible, as build outputs and media are.
    const noise = (): Buffer => randomBytes(2 * MiB);
    for (let turn = 1; turn <= 8; turn++) {
      checkpoints.beginTurn();
      await checkpoints.beforeCommand();
      await writeFile(path.join(root, "one.bin"), noise());
      await writeFile(path.join(root, "two.bin"), noise());
      await checkpoints.afterCommand();
      await checkpoints.endTurn();
    }
    const repoBytes = (): number => {
      const out = git(root, "--git-dir", checkpoints.location, "count-objects", "-v");
      const kib = (name: string): number => Number(new RegExp(`^${name}: (\\d+)$`, "m").exec(out)?.[1] ?? 0);
      return (kib("size") + kib("size-pack")) * 1024;
    };
    assert.ok(repoBytes() <= 12 * MiB, `the session's store keeps within its cap (${repoBytes()} bytes)`);
    assert.equal(userObjects(), before, "the user's .git did not grow");
    const kept = checkpoints.checkpoints.map((c) => c.turn);
    assert.ok(kept.length < 8 && kept.at(-1) === 8, `the oldest went first (kept ${kept.join(", ")})`);
    await assert.rejects(checkpoints.undo(1), (error: Error & { code?: string }) => {
      assert.equal(error.code, "nothing_to_undo");
      assert.match(error.message, /turn 1 can no longer be undone: this session keeps at most 12 MiB/);
      assert.match(error.message, new RegExp(`the oldest turn that can be undone is ${kept[0]}`));
      return true;
    });
    // The kept turns still undo, exactly.
    const last = await checkpoints.undo();
    assert.deepEqual(last.turns, [8]);
    // After a restart the session still knows which turns went.
    const resumed = await Checkpoints.open(ws, "cap-session", home, { maxStoreBytes: 12 * MiB });
    await assert.rejects(resumed.undo(1), /can no longer be undone/);
  });

  it("a path that now leads outside the workspace is skipped and said so; the others are restored", async () => {
    const { root, ws, outside } = await workspaceFixture("spark-cp-escape-", {
      "dir/inner.txt": "inner\n",
      "top.txt": "top\n",
    });
    const checkpoints = await Checkpoints.open(ws, "escape-session", home);
    checkpoints.beginTurn();
    await checkpoints.beforeCommand();
    // The command swaps the folder for a symlink to a folder outside, and edits top.txt.
    sh(root, `rm -r dir && ln -s ${JSON.stringify(outside)} dir && echo changed > top.txt`);
    await checkpoints.afterCommand();
    await checkpoints.endTurn();
    const undo = await checkpoints.undo();
    assert.equal(undo.files.find((f) => f.path === "top.txt")?.action, "restored");
    const skipped = undo.files.find((f) => f.path === "dir/inner.txt");
    assert.equal(skipped?.action, "skipped");
    assert.match(skipped?.reason ?? "", /outside the workspace/);
    assert.equal(existsSync(path.join(outside, "inner.txt")), false, "nothing written outside");
    assert.equal(bytes(root, "top.txt").toString(), "top\n");
  });

  it("undo and redo replace a link the turn left, never writing through it into .git/hooks (issue 30 defect 1)", async () => {
    const { root, ws } = await workspaceFixture("spark-cp-hook-", { "README.md": "readme\n" });
    git(root, "init", "-q", "-b", "main");
    git(root, "add", "-A");
    git(root, "commit", "-q", "-m", "init");
    const hook = path.join(root, ".git", "hooks", "pre-commit");
    const checkpoints = await Checkpoints.open(ws, "hook-session", home);
    // Turn 1: a command writes an executable tool.sh.
    checkpoints.beginTurn();
    await checkpoints.beforeCommand();
    sh(root, "printf '#!/bin/sh\\necho pwned > pwned.txt\\n' > tool.sh && chmod 755 tool.sh");
    await checkpoints.afterCommand();
    await checkpoints.endTurn();
    // Turn 2: it becomes a link into .git/hooks (allowed: the link lives in the workspace).
    checkpoints.beginTurn();
    await checkpoints.beforeCommand();
    sh(root, "rm tool.sh && ln -s .git/hooks/pre-commit tool.sh");
    await checkpoints.afterCommand();
    await checkpoints.endTurn();
    const undo = await checkpoints.undo();
    assert.equal(describeRestore(undo), "restored tool.sh");
    assert.equal(existsSync(hook), false, "no pre-commit hook was written");
    const tool = lstatSync(path.join(root, "tool.sh"));
    assert.equal(tool.isFile(), true, "the link was replaced by the recorded file");
    assert.equal(tool.mode & 0o777, 0o755);
    assert.match(bytes(root, "tool.sh").toString(), /echo pwned/);
    // A link is not recorded (only regular files are): redo says so and writes nothing in .git.
    assert.match(
      describeRestore(await checkpoints.redo()),
      /could not restore tool\.sh \(not a regular file\)/,
    );
    assert.equal(existsSync(hook), false);
    // Undo of turn 1 through a link swapped in again removes the link, not the hook's target.
    sh(root, "rm -f tool.sh && ln -s .git/hooks/pre-commit tool.sh");
    await checkpoints.undo(1);
    assert.equal(existsSync(hook), false);
    git(root, "commit", "-q", "--allow-empty", "-m", "still no hook runs");
    assert.equal(existsSync(path.join(root, "pwned.txt")), false, "git commit ran no hook");
  });

  it("a file deleted by a command in a subfolder workspace of a repository comes back", async () => {
    const { root } = await workspaceFixture("spark-cp-sub-", { "sub/keep.bin": BINARY, "top.txt": "top\n" });
    git(root, "init", "-q", "-b", "main");
    git(root, "add", "-A");
    git(root, "commit", "-q", "-m", "init");
    const { Workspace } = await import("../src/agent/files/workspace.js");
    const sub = await Workspace.open(path.join(root, "sub"));
    const checkpoints = await Checkpoints.open(sub, "sub-session", home);
    checkpoints.beginTurn();
    await checkpoints.beforeCommand();
    await unlink(path.join(root, "sub/keep.bin"));
    await checkpoints.afterCommand();
    await checkpoints.endTurn();
    assert.equal(
      git(root, "--git-dir", checkpoints.location, "show", "refs/spark/checkpoints/1:keep.bin").length > 0,
      true,
    );
    const undo = await checkpoints.undo();
    assert.equal(describeRestore(undo), "re-created keep.bin");
    assert.deepEqual(bytes(root, "sub/keep.bin"), BINARY);
    assert.equal(git(root, "status", "--porcelain"), "");
  });
});
