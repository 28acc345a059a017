/**
 * Issue 30's defects end to end, against real parts: `spark app` on the script engine playing a
 * prompt-injected model, bubblewrap on (the commands run sandboxed, as users run them), real git.
 * Each test fails on the code before the confined file layer (src/agent/fs/confined.ts).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import type { LogEntry, ServerMessage, TaskSummary } from "../src/app/protocol.js";
import { AppClient } from "./helpers/app-client.js";
import { file, freshDir } from "./helpers/cli.js";
import { git, startAppCli, stopApps } from "./helpers/app.js";

after(stopApps);

const bwrapMissing = (() => {
  try {
    execFileSync("bwrap", ["--ro-bind", "/", "/", "--unshare-all", "true"], { stdio: "ignore" });
    return undefined;
  } catch {
    return "bubblewrap is not usable here (apt-get install bubblewrap)";
  }
})();

const shell = (command: string) => ({
  type: "function_call",
  name: "shell",
  arguments: JSON.stringify({ command }),
});
const message = (text: string) => ({ type: "message", text });
const script = (name: string, turns: unknown[][]): string =>
  file(name, turns.map((output) => JSON.stringify({ output })).join("\n") + "\n");

class DefectClient extends AppClient {
  async summary(task: string, accept: (summary: TaskSummary) => boolean, from = 0): Promise<TaskSummary> {
    const known = this.tasks.get(task);
    if (known && accept(known)) return known;
    const found = await this.next(
      (m) => m.type === "task.updated" && m.summary.id === task && accept(m.summary),
      from,
    );
    return (found as Extract<ServerMessage, { type: "task.updated" }>).summary;
  }

  async notice(task: string, pattern: RegExp, from: number): Promise<string> {
    const found = await this.next(
      (m) => m.type === "entry" && m.task === task && m.entry.kind === "notice" && pattern.test(m.entry.text),
      from,
    );
    return (
      (found as Extract<ServerMessage, { type: "entry" }>).entry as Extract<LogEntry, { kind: "notice" }>
    ).text;
  }
}

/** `spark app` on `workspace` with the script engine and the sandbox on. */
async function startApp(workspace: string, scriptPath: string, extra: string[] = []): Promise<DefectClient> {
  const app = await startAppCli(
    [
      workspace,
      "--port",
      "0",
      "--quiet",
      "--approval",
      "never",
      "--engine",
      "script",
      "--script",
      scriptPath,
      "--rate",
      "1000",
      ...extra,
    ],
    { SPARK_DATA_DIR: freshDir("data-"), SPARK_HOME: freshDir("home-") },
    600_000,
  );
  return DefectClient.connect(app.url);
}

describe("issue 30, end to end", { skip: bwrapMissing ?? false }, () => {
  test(
    "defect 1: Undo turn in place never writes through a link into .git/hooks (the next git commit runs nothing)",
    { timeout: 240_000 },
    async () => {
      const workspace = freshDir("ws-");
      writeFileSync(join(workspace, "README.md"), "readme\n");
      git(workspace, "init", "-q", "-b", "main");
      git(workspace, "add", "-A");
      git(workspace, "commit", "-qm", "start");
      const app = await startApp(
        workspace,
        script("defect-1.jsonl", [
          [shell("printf '#!/bin/sh\\necho pwned > pwned.txt\\n' > tool.sh && chmod 755 tool.sh")],
          [message("Turn one done.")],
          [shell("rm tool.sh && ln -s .git/hooks/pre-commit tool.sh")],
          [message("Turn two done.")],
        ]),
        ["--in-place"],
      );
      const created = app.send({ type: "task.create", model: "spark", text: "make a tool" });
      const log = await app.next((m) => m.type === "task.log", created);
      const task = (log as Extract<ServerMessage, { type: "task.log" }>).task;
      const first = await app.summary(task, (s) => s.state === "done" && s.undoTurn === 1, created);
      assert.equal(first.workspace?.path ?? workspace, workspace, "the task works in place");
      const second = app.send({ type: "send", task, text: "now link it" });
      await app.summary(task, (s) => s.state === "done" && s.undoTurn === 2, second);
      assert.equal(lstatSync(join(workspace, "tool.sh")).isSymbolicLink(), true, "the sandboxed link");

      const from = app.send({ type: "undo", task });
      assert.match(await app.notice(task, /^undid/, from), /^undid turn 2: restored tool\.sh$/);
      const hook = join(workspace, ".git", "hooks", "pre-commit");
      assert.equal(existsSync(hook), false, "no pre-commit hook was written");
      assert.equal(lstatSync(join(workspace, "tool.sh")).isFile(), true, "the link was replaced");
      assert.match(readFileSync(join(workspace, "tool.sh"), "utf8"), /echo pwned/);
      git(workspace, "commit", "-q", "--allow-empty", "-m", "the user's next commit");
      assert.equal(existsSync(join(workspace, "pwned.txt")), false, "git commit ran no hook");
      app.socket.close();
    },
  );
});
