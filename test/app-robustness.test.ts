/**
 * The app under faults and floods, over its real socket (a raw `ws` client with the app's Origin,
 * no browser needed): `spark app` as a child process on the script engine, or the app server in
 * this process where a test needs to see a task from the inside.
 * - a browser that stops reading is not queued for without bound, and is resynced when it reads;
 * - `delegate` and the browser's background button are bounded (queued, then refused readably),
 *   and a changed task is sent as itself, not as the whole list again;
 * - bad saved files (null, missing fields, a FIFO, bad lines) are skipped and reported, not fatal;
 * - a removed or unusable sessions directory fails the task, not the app; a file where a data
 *   folder belongs at start is moved aside (and said), not fatal;
 * - a task deleted while it streams or runs a command writes nothing again.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { setImmediate as nextTurn, setTimeout as sleep } from "node:timers/promises";
import { after, describe, test } from "node:test";
import { Workspace } from "../src/agent/files/workspace.js";
import { AppServer } from "../src/app/app-server.js";
import type { LogEntry, ServerMessage, TaskSummary } from "../src/app/protocol.js";
import { AppClient } from "./helpers/app-client.js";
import { file, freshDir, stop } from "./helpers/cli.js";
import { message, scriptFile as script, startAppCli, stopApps, type AppCli } from "./helpers/app.js";
import { startScriptServer } from "./helpers/servers.js";

const MiB = 1024 * 1024;
after(stopApps);

interface App extends AppCli {
  dataDir: string;
  workspace: string;
}

async function startApp(
  args: readonly string[],
  dirs: { workspace?: string; dataDir?: string } = {},
): Promise<App> {
  const workspace = dirs.workspace ?? freshDir("ws-");
  const dataDir = dirs.dataDir ?? freshDir("data-");
  const app = await startAppCli(
    [workspace, "--port", "0", "--quiet", "--sandbox", "off", ...args],
    { SPARK_DATA_DIR: dataDir },
    600_000,
  );
  return { ...app, dataDir, workspace };
}

/** Polls `condition` (a fact on disk or in memory that has no event to wait on). */
async function until(condition: () => boolean, what: string, timeoutMs = 240_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`gave up waiting for ${what}`);
    await sleep(50);
  }
}

/** A browser's socket to the app, recording every message. */
class RobustnessClient extends AppClient {
  /** Creates a task with `text` and returns its id (from the task's first log, sent to the creator). */
  async create(model: string, text: string): Promise<string> {
    const from = this.send({ type: "task.create", model, text });
    const log = await this.next((m) => m.type === "task.log", from);
    return (log as Extract<ServerMessage, { type: "task.log" }>).task;
  }

  /** The first message from `from` on that shows `task` in a state `accept` takes. */
  async nextState(task: string, accept: (state: string) => boolean, from = 0): Promise<TaskSummary> {
    const found = await this.next(
      (m) =>
        (m.type === "task.updated" && m.summary.id === task && accept(m.summary.state)) ||
        (m.type === "tasks" && m.tasks.some((t) => t.id === task && accept(t.state))),
      from,
    );
    return found.type === "task.updated"
      ? found.summary
      : (found as Extract<ServerMessage, { type: "tasks" }>).tasks.find((t) => t.id === task)!;
  }

  /**
   * Where the turn that a message sent at `from` started: the index just past the first summary
   * that shows the task running. A summary sent for another reason (its disk usage measured, say)
   * still shows the last turn's end and must not be taken for the new turn's end.
   */
  async turnStarted(task: string, from: number): Promise<number> {
    const running = await this.next(
      (m) =>
        (m.type === "task.updated" && m.summary.id === task && m.summary.state === "running") ||
        (m.type === "tasks" && m.tasks.some((t) => t.id === task && t.state === "running")),
      from,
    );
    return this.messages.indexOf(running, from) + 1;
  }

  waitForState(task: string, states: readonly string[]): Promise<TaskSummary> {
    return this.nextState(task, (state) => states.includes(state));
  }

  /** The first message from `from` on that says `task` is gone. */
  nextRemoved(task: string, from: number): Promise<ServerMessage> {
    return this.next(
      (m) =>
        (m.type === "task.removed" && m.task === task) ||
        (m.type === "tasks" && !m.tasks.some((t) => t.id === task)),
      from,
    );
  }

  async log(task: string): Promise<LogEntry[]> {
    const from = this.send({ type: "task.open", task });
    const log = await this.next((m) => m.type === "task.log" && m.task === task, from);
    return (log as Extract<ServerMessage, { type: "task.log" }>).entries;
  }
}

function rss(pid: number): number {
  const match = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return Number(match?.[1] ?? 0) * 1024;
}

function savedState(dataDir: string, task: string): string | undefined {
  try {
    const saved = JSON.parse(readFileSync(join(dataDir, "app", "tasks", `${task}.json`), "utf8")) as {
      summary: { state: string };
    };
    return saved.summary.state;
  } catch {
    return undefined;
  }
}

describe("the app under faults and floods", { timeout: 600_000 }, () => {
  test("a browser that stops reading is not queued for: the app stays small, and is resynced once it reads", async () => {
    const words = "lorem ipsum dolor sit amet consectetur ";
    const answer = words.repeat(Math.ceil((4 * MiB) / words.length)).slice(0, 4 * MiB);
    const app = await startApp(["--engine", "script", "--script", script("big.jsonl", [message(answer)])]);
    const client = await RobustnessClient.connect(app.url);
    const pid = app.child.pid!;
    const before = rss(pid);
    let peak = before;
    const from = client.send({ type: "task.create", model: "spark", text: "write a lot" });
    client.socket.pause(); // the browser stops reading
    let task: string | undefined;
    await until(() => {
      peak = Math.max(peak, rss(pid));
      task ??= readdirSync(join(app.dataDir, "app", "tasks"))
        .find((name) => name.endsWith(".json"))
        ?.slice(0, -".json".length);
      return task !== undefined && savedState(app.dataDir, task) === "done";
    }, "the answer to end");
    assert.equal(app.child.exitCode, null);
    // Unbounded, the ~1.2 million deltas queued for this socket held well over 500 MiB.
    const grown = (peak - before) / MiB;
    assert.ok(grown < 256, `the app grew by ${grown.toFixed(0)} MiB for a browser that read nothing`);

    // Reading again: what was queued arrives, then a fresh hello, and the task's log is whole.
    client.socket.resume();
    await client.next((m) => m.type === "hello", from);
    const deltas = client.messages.filter((m) => m.type === "delta").length;
    const pieces = answer.match(/\s*\S{1,4}|\s+/g)!.length;
    assert.ok(deltas < pieces / 2, `${deltas} of ${pieces} deltas were queued for a browser that read none`);
    const entries = await client.log(task!);
    const assistant = entries.find((entry) => entry.kind === "assistant");
    assert.equal(assistant?.kind === "assistant" ? assistant.text.length : 0, answer.length);
    client.close();
    assert.equal(await stop(app), 0, app.stderr().slice(-2000));
  });

  test("delegate and the background button are bounded: queued past 4 running, refused with a readable error past the caps; changes come per task", async () => {
    const delegations = Array.from({ length: 40 }, (_, i) => ({
      type: "function_call",
      name: "delegate",
      arguments: JSON.stringify({ task: `Background job ${i}` }),
    }));
    const foreground = script("flood-foreground.jsonl", [
      { output: delegations },
      message("FOREGROUND DONE"),
    ]);
    // Deep tasks stream slowly, so every one started is still running while the test looks.
    const slow = Array.from({ length: 2000 }, (_, i) => `word${i}`).join(" ");
    const background = script("flood-background.jsonl", [message(slow)]);
    const config = file(
      "flood-config.json",
      JSON.stringify({
        models: {
          spark: { engine: "script", script: foreground },
          deep: { engine: "script", script: background, rate: 2 },
        },
      }),
    );
    const app = await startApp(["--config", config]);
    const client = await RobustnessClient.connect(app.url);
    let mostRunning = 0;
    const countStates = (): Record<string, number> => {
      const counts: Record<string, number> = {};
      for (const task of client.tasks.values())
        if (task.background) counts[task.state] = (counts[task.state] ?? 0) + 1;
      mostRunning = Math.max(mostRunning, counts.running ?? 0);
      return counts;
    };
    client.socket.on("message", () => countStates());

    const parent = await client.create("spark", "Hand out forty jobs");
    await client.waitForState(parent, ["done", "failed"]);
    const items = (await client.log(parent)).filter(
      (entry): entry is Extract<LogEntry, { kind: "item" }> =>
        entry.kind === "item" && entry.item.type === "tool_call" && entry.item.tool === "delegate",
    );
    const statuses = items.map((entry) => (entry.item as { status: string }).status);
    assert.equal(statuses.filter((s) => s === "completed").length, 8, "one task has at most 8 pending");
    const refused = items.filter((entry) => (entry.item as { status: string }).status === "failed");
    assert.equal(refused.length, 32);
    for (const entry of refused)
      assert.match(
        String((entry.item as { result?: string }).result),
        /refused: this task already has 8 background tasks/,
      );

    // Four run; the other four wait their turn.
    await until(() => {
      const counts = countStates();
      return counts.running === 4 && counts.queued === 4;
    }, "4 running and 4 queued background tasks");

    // The browser's background button counts against the workspace's cap (32 running or waiting).
    const from = client.messages.length;
    for (let i = 0; i < 30; i++)
      client.send({ type: "task.create", model: "deep", background: true, text: `Button job ${i}` });
    const answered = (): Extract<ServerMessage, { type: "task.log" | "error" }>[] =>
      client.messages
        .slice(from)
        .filter(
          (m): m is Extract<ServerMessage, { type: "task.log" | "error" }> =>
            m.type === "task.log" || m.type === "error",
        );
    await until(() => answered().length === 30, "an answer to each of 30 creates");
    const errors = answered().filter((m) => m.type === "error");
    assert.equal(errors.length, 6);
    for (const error of errors)
      assert.equal(error.type === "error" && error.code, "too_many_background_tasks");
    countStates();
    assert.equal(mostRunning, 4, "never more than 4 background tasks run at once");
    assert.equal([...client.tasks.values()].filter((t) => t.background).length, 32);
    // Each change came as that task alone: the list was never sent again.
    assert.equal(client.messages.filter((m) => m.type === "tasks").length, 0);
    client.close();
    assert.equal(await stop(app), 0, app.stderr().slice(-2000));
  });

  test("bad saved files are skipped and reported by name; the app starts and serves the good tasks", async () => {
    const answers = script("good.jsonl", [message("GOOD ANSWER"), message("SECOND ANSWER")]);
    const first = await startApp(["--engine", "script", "--script", answers]);
    let client = await RobustnessClient.connect(first.url);
    const good = await client.create("spark", "hello");
    await client.waitForState(good, ["done"]);
    client.close();
    assert.equal(await stop(first), 0);

    const tasksDir = join(first.dataDir, "app", "tasks");
    const saved = JSON.parse(readFileSync(join(tasksDir, `${good}.json`), "utf8")) as {
      summary: Record<string, unknown>;
      workspace: string;
      sessionId: string;
      record: object;
    };
    const variant = (id: string, change: (s: typeof saved) => object): void =>
      writeFileSync(
        join(tasksDir, `${id}.json`),
        JSON.stringify(change({ ...saved, summary: { ...saved.summary, id } })),
      );
    writeFileSync(join(tasksDir, "null-task.json"), "null");
    writeFileSync(join(tasksDir, "torn-task.json"), '{"summary": {');
    variant("no-summary", (s) => ({ ...s, summary: null }));
    variant("no-record", (s) => ({ ...s, record: null }));
    variant("no-created", (s) => {
      const { createdAt: _, ...summary } = s.summary;
      return { ...s, summary };
    });
    variant("null-files", (s) => ({ ...s, summary: { ...s.summary, changedFiles: null } }));
    execFileSync("mkfifo", [join(tasksDir, "fifo-task.json")]);
    // Bad lines in the good task's session and transcript.
    const sessionPath = join(first.dataDir, "sessions", `${saved.sessionId}.jsonl`);
    appendFileSync(sessionPath, 'null\n{"type":"items","items":null}\nnot json\n');
    appendFileSync(join(tasksDir, `${good}.log.jsonl`), '{"kind":"assistant"}\n[]\n');

    const second = await startApp(["--engine", "script", "--script", answers], {
      workspace: first.workspace,
      dataDir: first.dataDir,
    });
    client = await RobustnessClient.connect(second.url);
    const hello = client.messages.find((m) => m.type === "hello");
    const ids = hello?.type === "hello" ? hello.tasks.map((t) => t.id).sort() : [];
    assert.deepEqual(ids, [good, "no-created", "null-files"].sort());
    const report = await client.next((m) => m.type === "error" && m.code === "tasks_unreadable");
    for (const name of [
      "null-task.json",
      "torn-task.json",
      "no-summary.json",
      "no-record.json",
      "fifo-task.json",
    ]) {
      assert.ok(report.type === "error" && report.message.includes(name), `${name} not reported`);
      assert.ok(second.stderr().includes(name), `${name} not on stderr`);
    }
    assert.ok(report.type === "error" && report.message.includes(`${saved.sessionId}.jsonl`));
    assert.deepEqual(client.tasks.get("null-files")?.changedFiles, []);
    assert.equal(typeof client.tasks.get("no-created")?.createdAt, "string");

    // The good task shows its transcript and goes on; the app is still up.
    const entries = await client.log(good);
    assert.ok(entries.some((entry) => entry.kind === "assistant" && entry.text === "GOOD ANSWER"));
    // This turn's end, not a summary sent before it that still shows the last turn's.
    const again = client.send({ type: "send", task: good, text: "again" });
    await client.nextState(good, (state) => state === "done", await client.turnStarted(good, again));
    assert.ok((await client.log(good)).some((e) => e.kind === "assistant" && e.text === "SECOND ANSWER"));
    assert.equal(second.child.exitCode, null);
    client.close();
    assert.equal(await stop(second), 0, second.stderr().slice(-2000));
  });

  test("a file where the app's data folders belong is moved aside and said; the app starts and saves tasks", async () => {
    const dataDir = freshDir("data-");
    mkdirSync(join(dataDir, "app"));
    writeFileSync(join(dataDir, "app", "tasks"), "TASKS-WAS-A-FILE");
    writeFileSync(join(dataDir, "sessions"), "SESSIONS-WAS-A-FILE");
    const app = await startApp(
      ["--engine", "script", "--script", script("aside.jsonl", [message("SAVED")])],
      {
        dataDir,
      },
    );
    // Said on stderr (which may arrive after the first line on stdout).
    for (const name of ["tasks", "sessions"]) {
      const said = new RegExp(`/${name} was a file, not a folder: moved aside to .*${name}\\.not-a-folder-`);
      await until(() => said.test(app.stderr()), `stderr to say that ${name} was moved aside`);
    }
    // Nothing lost: the files are beside the new folders, as they were.
    const aside = (dir: string, name: string): string => {
      const found = readdirSync(dir).find((n) => n.startsWith(`${name}.not-a-folder-`));
      assert.ok(found, `${name} moved aside in ${dir}`);
      return readFileSync(join(dir, found), "utf8");
    };
    assert.equal(aside(join(dataDir, "app"), "tasks"), "TASKS-WAS-A-FILE");
    assert.equal(aside(dataDir, "sessions"), "SESSIONS-WAS-A-FILE");
    // The page is told too, and a task runs and is saved in the new folders.
    const client = await RobustnessClient.connect(app.url);
    const said = await client.next((m) => m.type === "error" && m.code === "data_moved_aside");
    assert.match(said.type === "error" ? said.message : "", /app\/tasks was a file, not a folder/);
    const task = await client.create("spark", "hello");
    await client.waitForState(task, ["done"]);
    assert.ok(existsSync(join(dataDir, "app", "tasks", `${task}.json`)));
    assert.equal(readdirSync(join(dataDir, "sessions")).length, 1);
    client.close();
    assert.equal(await stop(app), 0, app.stderr().slice(-2000));
  });

  test("a removed sessions directory is recreated; an unusable one fails the task, not the app", async () => {
    const answers = script("sessions.jsonl", [
      message("ONE"),
      message("TWO"),
      message("THREE"),
      message("FOUR"),
    ]);
    const app = await startApp(["--engine", "script", "--script", answers]);
    const client = await RobustnessClient.connect(app.url);
    const task = await client.create("spark", "first");
    await client.waitForState(task, ["done"]);
    const sessions = join(app.dataDir, "sessions");

    // Removed: the session is written whole again.
    rmSync(sessions, { recursive: true, force: true });
    let from = client.send({ type: "send", task, text: "second" });
    const started = await client.turnStarted(task, from);
    const ended = await client.nextState(task, (state) => state === "done" || state === "failed", started);
    assert.equal(ended.state, "done");
    const [sessionFile] = readdirSync(sessions);
    assert.ok(sessionFile);
    const session = readFileSync(join(sessions, sessionFile), "utf8");
    assert.ok(session.includes('"type":"session"') && session.includes("TWO") && session.includes("ONE"));

    // Unusable (a file where the directory was): the task is told, fails, and the app stays up.
    rmSync(sessions, { recursive: true, force: true });
    writeFileSync(sessions, "not a directory");
    from = client.send({ type: "send", task, text: "third" });
    const error = await client.next(
      (m) => m.type === "error" && m.task === task && m.code === "save_failed",
      from,
    );
    assert.match(error.type === "error" ? error.message : "", /conversation could not be saved/);
    await client.nextState(task, (state) => state === "failed", from);
    assert.equal(app.child.exitCode, null);
    // A new task cannot start its session either: the browser is told, nothing ends.
    from = client.send({ type: "task.create", model: "spark" });
    await client.next((m) => m.type === "error", from);
    assert.equal(app.child.exitCode, null);

    // With room again, the task goes on and its session is whole.
    rmSync(sessions, { force: true });
    from = client.send({ type: "send", task, text: "fourth" });
    await client.nextState(task, (state) => state === "done", await client.turnStarted(task, from));
    const whole = readFileSync(join(sessions, sessionFile), "utf8");
    assert.ok(whole.includes("fourth"));
    client.close();
    assert.equal(await stop(app), 0, app.stderr().slice(-2000));
  });

  test("a task deleted while it streams or runs a command writes nothing again, and its agent stops", async () => {
    const longAnswer = Array.from({ length: 200 }, (_, i) => `word${i}`).join(" ");
    const server = await startScriptServer(
      [
        message(longAnswer),
        {
          output: [
            { type: "function_call", name: "shell", arguments: JSON.stringify({ command: "sleep 600" }) },
          ],
        },
      ],
      20,
    );
    const workspace = freshDir("ws-");
    const dataDir = freshDir("data-");
    const app = new AppServer({
      host: "127.0.0.1",
      port: 0,
      serverUrl: server.url,
      workspace: await Workspace.open(workspace),
      sandbox: { kind: "none", reason: "test" },
      approval: "never",
      allowEnv: [],
      dataDir,
      instructions: "",
      autoCompact: 0,
      contextWindow: async () => 100_000,
    });
    const client = await RobustnessClient.connect(await app.listen());
    const files = (task: string, session: string): string[] =>
      [
        join(dataDir, "app", "tasks", `${task}.json`),
        join(dataDir, "app", "tasks", `${task}.log.jsonl`),
        join(dataDir, "sessions", `${session}.jsonl`),
      ].filter((path) => existsSync(path));

    // While it streams.
    const streaming = await client.create("spark", "talk");
    await client.next((m) => m.type === "delta" && m.task === streaming);
    const first = app.tasks.get(streaming)!;
    assert.equal(files(streaming, streaming).length, 3);
    const removed = client.send({ type: "task.delete", task: streaming });
    await client.nextRemoved(streaming, removed);
    await until(() => !first.busy, "the deleted task's turn to end");
    await nextTurn();
    assert.deepEqual(files(streaming, streaming), []);

    // While its command runs (the second answer asks for one: the first is answered, then this).
    const commanding = await client.create("spark", "first");
    await client.waitForState(commanding, ["done"]);
    client.send({ type: "send", task: commanding, text: "run it" });
    await client.next(
      (m) =>
        m.type === "entry" &&
        m.task === commanding &&
        m.entry.kind === "item" &&
        m.entry.item.type === "command_execution",
    );
    const second = app.tasks.get(commanding)!;
    const deleted = client.send({ type: "task.delete", task: commanding });
    await client.nextRemoved(commanding, deleted);
    // `sleep 600` is killed: the turn ends (a test that hangs here means the command was not).
    await until(() => !second.busy, "the deleted task's command to be stopped");
    await nextTurn();
    assert.deepEqual(files(commanding, commanding), []);
    // Nothing more was said about either task after it was removed.
    const lastRemoved = client.messages.findIndex((m) => m.type === "task.removed" && m.task === commanding);
    assert.ok(
      !client.messages
        .slice(lastRemoved + 1)
        .some((m) => "summary" in m && (m.summary.id === commanding || m.summary.id === streaming)),
    );
    client.close();
    await app.close();
    await server.close();
  });
});
