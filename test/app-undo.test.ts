/**
 * "Undo turn" and "Redo" in the app, over its real WebSocket (a raw `ws` client with the app's
 * Origin), `spark app` on the script engine: two turns patch files and a command deletes a binary
 * file; undo puts back the exact bytes in the task's own workspace (its worktree in git, its copy
 * outside), says which files changed, and redo takes it back. The summary tells the buttons what
 * they would do; bad input gets an error with a code; after a restart the task still undoes its turns.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { LogEntry, ServerMessage, TaskSummary } from "../src/app/protocol.js";
import { AppClient } from "./helpers/app-client.js";
import { git, scriptAppArgs, startAppCli, stopApps, type AppCli } from "./helpers/app.js";
import { file, freshDir, stop } from "./helpers/cli.js";

const BINARY = Buffer.from([0, 159, 146, 150, 0, 255, 10, 13, 0]);
const ORIGINAL_A = "alpha\r\nbeta\n";
after(stopApps);

const patch = (input: string) => ({ type: "custom_tool_call", name: "apply_patch", input });
const SCRIPT = file(
  "app-undo.jsonl",
  [
    [
      patch(
        "*** Begin Patch\n*** Update File: a.txt\n@@\n-beta\n+beta one\n*** Add File: made.txt\n+made by turn one\n*** End Patch",
      ),
    ],
    [{ type: "function_call", name: "shell", arguments: JSON.stringify({ command: "rm data.bin" }) }],
    [{ type: "message", text: "Turn one done." }],
    [patch("*** Begin Patch\n*** Update File: a.txt\n@@\n-beta one\n+beta two\n*** End Patch")],
    [{ type: "message", text: "Turn two done." }],
  ]
    .map((output) => JSON.stringify({ output }))
    .join("\n") + "\n",
);

class UndoClient extends AppClient {
  async summary(task: string, accept: (summary: TaskSummary) => boolean, from = 0): Promise<TaskSummary> {
    const known = this.tasks.get(task);
    if (known && accept(known)) return known;
    const message = await this.next(
      (m) => m.type === "task.updated" && m.summary.id === task && accept(m.summary),
      from,
    );
    return (message as Extract<ServerMessage, { type: "task.updated" }>).summary;
  }

  /** The text of the first info notice of `task` from `from` on. */
  async notice(task: string, pattern: RegExp, from: number): Promise<string> {
    const message = await this.next(
      (m) => m.type === "entry" && m.task === task && m.entry.kind === "notice" && pattern.test(m.entry.text),
      from,
    );
    return (
      (message as Extract<ServerMessage, { type: "entry" }>).entry as Extract<LogEntry, { kind: "notice" }>
    ).text;
  }
}

describe("Undo turn and Redo in the app", () => {
  async function scenario(withGit: boolean): Promise<void> {
    const workspace = freshDir("ws-");
    writeFileSync(join(workspace, "a.txt"), ORIGINAL_A);
    writeFileSync(join(workspace, "data.bin"), BINARY);
    if (withGit) {
      git(workspace, "init", "-q", "-b", "main");
      git(workspace, "add", "-A");
      git(workspace, "commit", "-qm", "start");
    }
    const userState = (): string[] =>
      withGit
        ? [
            git(workspace, "rev-parse", "HEAD"),
            git(workspace, "ls-files", "-s"),
            git(workspace, "status", "--porcelain"),
          ]
        : [readFileSync(join(workspace, "a.txt"), "utf8"), String(existsSync(join(workspace, "data.bin")))];
    const before = userState();
    const env = { SPARK_DATA_DIR: freshDir("data-"), SPARK_HOME: freshDir("home-") };
    const start = async (): Promise<{ cli: AppCli; app: UndoClient }> => {
      const cli = await startAppCli(
        scriptAppArgs(workspace, SCRIPT, "--approval", "never", "--rate", "1000"),
        env,
        600_000,
      );
      return { cli, app: await UndoClient.connect(cli.url) };
    };
    const { cli, app } = await start();

    const created = app.send({ type: "task.create", model: "spark", text: "first turn" });
    const log = await app.next((m) => m.type === "task.log", created);
    const task = (log as Extract<ServerMessage, { type: "task.log" }>).task;
    const first = await app.summary(task, (s) => s.state === "done" && s.undoTurn === 1, created);
    const root = first.workspace?.path ?? workspace;
    if (withGit) assert.equal(first.workspace?.kind, "worktree");
    const read = (name: string): Buffer => readFileSync(join(root, name));
    assert.equal(existsSync(join(root, "data.bin")), false, "the command deleted it");

    const second = app.send({ type: "send", task, text: "second turn" });
    await app.summary(task, (s) => s.state === "done" && s.undoTurn === 2, second);
    assert.equal(read("a.txt").toString(), "alpha\r\nbeta two\n");

    let from = app.send({ type: "undo", task });
    assert.equal(await app.notice(task, /^undid/, from), "undid turn 2: restored a.txt");
    assert.equal(read("a.txt").toString(), "alpha\r\nbeta one\n");
    const afterUndo = await app.summary(task, (s) => s.undoTurn === 1 && s.redoTurns?.[0] === 2, from);
    assert.deepEqual(afterUndo.redoTurns, [2]);

    from = app.send({ type: "undo", task, turn: 1 });
    assert.equal(
      await app.notice(task, /^undid/, from),
      "undid turn 1: restored a.txt; re-created data.bin; removed made.txt",
    );
    assert.deepEqual(read("a.txt"), Buffer.from(ORIGINAL_A));
    assert.deepEqual(read("data.bin"), BINARY, "the binary file the command deleted, byte for byte");
    assert.equal(existsSync(join(root, "made.txt")), false);
    await app.summary(task, (s) => s.undoTurn === undefined && s.redoTurns?.length === 1, from);

    from = app.send({ type: "undo", task });
    const nothing = await app.next((m) => m.type === "error", from);
    assert.deepEqual(
      { ...(nothing as Extract<ServerMessage, { type: "error" }>), message: "" },
      { type: "error", code: "nothing_to_undo", message: "", task },
    );

    from = app.send({ type: "redo", task });
    assert.equal(
      await app.notice(task, /^redid/, from),
      "redid turn 1: restored a.txt; re-created made.txt; removed data.bin",
    );
    assert.equal(read("made.txt").toString(), "made by turn one\n");
    from = app.send({ type: "redo", task });
    assert.equal(await app.notice(task, /^redid/, from), "redid turn 2: restored a.txt");
    assert.equal(read("a.txt").toString(), "alpha\r\nbeta two\n");
    await app.summary(task, (s) => s.undoTurn === 2 && s.redoTurns === undefined, from);

    // Bad input: an error with a code, nothing changed.
    from = app.send({ type: "undo", task, turn: 0 });
    const bad = (await app.next((m) => m.type === "error", from)) as Extract<
      ServerMessage,
      { type: "error" }
    >;
    assert.equal(typeof bad.code, "string");
    assert.equal(read("a.txt").toString(), "alpha\r\nbeta two\n");
    if (root !== workspace)
      assert.deepEqual(userState(), before, "the user's own files, HEAD and index untouched");
    app.socket.close();

    // After a restart the task can still undo its turns (read back from the checkpoints saved).
    await stop(cli);
    const again = await start();
    assert.equal(again.app.tasks.get(task)?.undoTurn, 2, "the button knows what it would undo");
    from = again.app.send({ type: "undo", task });
    assert.equal(await again.app.notice(task, /^undid/, from), "undid turn 2: restored a.txt");
    assert.equal(read("a.txt").toString(), "alpha\r\nbeta one\n");
    again.app.socket.close();
  }

  test(
    "in a git repository: the task's worktree goes back and forth, exact bytes",
    { timeout: 240_000 },
    () => scenario(true),
  );

  test("outside git: the task's copy goes back and forth, exact bytes", { timeout: 240_000 }, () =>
    scenario(false),
  );
});
