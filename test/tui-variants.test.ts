/**
 * Best-of-N variants and `--worktree` in the terminal, end to end: the interactive UI in tmux and
 * `spark exec` as a child process, the script engine playing known patches and commands, on real
 * git repositories, with worktrees under a temporary SPARK_HOME.
 *
 * Each variant runs the same script (a patch adding hello.txt, then `basename "$PWD" > who.txt`),
 * so its who.txt names its own worktree: that is how a picked variant's files are told apart. The
 * check command (`variants.check`) passes only where who.txt ends in "-2".
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { hostname } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { setTimeout as sleep } from "node:timers/promises";
import { createTaskWorkspace } from "../src/agent/worktree/task-workspace.js";
import { file, firstLine, freshDir, runToExit, spawnCli } from "./helpers/cli.js";
import { distMissing, TmuxServer, tmuxMissing, type Terminal } from "./helpers/tmux.js";

/** Only so a broken UI fails instead of hanging (several agents and worktrees per step). */
const WAIT = 60_000;

const PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n+world\n*** End Patch";
const ANSWER = "Added hello.txt and who.txt.\nMore detail that the table does not show.";
const AFTER_PICK = "Third answer, after the pick.";
/** Long enough at the script's rate that the queued variant is on screen before the first ends. */
const SLOW_PREFIX = "Working on it: " + "writing the files one by one, ".repeat(6);

function script(name: string, first: string): string {
  const lines = [
    {
      output: [
        ...(first ? [{ type: "message", text: first }] : []),
        { type: "custom_tool_call", name: "apply_patch", input: PATCH },
        {
          type: "function_call",
          name: "shell",
          arguments: JSON.stringify({ command: 'basename "$PWD" > who.txt' }),
        },
      ],
    },
    { output: [{ type: "message", text: ANSWER }] },
    { output: [{ type: "message", text: AFTER_PICK }] },
  ];
  return file(name, lines.map((line) => JSON.stringify(line)).join("\n") + "\n");
}

function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", ...args], {
    cwd,
    encoding: "utf8",
  });
}

/** A git repository with one commit and an uncommitted change (which every worktree must carry). */
function repository(): string {
  const cwd = freshDir("repo-");
  git(cwd, "init", "-q", "-b", "main");
  writeFileSync(join(cwd, "base.txt"), "base\n");
  git(cwd, "add", ".");
  git(cwd, "commit", "-q", "-m", "init");
  writeFileSync(join(cwd, "base.txt"), "base\nuncommitted\n");
  return cwd;
}

/** Runs `body` with SPARK_HOME set to `home` (the worktree module reads it when called). */
async function withHome<T>(home: string, body: () => Promise<T>): Promise<T> {
  const before = process.env.SPARK_HOME;
  process.env.SPARK_HOME = home;
  try {
    return await body();
  } finally {
    if (before === undefined) delete process.env.SPARK_HOME;
    else process.env.SPARK_HOME = before;
  }
}

/**
 * Spark's worktree folders under SPARK_HOME for any workspace: their entries, without the owner marks
 * beside them (`<id>.owner`: which running Spark made it).
 */
function sparkWorktrees(home: string): string[] {
  return sparkEntries(home).filter((entry) => !entry.endsWith(".owner"));
}

/** Every entry of Spark's worktree folders under SPARK_HOME, owner marks included. */
function sparkEntries(home: string): string[] {
  const top = join(home, "worktrees");
  if (!existsSync(top)) return [];
  return readdirSync(top).flatMap((folder) => readdirSync(join(top, folder)));
}

describe("variants and --worktree in the terminal", { skip: tmuxMissing ?? false }, () => {
  const tmux = new TmuxServer();
  before(() => {
    const missing = distMissing();
    assert.equal(missing, undefined, missing);
  });
  after(() => tmux.kill());

  function start(options: { args: string[]; cwd: string; home: string; rate?: number }): Terminal {
    return tmux.start({
      args: ["--rate", String(options.rate ?? 400), ...options.args],
      cwd: options.cwd,
      dataDir: freshDir("data-"),
      env: { SPARK_HOME: options.home },
      columns: 120,
      rows: 40,
    });
  }

  test("/variants 3: a live table (queued past the limit), files and +/-, the check; /diff 2; /pick 2 lands it and removes the rest; /undo takes it back", async () => {
    const cwd = repository();
    const home = freshDir("home-");
    const config = file(
      "variants-config.json",
      JSON.stringify({ variants: { check: "grep -q -- '-2$' who.txt", concurrency: 2 } }),
    );
    const term = start({
      args: ["--engine", "script", "--script", script("variants.jsonl", SLOW_PREFIX), "--config", config],
      cwd,
      home,
      rate: 60,
    });
    await term.ready();
    term.type("/variants 3 add a greeting");
    term.press("Enter");
    // Two run at once; the third waits, and says so.
    await term.waitFor(/^\s*3\s+queued\b/m, "variant 3 queued", WAIT);
    const screen = await term.waitFor(
      (s) => (s.match(/^\s*\d\s+done\b.*$/gm) ?? []).length === 3 && s.includes("/pick K lands one"),
      "three variants done",
      WAIT,
    );
    const rows = screen.match(/^\s*\d\s+done\b.*$/gm)!;
    for (const [index, row] of rows.entries()) {
      // state, temperature, tok/s, 2 files, +3 −0, the check, the answer's first line.
      assert.match(
        row,
        new RegExp(`^\\s*${index + 1}\\s+done\\s+\\d\\.\\d\\s+\\d+\\s+2\\s+\\+3 −0\\s+`),
        row,
      );
      assert.match(row, index === 1 ? /✓ pass/ : /✗ exit 1/, row);
      assert.match(row, /Added hello\.txt and who\.txt\./, row);
    }
    assert.deepEqual(
      rows.map((row) => /done\s+(\d\.\d)/.exec(row)![1]),
      ["0.2", "0.6", "1.0"],
    );
    // Nothing lands before the pick.
    assert.equal(existsSync(join(cwd, "hello.txt")), false);
    captureTable(term);

    term.type("/diff 2");
    term.press("Enter");
    const diff = await term.waitFor(/^\+tui-\S+-v1-2$/m, "variant 2's who.txt in its diff", WAIT);
    assert.match(diff, /^\+\+\+ b\/hello\.txt$/m);
    assert.match(diff, /^\+world$/m);
    const id = /^\+(tui-\S+-v1-2)$/m.exec(diff)![1]!;
    // The pager closes on q, which types nothing into the composer.
    term.type("q");
    await term.waitFor((screen) => !screen.includes("q closes"), "the pager closed", WAIT);

    term.type("/pick 2");
    term.press("Enter");
    const picked = await term.waitFor("✓ variant 2 landed", "the pick", WAIT);
    assert.equal(readFileSync(join(cwd, "who.txt"), "utf8"), `${id}\n`);
    assert.equal(readFileSync(join(cwd, "hello.txt"), "utf8"), "hello\nworld\n");
    assert.equal(readFileSync(join(cwd, "base.txt"), "utf8"), "base\nuncommitted\n");
    // The others are gone: no worktree, no branch, no folder.
    assert.deepEqual(sparkEntries(home), []);
    assert.equal(git(cwd, "worktree", "list").trim().split("\n").length, 1);
    assert.equal(git(cwd, "branch", "--list", "spark/*").trim(), "");
    assert.deepEqual(readdirSync(join(home, "worktrees")), [], "their folder too");
    // Its text is not repeated below: only the table's first lines carry it.
    assert.equal(picked.split("More detail that the table does not show.").length - 1, 0);
    assert.equal(picked.split("Added hello.txt and who.txt.").length - 1, 3);

    // The conversation continues from the picked variant's turn.
    await term.idle();
    term.type("and now?");
    term.press("Enter");
    await term.waitFor(AFTER_PICK, "the next answer", WAIT);
    await term.idle();
    // The pick was a checkpoint of its own: /undo takes its files back out.
    term.type("/undo");
    term.press("Enter");
    await term.waitFor(/^↶ undid/m, "the undo", WAIT);
    assert.equal(existsSync(join(cwd, "hello.txt")), false);
    assert.equal(existsSync(join(cwd, "who.txt")), false);
    assert.equal(readFileSync(join(cwd, "base.txt"), "utf8"), "base\nuncommitted\n");
    term.type("/quit");
    term.press("Enter");
    await term.waitFor("EXITED 0", "the exit", WAIT);
  });

  test("--worktree: the session's files stay out of the directory until /apply; a conflict writes nothing", async () => {
    const cwd = repository();
    const home = freshDir("home-");
    const term = start({
      args: ["--worktree", "--engine", "script", "--script", script("worktree.jsonl", "")],
      cwd,
      home,
    });
    await term.waitFor(/⎇ working in worktree spark\/tui-/, "the worktree line", WAIT);
    const [folder] = readdirSync(join(home, "worktrees"));
    const [id] = sparkWorktrees(home);
    assert.match(id ?? "", /^tui-/);
    const path = join(home, "worktrees", folder!, id!);
    await term.idle();
    assert.match(term.statusLine(), /⎇ worktree/);
    term.type("add a greeting");
    term.press("Enter");
    await term.waitFor("More detail that the table does not show.", "the answer", WAIT);
    await term.idle();
    assert.equal(readFileSync(join(path, "hello.txt"), "utf8"), "hello\nworld\n");
    assert.equal(existsSync(join(cwd, "hello.txt")), false);
    assert.equal(existsSync(join(cwd, "who.txt")), false);

    // The user wrote hello.txt differently meanwhile: nothing is applied, the file is named.
    writeFileSync(join(cwd, "hello.txt"), "mine\n");
    term.type("/apply");
    term.press("Enter");
    await term.waitFor(/hello\.txt: added by the task and, differently/, "the conflict", WAIT);
    assert.equal(existsSync(join(cwd, "who.txt")), false, "nothing half-applied");
    assert.equal(readFileSync(join(cwd, "hello.txt"), "utf8"), "mine\n");

    execFileSync("rm", [join(cwd, "hello.txt")]);
    term.type("/apply");
    term.press("Enter");
    await term.waitFor("✓ applied to", "the apply", WAIT);
    assert.equal(readFileSync(join(cwd, "hello.txt"), "utf8"), "hello\nworld\n");
    assert.equal(readFileSync(join(cwd, "who.txt"), "utf8").trim().startsWith("tui-"), true);

    // /discard drops the session's changes and goes on in a fresh worktree of the files as they are.
    writeFileSync(join(path, "scratch.txt"), "not wanted\n");
    term.type("/discard");
    term.press("Enter");
    await term.waitFor("discarded 3 changed files; a fresh worktree", "the discard", WAIT);
    assert.equal(existsSync(join(path, "scratch.txt")), false);
    assert.equal(readFileSync(join(path, "hello.txt"), "utf8"), "hello\nworld\n", "from the applied files");
    assert.equal(existsSync(join(cwd, "scratch.txt")), false);
    term.type("/quit");
    term.press("Enter");
    await term.waitFor("worktree removed (the session changed no files)", "the exit", WAIT);
    assert.deepEqual(sparkEntries(home), []);
    assert.equal(git(cwd, "branch", "--list", "spark/*").trim(), "");
  });

  test("Esc stops running variants; none finished, their worktrees are removed", async () => {
    const cwd = repository();
    const home = freshDir("home-");
    const term = start({
      args: ["--engine", "script", "--script", script("stopped.jsonl", SLOW_PREFIX.repeat(4))],
      cwd,
      home,
      rate: 20,
    });
    await term.ready();
    term.type("/variants 2 add a greeting");
    term.press("Enter");
    await term.waitFor(/^\s*2\s+running\s.*Working on it/m, "variant 2 streaming", WAIT);
    term.press("Escape");
    await term.waitFor("no variant finished; their worktrees are removed", "the stop", WAIT);
    await term.idle();
    assert.match(term.screen(), /^\s*1\s+cancelled\b/m);
    assert.deepEqual(sparkEntries(home), []);
    assert.equal(git(cwd, "branch", "--list", "spark/*").trim(), "");
    assert.equal(existsSync(join(cwd, "hello.txt")), false);
  });

  test("spark exec --worktree leaves the directory untouched and its result on its branch", async () => {
    const cwd = repository();
    const home = freshDir("home-");
    const result = await runToExit(
      [
        "exec",
        "--worktree",
        "-C",
        cwd,
        "--engine",
        "script",
        "--script",
        script("exec.jsonl", ""),
        "add a greeting",
      ],
      { SPARK_HOME: home },
    );
    assert.equal(result.code, 0, result.stderr);
    assert.equal(existsSync(join(cwd, "hello.txt")), false);
    assert.equal(readFileSync(join(cwd, "base.txt"), "utf8"), "base\nuncommitted\n");
    assert.equal(git(cwd, "status", "--porcelain").trim(), "M base.txt");
    const branch = /result on branch (spark\/exec-\S+) \(commit [0-9a-f]+\): 2 files changed \(\+3 −0\)/.exec(
      result.stderr,
    )?.[1];
    assert.ok(branch, result.stderr);
    assert.match(result.stderr, /^spark: {3}A hello\.txt \+2 −0$/m);
    assert.match(result.stderr, /^spark: worktree: \S+/m);
    assert.equal(git(cwd, "show", `${branch}:hello.txt`), "hello\nworld\n");
    // The branch starts from what the user saw: their uncommitted change included.
    assert.equal(git(cwd, "show", `${branch}:base.txt`), "base\nuncommitted\n");
    assert.match(git(cwd, "show", "--stat", branch), /spark exec: add a greeting/);

    // With --json the last event says the same; a task that changed nothing leaves no worktree.
    const json = await runToExit(
      [
        "exec",
        "--json",
        "--worktree",
        "-C",
        cwd,
        "--engine",
        "script",
        "--script",
        script("exec2.jsonl", ""),
        "again",
      ],
      { SPARK_HOME: home },
    );
    assert.equal(json.code, 0, json.stderr);
    const events = json.stdout
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.match(String((events[0]!.worktree as { branch?: string }).branch), /^spark\/exec-/);
    const last = events.at(-1)!;
    assert.equal(last.type, "worktree");
    assert.equal(last.removed, false);
    assert.deepEqual(
      (last.files as { path: string }[]).map((f) => f.path),
      ["hello.txt", "who.txt"],
    );
    assert.equal(git(cwd, "show", `${String(last.branch)}:hello.txt`), "hello\nworld\n");
    const nothing = await runToExit(
      [
        "exec",
        "--worktree",
        "-C",
        cwd,
        "--engine",
        "script",
        "--script",
        file("idle.jsonl", '{"output":[{"type":"message","text":"Nothing to do."}]}\n'),
        "look",
      ],
      { SPARK_HOME: home },
    );
    assert.equal(nothing.code, 0, nothing.stderr);
    assert.match(nothing.stderr, /worktree: no changes; removed/);
    assert.equal(sparkWorktrees(home).length, 2, "the two results stay, the empty one is gone");

    // `spark app` on the same directory prunes its own stale workspaces at start, not these. A plain
    // folder there goes last (after every worktree git lists): once it is gone the prune is done.
    const stale = await withHome(home, () => createTaskWorkspace(cwd, "20990101T000000-stale"));
    // Its owner was this test process, which still runs: make it a Spark that has since ended (a
    // process that exited), so that the workspace is stale, not another running instance's.
    const ended = spawnSync("true");
    writeFileSync(`${stale.path}.owner`, JSON.stringify({ pid: ended.pid, started: null, host: hostname() }));
    const lastEntry = join(stale.path, "..", "zz-stale-folder");
    mkdirSync(lastEntry);
    const app = spawnCli(
      ["app", cwd, "--port", "0", "--quiet", "--engine", "script", "--script", script("app.jsonl", "")],
      { SPARK_HOME: home },
    );
    try {
      await firstLine(app);
      const deadline = Date.now() + WAIT;
      while (existsSync(lastEntry) && Date.now() < deadline) await sleep(50);
      assert.equal(existsSync(lastEntry), false, "the prune ran");
      assert.equal(existsSync(stale.path), false, "the app's stale workspace is pruned");
      assert.deepEqual(sparkWorktrees(home).filter((id) => id.startsWith("exec-")).length, 2);
      assert.equal(git(cwd, "show", `${branch}:hello.txt`), "hello\nworld\n");
    } finally {
      app.child.kill();
      await app.exited;
    }
  });
});

/** With SPARK_TUI_CAPTURES=DIR, the finished variants table is saved there as variants-table.txt (docs/tui/). */
function captureTable(term: Terminal): void {
  const dir = process.env.SPARK_TUI_CAPTURES;
  if (!dir) return;
  mkdirSync(dir, { recursive: true });
  const lines = term.screen().split("\n");
  const start = lines.findIndex((line) => /^\s*#\s+state\s+temp/.test(line));
  const end = lines.findIndex((line) => line.startsWith("/pick K lands one"));
  const table = lines.slice(Math.max(0, start - 1), end + 1).join("\n");
  writeFileSync(
    join(dir, "variants-table.txt"),
    table.replace(/\/tmp\/spark-cli-test-\w+\/repo-\w+/g, "~/project") + "\n",
  );
}
