/**
 * The review's diffs (change-record.ts `reviewDiffs`) on real git repositories: git's view against
 * HEAD where the file is tracked, the task's record otherwise, and never anything a sandboxed command
 * could have planted in the repository's configuration run on the host (core.fsmonitor, textconv and
 * clean filters named through .gitattributes, an external diff, hooks, a pager).
 */
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { appendFile, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import { ChangeRecord, reviewDiffs } from "../src/client/change-record.js";
import { Workspace } from "../src/agent/files/workspace.js";
import { git } from "./helpers/git.js";

const dirs: string[] = [];
after(async () => {
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

/** A repository with one commit (a.txt, b.txt) and a task's record of changes to both and a new file. */
async function repoWithChanges(): Promise<{ root: string; record: ChangeRecord; markers: string }> {
  const top = await mkdtemp(path.join(os.tmpdir(), "spark-review-"));
  dirs.push(top);
  const root = path.join(top, "ws");
  const markers = path.join(top, "markers");
  await mkdir(root);
  await mkdir(markers);
  await writeFile(path.join(root, "a.txt"), "one\ntwo\nthree\n");
  await writeFile(path.join(root, "b.txt"), "alpha\n");
  git(root, "init", "-q");
  git(root, "-c", "user.name=T", "-c", "user.email=t@example.com", "add", ".");
  git(root, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-qm", "init");
  const record = new ChangeRecord(await Workspace.open(root));
  record.before(["a.txt", "b.txt", "new.txt"]);
  await writeFile(path.join(root, "a.txt"), "one\nTWO\nthree\n");
  await writeFile(path.join(root, "b.txt"), "alpha\nbeta\n");
  await writeFile(path.join(root, "new.txt"), "fresh\n");
  record.after(["a.txt", "b.txt", "new.txt"]);
  return { root, record, markers };
}

test("the review shows git's diff against HEAD, the user's own edits included, and the record for new files", async () => {
  const { root, record } = await repoWithChanges();
  // The user edits a.txt after the task: git's view (HEAD → now) shows both changes.
  await writeFile(path.join(root, "a.txt"), "ONE\nTWO\nthree\n");
  const review = await reviewDiffs(root, record);
  assert.equal(review.source, "git");
  const byPath = new Map(review.files.map((file) => [file.path, file]));
  const a = byPath.get("a.txt")!;
  assert.equal(a.kind, "update");
  assert.deepEqual(
    a.lines.filter((line) => line.kind !== "hunk"),
    [
      { kind: "del", text: "one" },
      { kind: "del", text: "two" },
      { kind: "add", text: "ONE" },
      { kind: "add", text: "TWO" },
      { kind: "context", text: "three" },
    ],
  );
  assert.deepEqual([a.added, a.removed], [2, 2]);
  assert.deepEqual([byPath.get("b.txt")!.added, byPath.get("b.txt")!.removed], [1, 0]);
  const fresh = byPath.get("new.txt")!;
  assert.equal(fresh.kind, "add");
  assert.deepEqual(fresh.lines.slice(1), [{ kind: "add", text: "fresh" }]);
});

test("a repository's planted configuration runs nothing when the review reads it", async () => {
  const { root, record, markers } = await repoWithChanges();
  const touch = (name: string) => `touch ${JSON.stringify(path.join(markers, name))}`;
  // What a sandboxed command could have written had it been able to create or change .git: every
  // way git runs a program while diffing or while looking at the work tree.
  const hook = path.join(root, "planted-hook.sh");
  await writeFile(hook, `#!/bin/sh\n${touch("fsmonitor")}\nexit 1\n`, { mode: 0o755 });
  await mkdir(path.join(root, ".git", "hooks"), { recursive: true });
  for (const name of ["post-index-change", "reference-transaction", "fsmonitor-watchman"]) {
    await writeFile(path.join(root, ".git", "hooks", name), `#!/bin/sh\n${touch(name)}\n`, { mode: 0o755 });
  }
  await appendFile(
    path.join(root, ".git", "config"),
    [
      "[core]",
      `\tfsmonitor = ${hook}`,
      `\tpager = ${touch("pager")}; cat`,
      "\tuntrackedCache = true",
      "[diff]",
      `\texternal = ${path.join(root, "planted-ext.sh")}`,
      '[diff "evil"]',
      `\ttextconv = sh -c '${touch("textconv")}; cat "$1"' -`,
      `\tcommand = ${path.join(root, "planted-ext.sh")}`,
      '[filter "evil"]',
      `\tclean = sh -c '${touch("clean")}; cat'`,
      `\tprocess = sh -c '${touch("process")}'`,
      "\trequired = true",
      "",
    ].join("\n"),
  );
  await writeFile(path.join(root, "planted-ext.sh"), `#!/bin/sh\n${touch("external")}\n`, { mode: 0o755 });
  await writeFile(path.join(root, ".gitattributes"), "* diff=evil filter=evil\n");
  // Stat-dirty files make git re-hash them through the clean filter.
  await writeFile(path.join(root, "b.txt"), "alpha\nbeta\n");

  const review = await reviewDiffs(root, record);
  const ran = ["fsmonitor", "pager", "textconv", "external", "clean", "process", "post-index-change"].filter(
    (name) => existsSync(path.join(markers, name)),
  );
  assert.deepEqual(ran, [], `planted programs ran on the host: ${ran.join(", ")}`);
  assert.equal(review.source, "git");
  const a = review.files.find((file) => file.path === "a.txt")!;
  assert.deepEqual([a.added, a.removed], [1, 1]);
  assert.deepEqual(
    a.lines.filter((line) => line.kind !== "context" && line.kind !== "hunk"),
    [
      { kind: "del", text: "two" },
      { kind: "add", text: "TWO" },
    ],
  );
});

test("outside a git repository the record is the review", async () => {
  const top = await mkdtemp(path.join(os.tmpdir(), "spark-review-plain-"));
  dirs.push(top);
  await writeFile(path.join(top, "a.txt"), "x\n");
  const record = new ChangeRecord(await Workspace.open(top));
  record.before(["a.txt"]);
  await writeFile(path.join(top, "a.txt"), "y\n");
  record.after(["a.txt"]);
  const review = await reviewDiffs(top, record);
  assert.equal(review.source, "record");
  assert.deepEqual([review.files[0]!.added, review.files[0]!.removed], [1, 1]);
});

test("a workspace in a subdirectory of the repository diffs its files against HEAD there", async () => {
  const top = await mkdtemp(path.join(os.tmpdir(), "spark-review-sub-"));
  dirs.push(top);
  const root = path.join(top, "pkg");
  await mkdir(root);
  await writeFile(path.join(root, "a.txt"), "one\n");
  git(top, "init", "-q");
  git(top, "-c", "user.name=T", "-c", "user.email=t@example.com", "add", ".");
  git(top, "-c", "user.name=T", "-c", "user.email=t@example.com", "commit", "-qm", "init");
  const record = new ChangeRecord(await Workspace.open(root));
  record.before(["a.txt"]);
  await writeFile(path.join(root, "a.txt"), "one\ntwo\n");
  record.after(["a.txt"]);
  // The user edits it further: the review is HEAD's view, not the record's.
  await writeFile(path.join(root, "a.txt"), "one\ntwo\nthree\n");
  const review = await reviewDiffs(root, record);
  assert.equal(review.source, "git");
  assert.deepEqual([review.files[0]!.added, review.files[0]!.removed], [2, 0]);
});
