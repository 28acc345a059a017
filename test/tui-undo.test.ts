/**
 * `/undo` and `/redo` in the interactive UI, in a real terminal (tmux) with the script engine: two
 * turns patch files and a command deletes a binary file; `/undo` puts back the exact bytes from
 * before the last turn, `/undo 1` from before the first (a file the turn created removed, the file
 * the command deleted re-created), `/redo` takes the undo back. In a git repository (the user's
 * refs, objects, index and HEAD untouched; the checkpoints in a bare repository of Spark's own in
 * SPARK_HOME/checkpoints/git that borrows the user's objects) and outside git (the checkpoints in
 * SPARK_HOME/checkpoints).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, realpathSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { file, freshDir } from "./helpers/cli.js";
import { distMissing, TmuxServer, tmuxMissing } from "./helpers/tmux.js";

const BINARY = Buffer.from([0, 159, 146, 150, 0, 255, 10, 13, 0]);
const ORIGINAL_A = "alpha\r\nbeta\n";

const patch = (body: string) => ({ type: "custom_tool_call", name: "apply_patch", input: body });
const shell = (command: string) => ({
  type: "function_call",
  name: "shell",
  arguments: JSON.stringify({ command }),
});
const message = (text: string) => ({ type: "message", text });

const SCRIPT = file(
  "undo.jsonl",
  [
    [
      patch(
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-beta\n+beta one\n*** Add File: made.txt\n+made by turn one\n*** End Patch",
      ),
    ],
    [shell("rm data.bin")],
    [message("Turn one done.")],
    [patch("*** Begin Patch\n*** Update File: a.txt\n@@\n-beta one\n+beta two\n*** End Patch")],
    [message("Turn two done.")],
  ]
    .map((output) => JSON.stringify({ output }))
    .join("\n") + "\n",
);

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], {
    cwd,
    encoding: "utf8",
  });
}

describe("/undo and /redo in the terminal", { skip: tmuxMissing ?? false }, () => {
  const tmux = new TmuxServer();
  before(() => {
    const missing = distMissing();
    assert.equal(missing, undefined, missing);
  });
  after(() => tmux.kill());

  async function scenario(withGit: boolean): Promise<{ cwd: string; home: string }> {
    const cwd = freshDir("ws-");
    const home = freshDir("home-");
    writeFileSync(join(cwd, "a.txt"), ORIGINAL_A);
    writeFileSync(join(cwd, "data.bin"), BINARY);
    if (withGit) {
      git(cwd, "init", "-q", "-b", "main");
      git(cwd, "add", "-A");
      git(cwd, "commit", "-qm", "start");
    }
    // The user's repository as Spark must leave it: every ref, the index's entries, HEAD, and the
    // object database's files (the checkpoints' contents go to Spark's own repository).
    const objects = (): string =>
      (readdirSync(join(cwd, ".git", "objects"), { recursive: true }) as string[]).sort().join("\n");
    const userState = (): string[] =>
      withGit
        ? [git(cwd, "rev-parse", "HEAD"), git(cwd, "for-each-ref"), git(cwd, "ls-files", "-s"), objects()]
        : [];
    const before = userState();
    const term = tmux.start({
      args: ["--engine", "script", "--script", SCRIPT, "--rate", "400", "--approval", "never"],
      cwd,
      dataDir: freshDir("data-"),
      env: { SPARK_HOME: home },
      columns: 200,
    });
    await term.ready();
    const read = (name: string): Buffer => readFileSync(join(cwd, name));

    term.type("first turn");
    term.press("Enter");
    await term.waitFor("Turn one done.");
    await term.waitFor(/↶ turn 1 changed .*a\.txt/, "turn 1's checkpoint line");
    await term.idle();
    assert.equal(existsSync(join(cwd, "data.bin")), false, "the command deleted it");
    term.type("second turn");
    term.press("Enter");
    await term.waitFor("Turn two done.");
    await term.idle();
    assert.equal(read("a.txt").toString(), "alpha\r\nbeta two\n");

    term.type("/undo");
    term.press("Enter");
    await term.waitFor(/↶ undid turn 2: restored a\.txt/, "the undo of turn 2");
    assert.equal(read("a.txt").toString(), "alpha\r\nbeta one\n");

    term.type("/undo 1");
    term.press("Enter");
    await term.waitFor(
      /↶ undid turn 1: restored a\.txt; re-created data\.bin; removed made\.txt/,
      "the undo of turn 1",
    );
    assert.deepEqual(read("a.txt"), Buffer.from(ORIGINAL_A));
    assert.deepEqual(read("data.bin"), BINARY, "the binary file the command deleted, byte for byte");
    assert.equal(existsSync(join(cwd, "made.txt")), false, "the file the turn created is gone");
    assert.deepEqual(userState(), before, "HEAD, branches and the index as they were");
    if (withGit) assert.equal(git(cwd, "status", "--porcelain"), "", "the work tree is as committed");

    term.type("/redo");
    term.press("Enter");
    await term.waitFor(
      /↷ redid turn 1: restored a\.txt; re-created made\.txt; removed data\.bin/,
      "the redo",
    );
    assert.equal(read("a.txt").toString(), "alpha\r\nbeta one\n");
    assert.equal(read("made.txt").toString(), "made by turn one\n");
    assert.equal(existsSync(join(cwd, "data.bin")), false);

    term.type("/redo");
    term.press("Enter");
    await term.waitFor(/↷ redid turn 2: restored a\.txt/, "the second redo");
    assert.equal(read("a.txt").toString(), "alpha\r\nbeta two\n");
    term.type("/redo");
    term.press("Enter");
    await term.waitFor("/redo: nothing was undone since the last turn");
    assert.deepEqual(userState(), before);
    return { cwd, home };
  }

  test("in a git repository: exact bytes back, the user's .git untouched, the checkpoints in Spark's own repository", async () => {
    const { cwd, home } = await scenario(true);
    assert.equal(git(cwd, "for-each-ref", "refs/spark/"), "", "no ref of Spark's in the user's repository");
    // One repository of the session's, under SPARK_HOME/checkpoints/git/<repository>-<hash>/.
    const stores = join(home, "checkpoints", "git");
    const folders = readdirSync(stores);
    assert.equal(folders.length, 1, `one folder for the user's repository: ${folders.join(", ")}`);
    const sessions = readdirSync(join(stores, folders[0]!)).filter((name) => name.endsWith(".git"));
    assert.equal(sessions.length, 1, `one repository for the session: ${sessions.join(", ")}`);
    const repo = join(stores, folders[0]!, sessions[0]!);
    assert.equal(
      realpathSync(readFileSync(join(repo, "objects", "info", "alternates"), "utf8").trim()),
      realpathSync(join(cwd, ".git", "objects")),
      "it borrows the user's objects",
    );
    const store = (...args: string[]): string => git(cwd, "--git-dir", repo, ...args);
    assert.deepEqual(
      store("for-each-ref", "--format=%(refname)", "refs/spark/checkpoints/").trim().split("\n").sort(),
      ["refs/spark/checkpoints/1", "refs/spark/checkpoints/2"],
      "a checkpoint per turn",
    );
    // Each holds the files as they were before its turn.
    assert.equal(store("show", "refs/spark/checkpoints/1:a.txt"), ORIGINAL_A);
    assert.equal(store("show", "refs/spark/checkpoints/2:a.txt"), "alpha\r\nbeta one\n");
  });

  test("outside git: exact bytes back, the checkpoints in SPARK_HOME", async () => {
    const { home } = await scenario(false);
    assert.ok(existsSync(join(home, "checkpoints")), "the checkpoints live in Spark's folder");
  });

  test("/help says what undo cannot undo", async () => {
    const term = tmux.start({
      args: ["--engine", "script", "--script", SCRIPT],
      cwd: freshDir("ws-"),
      dataDir: freshDir("data-"),
      env: { SPARK_HOME: freshDir("home-") },
      columns: 200,
    });
    await term.ready();
    term.type("/help");
    term.press("Enter");
    await term.waitFor(/what a command did elsewhere \(a database, a network call\) cannot be undone/);
    term.type("/undo");
    term.press("Enter");
    await term.waitFor("/undo: no turn of this session changed files");
  });
});
