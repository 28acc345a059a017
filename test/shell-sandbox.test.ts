/**
 * The agent's command execution with real processes and real temp dirs: `runCommand` (exit codes,
 * interleaved output, missing programs, timeouts and aborts that kill the whole process group,
 * bounded head-and-tail truncation, streaming, an environment without secrets), the bubblewrap
 * sandbox (writes confined to the workspace, protected paths such as .git read-only, the home
 * directory's secrets and host Unix sockets hidden, no network, the fallbacks when bwrap is missing
 * or disabled) and the approval policy (known-safe commands judged by what they can do, the decision
 * matrix, protected patches).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import os from "node:os";
import path from "node:path";
import { after, before, describe, test, type TestContext } from "node:test";
import {
  decideCommand,
  decidePatch,
  isKnownSafeCommand,
  type ApprovalDecision,
  type ApprovalMode,
} from "../src/agent/tools/approval.js";
import { describeSandbox, detectSandbox, sandboxedArgv, type Sandbox } from "../src/agent/sandbox/sandbox.js";
import { commandEnvironment } from "../src/agent/sandbox/secrets.js";
import { unixSocketFilter } from "../src/agent/sandbox/socket-filter.js";
import { formatCommandOutput, runCommand, type RunCommandOptions } from "../src/agent/sandbox/shell.js";

const NO_SANDBOX: Sandbox = { kind: "none", reason: "test" };

const dirs: string[] = [];
async function tempDir(prefix = "spark-shell-"): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix));
  dirs.push(dir);
  return dir;
}
after(async () => {
  await Promise.all(dirs.map((dir) => rm(dir, { recursive: true, force: true })));
});

/** A process that exists and is not a zombie waiting for a reaper. */
function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch {
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3) !== "Z";
  } catch {
    return false;
  }
}

async function waitFor(check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return check();
}

describe("runCommand", () => {
  let ws: string;
  let base: RunCommandOptions;
  before(async () => {
    ws = await tempDir();
    base = { workspaceRoot: ws, cwd: ws, sandbox: NO_SANDBOX };
  });

  test("reports exit codes and runs in cwd", async () => {
    const ok = await runCommand(["bash", "-c", "pwd"], base);
    assert.equal(ok.exitCode, 0);
    assert.equal(ok.output, `${ws}\n`);
    assert.equal(ok.signal, null);
    assert.equal(ok.timedOut, false);
    assert.equal(ok.cancelled, false);
    assert.equal(ok.truncated, false);
    const failed = await runCommand(["bash", "-c", "exit 7"], base);
    assert.equal(failed.exitCode, 7);
    const viaString = await runCommand("echo from-login-shell; exit 3", base);
    assert.equal(viaString.exitCode, 3);
    assert.match(viaString.output, /from-login-shell\n/);
  });

  test("interleaves stdout and stderr in arrival order", async () => {
    const r = await runCommand(
      ["bash", "-c", "echo one; sleep 0.05; echo two >&2; sleep 0.05; echo three; sleep 0.05; echo four >&2"],
      base,
    );
    assert.equal(r.exitCode, 0);
    assert.equal(r.output, "one\ntwo\nthree\nfour\n");
  });

  test("a missing program is exit code 127 with the shell's message, not an exception", async () => {
    const viaShell = await runCommand("definitely-not-a-command-xyz --flag", base);
    assert.equal(viaShell.exitCode, 127);
    assert.match(viaShell.output, /definitely-not-a-command-xyz: command not found/);
    const direct = await runCommand(["definitely-not-a-command-xyz"], base);
    assert.equal(direct.exitCode, 127);
    assert.match(direct.output, /definitely-not-a-command-xyz: command not found/);
  });

  test("a spawn failure (vanished sandbox binary, missing cwd) is exitCode null with the error", async () => {
    const vanished: Sandbox = { kind: "bubblewrap", path: path.join(ws, "no-such-bwrap"), network: false };
    const r = await runCommand("true", { ...base, sandbox: vanished });
    assert.equal(r.exitCode, null);
    assert.match(r.output, /failed to start the sandbox .*no-such-bwrap.*ENOENT/);
    const missingCwd = await runCommand("true", { ...base, cwd: path.join(ws, "gone") });
    assert.equal(missingCwd.exitCode, null);
    assert.match(missingCwd.output, /working directory does not exist/);
    const empty = await runCommand([], base);
    assert.equal(empty.exitCode, null);
  });

  test("a timeout kills the whole process group quickly, grandchildren included", async () => {
    const pidFile = path.join(ws, "grandchild.pid");
    const started = Date.now();
    const r = await runCommand(["bash", "-c", `sleep 30 & echo $! > ${pidFile}; sleep 30`], {
      ...base,
      timeoutMs: 300,
    });
    assert.ok(Date.now() - started < 5_000, `took ${Date.now() - started} ms`);
    assert.equal(r.timedOut, true);
    assert.equal(r.exitCode, null);
    assert.equal(r.signal, "SIGTERM");
    assert.match(r.output, /\[command timed out and was killed after 300 ms\]\n$/);
    const pid = Number((await readFile(pidFile, "utf8")).trim());
    assert.ok(pid > 0);
    assert.ok(await waitFor(() => !isAlive(pid), 3_000), `grandchild sleep ${pid} still running`);
    assert.match(formatCommandOutput(r), /Timed out/);
  });

  test("a command ignoring SIGTERM is killed with SIGKILL after the grace period", async () => {
    const started = Date.now();
    const r = await runCommand(["bash", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"], {
      ...base,
      timeoutMs: 200,
    });
    const took = Date.now() - started;
    assert.equal(r.timedOut, true);
    assert.equal(r.signal, "SIGKILL");
    assert.ok(took >= 2_000 && took < 6_000, `took ${took} ms`);
  });

  test("an AbortSignal cancels the command and kills its group", async () => {
    const pidFile = path.join(ws, "abort.pid");
    const controller = new AbortController();
    const promise = runCommand(["bash", "-c", `sleep 30 & echo $! > ${pidFile}; echo started; sleep 30`], {
      ...base,
      signal: controller.signal,
      onOutput: (chunk) => {
        if (chunk.includes("started")) controller.abort();
      },
    });
    const started = Date.now();
    const r = await promise;
    assert.ok(Date.now() - started < 5_000);
    assert.equal(r.cancelled, true);
    assert.equal(r.timedOut, false);
    assert.equal(r.exitCode, null);
    assert.match(r.output, /^started\n\[command cancelled and killed\]\n$/);
    const pid = Number((await readFile(pidFile, "utf8")).trim());
    assert.ok(await waitFor(() => !isAlive(pid), 3_000), `background sleep ${pid} still running`);
    assert.match(formatCommandOutput(r), /Cancelled/);

    const already = await runCommand("echo never", { ...base, signal: AbortSignal.abort() });
    assert.equal(already.cancelled, true);
    assert.doesNotMatch(already.output, /never/);
  });

  test("~1 MB of output keeps the head, the tail and a marker, within the budget", async () => {
    const script =
      "echo HEAD-START; for i in $(seq 1 20000); do printf 'line %05d %s\\n' $i xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx; done; echo TAIL-END";
    const budget = 4096;
    const r = await runCommand(["bash", "-c", script], { ...base, maxOutputBytes: budget });
    assert.equal(r.exitCode, 0);
    assert.equal(r.truncated, true);
    assert.ok(r.output.startsWith("HEAD-START\nline 00001 "));
    assert.ok(r.output.endsWith("line 20000 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\nTAIL-END\n"));
    const marker = /\n\[… (\d+) bytes of output omitted …\]\n/.exec(r.output);
    assert.ok(marker, "marker line present");
    const total =
      "HEAD-START\n".length + 20_000 * "line 00001 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n".length + 9;
    assert.ok(total > 900_000);
    assert.equal(Number(marker[1]), total - budget);
    assert.ok(r.output.length <= budget + marker[0].length, `${r.output.length} chars`);
    assert.match(formatCommandOutput(r), /Output truncated/);
  });

  test("output within the budget is untouched", async () => {
    const r = await runCommand(["bash", "-c", "printf 'a%.0s' $(seq 1 100)"], {
      ...base,
      maxOutputBytes: 100,
    });
    assert.equal(r.truncated, false);
    assert.equal(r.output, "a".repeat(100));
  });

  test("onOutput streams chunks as they arrive, before the command ends", async () => {
    const chunks: string[] = [];
    let firstAt = 0;
    const r = await runCommand(["bash", "-c", "echo first; sleep 0.4; echo second"], {
      ...base,
      onOutput: (chunk) => {
        if (chunks.length === 0) firstAt = Date.now();
        chunks.push(chunk);
      },
    });
    const endedAt = Date.now();
    assert.equal(r.exitCode, 0);
    assert.equal(chunks.join(""), "first\nsecond\n");
    assert.equal(chunks[0], "first\n");
    assert.ok(endedAt - firstAt >= 300, `first chunk only ${endedAt - firstAt} ms before the end`);
  });

  test("a background process left behind does not keep the call waiting", async () => {
    const started = Date.now();
    const r = await runCommand(["bash", "-c", "sleep 5 & echo done"], base);
    assert.equal(r.exitCode, 0);
    assert.equal(r.output, "done\n");
    assert.ok(Date.now() - started < 3_000, `took ${Date.now() - started} ms`);
  });

  test("passes env and formats the result like Codex's shell tool", async () => {
    const r = await runCommand(["bash", "-c", 'echo "$SPARK_TEST_VAR"'], {
      ...base,
      env: { ...process.env, SPARK_TEST_VAR: "hello" },
    });
    assert.equal(r.output, "hello\n");
    assert.match(formatCommandOutput(r), /^Exit code: 0\nWall time: \d+\.\d seconds\nOutput:\nhello\n$/);
    assert.match(
      formatCommandOutput({ ...r, exitCode: null, signal: "SIGKILL" }),
      /^Exit code: none \(killed by SIGKILL\)\n/,
    );
  });

  const SECRETS: Record<string, string> = {
    OPENAI_API_KEY: "sk-openai",
    SPARK_API_KEY: "sk-spark",
    AWS_ACCESS_KEY_ID: "AKIA",
    AWS_SECRET_ACCESS_KEY: "aws-secret",
    AWS_SESSION_TOKEN: "aws-token",
    GITHUB_TOKEN: "ghp",
    PGPASSWORD: "pg",
    MYSQL_PWD: "mysql",
    NPM_CONFIG__AUTH: "npm",
    SSH_AUTH_SOCK: "/run/user/1000/ssh-agent.sock",
    DBUS_SESSION_BUS_ADDRESS: "unix:path=/run/user/1000/bus",
    DATABASE_URL: "postgres://app:hunter2@db.example.com/app",
  };

  test("commands get the environment without secrets by default, with or without a sandbox", async (t) => {
    const saved = { ...process.env };
    t.after(() => {
      for (const name of Object.keys(process.env)) if (!(name in saved)) delete process.env[name];
      Object.assign(process.env, saved);
    });
    Object.assign(process.env, SECRETS, {
      SPARK_TEST_VISIBLE: "yes",
      PUBLIC_URL: "https://example.com/app",
    });
    const r = await runCommand(["env"], base);
    assert.equal(r.exitCode, 0, r.output);
    const seen = new Map(r.output.split("\n").map((line) => [line.slice(0, line.indexOf("=")), line]));
    for (const name of Object.keys(SECRETS))
      assert.equal(seen.has(name), false, `${name} reached the command`);
    for (const name of ["SPARK_TEST_VISIBLE", "PUBLIC_URL", "PATH", "HOME"]) assert.ok(seen.has(name), name);
  });

  test("an unsandboxed command cannot read the scrubbed secrets back from /proc/$PPID/environ", async () => {
    // A fresh process whose environment block (what exec gave it) holds the secrets, as spark's does.
    const script = [
      `const { runCommand } = await import(${JSON.stringify(new URL("../src/agent/sandbox/shell.ts", import.meta.url).href)});`,
      `const r = await runCommand("tr '\\\\0' '\\\\n' < /proc/$PPID/environ", { workspaceRoot: process.cwd(), cwd: process.cwd(), sandbox: { kind: "none", reason: "test" } });`,
      'const after = await runCommand("printenv SPARK_TEST_VISIBLE", { workspaceRoot: process.cwd(), cwd: process.cwd(), sandbox: { kind: "none", reason: "test" } });',
      "console.log(JSON.stringify({ output: r.output, exitCode: r.exitCode, after: after.output, kept: { token: process.env.SPARK_TEST_TOKEN, url: process.env.DATABASE_URL } }));",
    ].join("\n");
    const child = spawn(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], {
      cwd: new URL("..", import.meta.url).pathname,
      env: {
        ...process.env,
        SPARK_TEST_TOKEN: "tok-9f3a-secret",
        DATABASE_URL: "postgres://app:pw-77c1@db.example.com/app",
        SPARK_TEST_VISIBLE: "visible-42",
      },
      stdio: ["ignore", "pipe", "inherit"],
    });
    let stdout = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.on("close", resolve));
    assert.equal(code, 0, stdout);
    const result = JSON.parse(stdout.trim().split("\n").at(-1)!) as {
      output: string;
      exitCode: number;
      after: string;
      kept: { token: string; url: string };
    };
    assert.equal(result.exitCode, 0, result.output);
    assert.match(result.output, /^SPARK_TEST_VISIBLE=visible-42$/m, "the parent's environ was read");
    assert.doesNotMatch(result.output, /tok-9f3a-secret|pw-77c1/);
    // The server itself still has them, and the environment it gives commands is unchanged.
    assert.deepEqual(result.kept, {
      token: "tok-9f3a-secret",
      url: "postgres://app:pw-77c1@db.example.com/app",
    });
    assert.equal(result.after, "visible-42\n");
  });

  test("commandEnvironment drops secret-looking variables except those allowed by name or glob", () => {
    const env = {
      ...SECRETS,
      PATH: "/usr/bin",
      PWD: "/w",
      OLDPWD: "/",
      LANG: "C.UTF-8",
      GIT_AUTHOR_NAME: "A",
    };
    assert.deepEqual(commandEnvironment(env), {
      PATH: "/usr/bin",
      PWD: "/w",
      OLDPWD: "/",
      LANG: "C.UTF-8",
      GIT_AUTHOR_NAME: "A",
    });
    const allowed = commandEnvironment(env, ["OPENAI_API_KEY", "AWS_*"]);
    assert.equal(allowed.OPENAI_API_KEY, "sk-openai");
    assert.equal(allowed.AWS_SECRET_ACCESS_KEY, "aws-secret");
    assert.equal(allowed.AWS_SESSION_TOKEN, "aws-token");
    assert.equal(allowed.SPARK_API_KEY, undefined);
    assert.equal(allowed.GITHUB_TOKEN, undefined);
  });
});

describe("sandbox", () => {
  let sandbox: Sandbox;
  let ws: string;
  let outside: string;
  const skipReason = (): string | undefined =>
    sandbox.kind === "none" ? `bubblewrap unavailable here: ${sandbox.reason}` : undefined;
  const sandboxTest = (name: string, fn: (t: TestContext) => Promise<void>) =>
    test(name, async (t) => {
      const reason = skipReason();
      if (reason !== undefined) return t.skip(reason);
      await fn(t);
    });
  const run = (script: string, options: Partial<RunCommandOptions> = {}) =>
    runCommand(["bash", "-c", script], {
      workspaceRoot: ws,
      cwd: ws,
      sandbox,
      timeoutMs: 10_000,
      ...options,
    });

  before(async () => {
    sandbox = await detectSandbox();
    ws = await tempDir("spark-ws-");
    outside = await tempDir("spark-outside-");
  });

  test("detectSandbox finds a working bwrap on this machine", (t) => {
    const reason = skipReason();
    if (reason !== undefined) return t.skip(reason);
    assert.equal(sandbox.kind, "bubblewrap");
    assert.ok(sandbox.kind === "bubblewrap" && path.isAbsolute(sandbox.path));
    assert.equal(sandbox.kind === "bubblewrap" && sandbox.network, false);
  });

  sandboxTest("writes inside the workspace succeed, also in subdirectories", async () => {
    await mkdir(path.join(ws, "sub"));
    const r = await run("echo inside > file.txt && mkdir nested && echo deeper > nested/f", {
      cwd: path.join(ws, "sub"),
    });
    assert.equal(r.exitCode, 0, r.output);
    assert.equal(await readFile(path.join(ws, "sub", "file.txt"), "utf8"), "inside\n");
    assert.equal(await readFile(path.join(ws, "sub", "nested", "f"), "utf8"), "deeper\n");
  });

  sandboxTest(
    "protected paths are read-only: .git (dirs at any depth, a submodule's gitdir file), .vscode",
    async () => {
      const repo = await tempDir("spark-ws-git-");
      const files: Record<string, string> = {
        ".git/config": "[core]\n",
        ".git/hooks/README": "hooks\n",
        ".git/modules/lib/config": "[core]\n",
        "lib/.git": "gitdir: ../.git/modules/lib\n",
        "vendor/tool/.git/config": "[core]\n",
        ".vscode/settings.json": "{}\n",
        "src/a.ts": "a\n",
      };
      for (const [rel, text] of Object.entries(files)) {
        await mkdir(path.dirname(path.join(repo, rel)), { recursive: true });
        await writeFile(path.join(repo, rel), text);
      }
      const attempts = [
        "echo '[core] fsmonitor = touch /tmp/pwned' >> .git/config",
        "echo 'touch /tmp/pwned' > .git/hooks/pre-commit",
        "rm .git/hooks/README",
        "mv .git .git-old",
        "echo x >> .git/modules/lib/config",
        "echo 'gitdir: ../evil' > lib/.git",
        "echo x >> vendor/tool/.git/config",
        "echo '{}' > .vscode/tasks.json",
      ];
      for (const attempt of attempts) {
        const r = await run(attempt, { workspaceRoot: repo, cwd: repo });
        assert.notEqual(r.exitCode, 0, attempt);
        assert.match(r.output, /Read-only file system|Device or resource busy/, attempt);
      }
      for (const [rel, text] of Object.entries(files)) {
        assert.equal(await readFile(path.join(repo, rel), "utf8"), text, rel);
      }
      assert.equal(existsSync(path.join(repo, ".git", "hooks", "pre-commit")), false);
      const ok = await run("echo b > src/b.ts && cat .git/config", { workspaceRoot: repo, cwd: repo });
      assert.equal(ok.exitCode, 0, ok.output);
      assert.equal(ok.output, "[core]\n");
      // Without the sandbox nothing stops it: the attempts above are real.
      const unconfined = await run("echo x >> .git/config", {
        workspaceRoot: repo,
        cwd: repo,
        sandbox: NO_SANDBOX,
      });
      assert.equal(unconfined.exitCode, 0);
    },
  );

  sandboxTest(
    "a .git (or .vscode) missing at the root cannot be created: git init and a planted fsmonitor fail, nothing is left",
    async () => {
      const plain = await tempDir("spark-ws-nogit-");
      await writeFile(path.join(plain, "a.txt"), "a\n");
      const marker = path.join(outside, "fsmonitor-ran");
      const attempts = [
        `git init -q . && git config core.fsmonitor 'touch ${marker}'`,
        "mkdir -p .git/hooks && echo 'touch /tmp/pwned' > .git/hooks/pre-commit",
        "echo 'gitdir: ./evil' > .git",
        "mkdir -p .vscode && echo '{}' > .vscode/tasks.json",
        "mv a.txt .git",
      ];
      for (const attempt of attempts) {
        const r = await run(attempt, { workspaceRoot: plain, cwd: plain });
        assert.notEqual(r.exitCode, 0, `${attempt}: ${r.output}`);
        assert.match(
          r.output,
          /Read-only file system|Device or resource busy|Is a directory|Permission denied/,
          attempt,
        );
      }
      // The mount points bwrap made are gone again; the workspace is as it was.
      assert.deepEqual((await readdir(plain)).sort(), ["a.txt"]);
      // Other writes, a nested repository included, still work; git run later sees no planted config.
      const ok = await run("echo b > b.txt && mkdir sub && git -C sub init -q && echo done", {
        workspaceRoot: plain,
        cwd: plain,
      });
      assert.equal(ok.exitCode, 0, ok.output);
      assert.equal(existsSync(marker), false);
      // Without the sandbox the first attempt is real.
      const unconfined = await run(attempts[0]!, { workspaceRoot: plain, cwd: plain, sandbox: NO_SANDBOX });
      assert.equal(unconfined.exitCode, 0, unconfined.output);
      assert.match(await readFile(path.join(plain, ".git", "config"), "utf8"), /fsmonitor/);
    },
  );

  sandboxTest(
    "concurrent commands share the root's placeholders; the last one out removes them",
    async () => {
      const plain = await tempDir("spark-ws-nogit-");
      const gate = path.join(plain, "gate");
      const slow = run(`while [ ! -e gate ]; do sleep 0.05; done; mkdir .git`, {
        workspaceRoot: plain,
        cwd: plain,
        timeoutMs: 60_000,
      });
      assert.ok(
        await waitFor(() => existsSync(path.join(plain, ".git")), 30_000),
        "the first command started",
      );
      const second = await run("mkdir .git/x", { workspaceRoot: plain, cwd: plain });
      assert.notEqual(second.exitCode, 0, second.output);
      assert.equal(existsSync(path.join(plain, ".git")), true, "still held by the first command");
      await writeFile(gate, "");
      const first = await slow;
      assert.notEqual(first.exitCode, 0, first.output);
      assert.deepEqual((await readdir(plain)).sort(), ["gate"]);
    },
  );

  sandboxTest("writes outside the workspace fail and leave nothing behind", async () => {
    const target = path.join(outside, "escaped.txt");
    const r = await run(`echo escaped > ${target}`);
    assert.notEqual(r.exitCode, 0);
    assert.equal(existsSync(target), false);
    const tmpFile = path.join(os.tmpdir(), `spark-escape-${process.pid}.txt`);
    await run(`echo escaped > ${tmpFile}`);
    assert.equal(existsSync(tmpFile), false, "private /tmp is discarded");
  });

  sandboxTest("writes to $HOME fail", async (t) => {
    const home = os.homedir();
    if (home.startsWith(ws)) return t.skip("HOME lies inside the test workspace");
    const target = path.join(home, `.spark-sandbox-test-${process.pid}`);
    const r = await run(`echo escaped > ${target}`);
    assert.notEqual(r.exitCode, 0);
    assert.match(r.output, /Read-only file system|Permission denied/);
    assert.equal(existsSync(target), false);
  });

  sandboxTest("the network is unshared: only lo, and a local TCP server is unreachable", async (t) => {
    const dev = await run("cat /proc/net/dev");
    assert.equal(dev.exitCode, 0, dev.output);
    const interfaces = dev.output
      .split("\n")
      .slice(2)
      .map((line) => line.split(":")[0]!.trim())
      .filter(Boolean);
    assert.deepEqual(interfaces, ["lo"]);

    const server: Server = createServer((socket) => socket.end("hello\n"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as { port: number }).port;
    const connect = `exec 3<>/dev/tcp/127.0.0.1/${port} && cat <&3`;

    const unsandboxed = await run(connect, { sandbox: NO_SANDBOX });
    assert.equal(unsandboxed.exitCode, 0, unsandboxed.output);
    assert.equal(unsandboxed.output, "hello\n");
    const sandboxed = await run(connect);
    assert.notEqual(sandboxed.exitCode, 0);
    assert.match(sandboxed.output, /Connection refused/);
  });

  sandboxTest("network: true shares the network", async (t) => {
    const withNet = await detectSandbox({ network: true });
    assert.equal(withNet.kind, "bubblewrap");
    const server: Server = createServer((socket) => socket.end("hello\n"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
    const port = (server.address() as { port: number }).port;
    const r = await run(`exec 3<>/dev/tcp/127.0.0.1/${port} && cat <&3`, { sandbox: withNet });
    assert.equal(r.exitCode, 0, r.output);
    assert.equal(r.output, "hello\n");
  });

  sandboxTest(
    "network: true keeps the host's abstract Unix sockets (X11, D-Bus) out of reach; TCP, pipes and socketpairs work",
    async (t) => {
      const withNet = await detectSandbox({ network: true });
      assert.equal(withNet.kind, "bubblewrap");
      const name = `\0spark-test-abstract-${process.pid}`;
      const server: Server = createServer((socket) => socket.end("hello\n"));
      await new Promise<void>((resolve) => server.listen(name, resolve));
      t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
      const node = (code: string) => `${JSON.stringify(process.execPath)} -e ${JSON.stringify(code)}`;
      const connect = node(
        `require("net").connect(${JSON.stringify(name)}).on("data", (d) => process.stdout.write(d)).on("error", (e) => { console.log(e.code); process.exitCode = 1; })`,
      );
      const plain = await run(connect, { sandbox: NO_SANDBOX });
      assert.equal(plain.output, "hello\n", "the abstract socket answers outside the sandbox");
      const networked = await run(connect, { sandbox: withNet });
      assert.notEqual(networked.exitCode, 0, networked.output);
      assert.match(networked.output, /EACCES/);
      const isolated = await run(connect);
      assert.notEqual(isolated.exitCode, 0, isolated.output);
      assert.match(isolated.output, /ECONNREFUSED/, "without the network it is another namespace's");
      // A Unix socket in the workspace cannot be made either, with the network.
      const listen = await run(
        node(
          `require("net").createServer().listen("s.sock", () => console.log("listening")).on("error", (e) => { console.log(e.code); process.exit(1); })`,
        ),
        {
          sandbox: withNet,
        },
      );
      assert.match(listen.output, /EACCES/);
      // What programs need keeps working: children over pipes and socketpairs, python, TCP.
      const children = await run(
        `echo piped | cat && ${node(`const r = require("child_process").spawnSync("echo", ["child"], { stdio: "pipe" }); process.stdout.write(r.stdout); require("child_process").spawn(process.execPath, ["-e", "process.send('ipc ok', () => process.exit())"], { stdio: ["ignore", "inherit", "inherit", "ipc"] }).on("message", (m) => console.log(m));`)}`,
        { sandbox: withNet },
      );
      assert.equal(children.exitCode, 0, children.output);
      assert.equal(children.output, "piped\nchild\nipc ok\n");
      const tcp: Server = createServer((socket) => socket.end("tcp\n"));
      await new Promise<void>((resolve) => tcp.listen(0, "127.0.0.1", resolve));
      t.after(() => new Promise<void>((resolve) => tcp.close(() => resolve())));
      const port = (tcp.address() as { port: number }).port;
      const viaTcp = await run(`exec 3<>/dev/tcp/127.0.0.1/${port} && cat <&3`, { sandbox: withNet });
      assert.equal(viaTcp.output, "tcp\n");
      // --sandbox-allow-secrets lifts it with the rest.
      const allowed = await run(connect, { sandbox: { ...withNet, allowSecrets: true } as Sandbox });
      assert.equal(allowed.output, "hello\n");
    },
  );

  sandboxTest("a timeout inside the sandbox kills the sandboxed processes too", async () => {
    const marker = path.join(ws, "survivor");
    const started = Date.now();
    const r = await run(`(sleep 0.8; touch ${marker}) & sleep 30`, { timeoutMs: 200 });
    assert.equal(r.timedOut, true);
    assert.ok(Date.now() - started < 5_000);
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    assert.equal(existsSync(marker), false, "background job in the sandbox survived");
  });

  sandboxTest("a missing program inside the sandbox is still 127 from bash", async () => {
    const r = await runCommand("definitely-not-a-command-xyz", { workspaceRoot: ws, cwd: ws, sandbox });
    assert.equal(r.exitCode, 127);
    assert.match(r.output, /command not found/);
  });

  /** A fake home directory outside /tmp (which the sandbox replaces anyway), with secrets in it. */
  async function fakeHome(t: TestContext): Promise<string | undefined> {
    let home: string;
    try {
      home = await mkdtemp(path.join(os.homedir(), ".spark-fake-home-"));
    } catch (error) {
      t.skip(`cannot create a folder outside /tmp in ${os.homedir()}: ${(error as Error).message}`);
      return undefined;
    }
    dirs.push(home);
    const files: Record<string, string> = {
      ".ssh/id_rsa": "PRIVATE KEY\n",
      ".aws/credentials": "aws_secret_access_key = x\n",
      ".config/gcloud/credentials.db": "gcloud\n",
      ".netrc": "machine example.com password hunter2\n",
      ".git-credentials": "https://user:token@example.com\n",
      ".local/share/spark/sessions/s.jsonl": "{}\n",
      ".gitconfig": "[user]\n\tname = Tester\n",
      "notes.txt": "not a secret\n",
    };
    for (const [rel, text] of Object.entries(files)) {
      await mkdir(path.dirname(path.join(home, rel)), { recursive: true });
      await writeFile(path.join(home, rel), text);
    }
    return home;
  }

  sandboxTest("the home directory's secrets are hidden; the rest of it stays readable", async (t) => {
    const home = await fakeHome(t);
    if (home === undefined) return;
    const hostEnv = { ...process.env, HOME: home };
    const secrets = [
      ".ssh/id_rsa",
      ".aws/credentials",
      ".config/gcloud/credentials.db",
      ".local/share/spark/sessions/s.jsonl",
    ];
    const script = (rel: string) => `cat ${JSON.stringify(path.join(home, rel))}`;
    for (const rel of secrets) {
      const plain = await run(script(rel), { sandbox: NO_SANDBOX });
      assert.equal(plain.exitCode, 0, `${rel} is readable without the sandbox`);
      const hidden = await run(script(rel), { hostEnv });
      assert.notEqual(hidden.exitCode, 0, rel);
      assert.match(hidden.output, /No such file or directory/, rel);
    }
    for (const rel of [".netrc", ".git-credentials"]) {
      const hidden = await run(script(rel), { hostEnv });
      assert.equal(hidden.exitCode, 0, hidden.output);
      assert.equal(hidden.output, "", `${rel} reads as empty`);
    }
    const visible = await run(`${script(".gitconfig")} ${JSON.stringify(path.join(home, "notes.txt"))}`, {
      hostEnv,
    });
    assert.equal(visible.output, "[user]\n\tname = Tester\nnot a secret\n");
    const allowed = await run(script(".ssh/id_rsa"), {
      hostEnv,
      sandbox: { ...sandbox, allowSecrets: true } as Sandbox,
    });
    assert.equal(allowed.output, "PRIVATE KEY\n", "--sandbox-allow-secrets shows them");
  });

  sandboxTest(
    "with HOME inside the workspace its secrets stay hidden, also when the workspace is under /tmp",
    async (t) => {
      const places: string[] = [await tempDir("spark-ws-home-")];
      try {
        const inHome = await mkdtemp(path.join(os.homedir(), ".spark-ws-home-"));
        dirs.push(inHome);
        places.push(inHome);
      } catch (error) {
        t.diagnostic(`only the workspace under /tmp: ${(error as Error).message}`);
      }
      for (const root of places) {
        const home = path.join(root, "home");
        await mkdir(path.join(home, ".ssh"), { recursive: true });
        await writeFile(path.join(home, ".ssh", "id_rsa"), "PRIVATE KEY\n");
        await writeFile(path.join(home, ".netrc"), "password hunter2\n");
        await writeFile(path.join(home, "notes.txt"), "not a secret\n");
        const hostEnv = { ...process.env, HOME: home };
        const r = await run(
          "cat home/.ssh/id_rsa; cat home/.netrc; cat home/notes.txt; echo x > home/.ssh/authorized_keys",
          {
            workspaceRoot: root,
            cwd: root,
            hostEnv,
          },
        );
        assert.doesNotMatch(r.output, /PRIVATE KEY|hunter2/, root);
        assert.match(r.output, /not a secret/, root);
        assert.equal(existsSync(path.join(home, ".ssh", "authorized_keys")), false, root);
        assert.equal(await readFile(path.join(home, ".ssh", "id_rsa"), "utf8"), "PRIVATE KEY\n");
      }
    },
  );

  sandboxTest(
    "Unix sockets outside the workspace are unreachable: under /run, named by SSH_AUTH_SOCK, in ~/.gnupg",
    async (t) => {
      const home = await fakeHome(t);
      if (home === undefined) return;
      const sockets: string[] = [path.join(home, "agent.sock"), path.join(home, ".gnupg", "S.gpg-agent")];
      const runDir = path.join("/run", `spark-test-${process.pid}`);
      try {
        await mkdir(runDir);
        dirs.push(runDir);
        sockets.push(path.join(runDir, "docker.sock"));
      } catch (error) {
        t.diagnostic(`no socket under /run: ${(error as Error).message}`);
      }
      await mkdir(path.join(home, ".gnupg"));
      for (const socket of sockets) {
        const server: Server = createServer((connection) => connection.end("hello\n"));
        await new Promise<void>((resolve) => server.listen(socket, resolve));
        t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
      }
      const hostEnv = { ...process.env, HOME: home, SSH_AUTH_SOCK: sockets[0]! };
      const connect = (socket: string) =>
        `${JSON.stringify(process.execPath)} -e ${JSON.stringify(
          `require("net").connect(${JSON.stringify(socket)}).on("data", (d) => process.stdout.write(d)).on("error", (e) => { console.log(e.code); process.exitCode = 1; })`,
        )}`;
      for (const socket of sockets) {
        const plain = await run(connect(socket), { sandbox: NO_SANDBOX });
        assert.equal(plain.output, "hello\n", `${socket} answers without the sandbox`);
        const sandboxed = await run(connect(socket), { hostEnv });
        assert.notEqual(sandboxed.exitCode, 0, socket);
        assert.match(sandboxed.output, /ECONNREFUSED|ENOENT|ENOTSOCK/, socket);
      }
    },
  );

  test("sandboxedArgv: the workspace bind follows the private /tmp; no sandbox runs argv directly", () => {
    const bw: Sandbox = { kind: "bubblewrap", path: "/usr/bin/bwrap", network: false };
    const { file, args } = sandboxedArgv(bw, "/tmp/ws", ["ls", "-la"], "/tmp/ws/src");
    assert.equal(file, "/usr/bin/bwrap");
    const tmpfs = args.indexOf("--tmpfs");
    const bind = args.indexOf("--bind");
    assert.ok(tmpfs >= 0 && bind > tmpfs);
    assert.deepEqual(args.slice(bind, bind + 3), ["--bind", "/tmp/ws", "/tmp/ws"]);
    for (const flag of ["--unshare-all", "--die-with-parent", "--new-session"])
      assert.ok(args.includes(flag));
    assert.equal(args.includes("--share-net"), false);
    assert.deepEqual(args.slice(args.indexOf("--chdir"), args.indexOf("--chdir") + 2), [
      "--chdir",
      "/tmp/ws/src",
    ]);
    assert.deepEqual(args.slice(-3), ["--", "ls", "-la"]);
    assert.ok(sandboxedArgv({ ...bw, network: true }, "/w", ["true"], "/w").args.includes("--share-net"));
    assert.deepEqual(sandboxedArgv(NO_SANDBOX, "/w", ["ls", "-la"], "/w"), { file: "ls", args: ["-la"] });
  });

  test("sandboxedArgv: /run is emptied before the workspace bind; secrets and protected paths come after it", () => {
    const bw: Sandbox = { kind: "bubblewrap", path: "/usr/bin/bwrap", network: false };
    const { args } = sandboxedArgv(bw, "/w", ["true"], "/w", {
      hideRun: ["/run"],
      runSymlinks: [["/dev/shm", "/run/shm"]],
      runKept: ["/run/systemd/resolve/stub-resolv.conf"],
      hiddenDirs: ["/home/u/.ssh"],
      hiddenFiles: ["/home/u/.netrc"],
      emptyFile: "/tmp/spark-empty-x/empty",
      readOnly: ["/w/.git"],
      placeholders: ["/w/.vscode"],
      emptyDir: "/tmp/spark-empty-x/empty-dir",
      seccomp: "/tmp/spark-empty-x/filter.bpf",
    });
    const at = (...words: string[]) => {
      const index = args.findIndex((_, k) => words.every((word, j) => args[k + j] === word));
      assert.ok(index >= 0, words.join(" "));
      return index;
    };
    const bind = at("--bind", "/w", "/w");
    assert.ok(at("--tmpfs", "/tmp") < at("--tmpfs", "/run"));
    assert.ok(at("--tmpfs", "/run") < at("--symlink", "/dev/shm", "/run/shm"));
    assert.ok(
      at("--symlink", "/dev/shm", "/run/shm") < at("--ro-bind", "/run/systemd/resolve/stub-resolv.conf"),
    );
    assert.ok(at("--ro-bind", "/run/systemd/resolve/stub-resolv.conf") < bind);
    assert.ok(bind < at("--tmpfs", "/home/u/.ssh"));
    assert.ok(bind < at("--ro-bind", "/tmp/spark-empty-x/empty", "/home/u/.netrc"));
    assert.ok(bind < at("--ro-bind", "/w/.git", "/w/.git"));
    assert.ok(at("--ro-bind", "/w/.git", "/w/.git") < at("--unshare-all"));
    assert.ok(
      at("--ro-bind", "/w/.git", "/w/.git") < at("--ro-bind", "/tmp/spark-empty-x/empty-dir", "/w/.vscode"),
    );
    assert.ok(at("--seccomp", "3") < at("--"));
  });

  test("the Unix socket filter is classic BPF for x86-64 and arm64, none elsewhere", () => {
    for (const arch of ["x64", "arm64"]) {
      const program = unixSocketFilter(arch)!;
      assert.ok(program.length > 0 && program.length % 8 === 0, arch);
      // It ends in the two refusals: EACCES for socket(AF_UNIX), ENOSYS for io_uring.
      assert.equal(program.readUInt32LE(program.length - 12), 0x00050000 | 13, arch);
      assert.equal(program.readUInt32LE(program.length - 4), 0x00050000 | 38, arch);
    }
    assert.equal(unixSocketFilter("riscv64"), undefined);
  });

  test("detectSandbox({ disabled: true }) is none", async () => {
    assert.deepEqual(await detectSandbox({ disabled: true }), {
      kind: "none",
      reason: "sandbox disabled by --sandbox off",
    });
  });

  test("SPARK_BWRAP at a missing path is none with the install hint", async (t) => {
    const saved = process.env.SPARK_BWRAP;
    t.after(() => {
      if (saved === undefined) delete process.env.SPARK_BWRAP;
      else process.env.SPARK_BWRAP = saved;
    });
    process.env.SPARK_BWRAP = path.join(ws, "missing", "bwrap");
    const missing = await detectSandbox();
    assert.equal(missing.kind, "none");
    assert.match(missing.kind === "none" ? missing.reason : "", /apt-get install bubblewrap/);
    assert.match(describeSandbox(missing), /^no sandbox: .*not found at SPARK_BWRAP=/);

    const fake = path.join(ws, "fake-bwrap");
    await writeFile(fake, "#!/bin/sh\necho 'setting up uid map: Permission denied' >&2\nexit 1\n", {
      mode: 0o755,
    });
    process.env.SPARK_BWRAP = fake;
    const broken = await detectSandbox();
    assert.equal(broken.kind, "none");
    assert.match(
      broken.kind === "none" ? broken.reason : "",
      /^bwrap cannot create namespaces here \(setting up uid map: Permission denied\): commands run without a sandbox/,
    );
  });

  test("describeSandbox gives one line for the status bar", () => {
    assert.equal(
      describeSandbox({ kind: "bubblewrap", path: "/usr/bin/bwrap", network: false }),
      "sandbox: bubblewrap (writes confined to the workspace, .git read-only, secrets hidden, no network)",
    );
    assert.equal(
      describeSandbox({ kind: "bubblewrap", path: "/usr/bin/bwrap", network: true, allowSecrets: true }),
      "sandbox: bubblewrap (writes confined to the workspace, .git read-only, secrets visible, network allowed)",
    );
    assert.equal(
      describeSandbox({ kind: "bubblewrap", path: "/usr/bin/bwrap", network: true }),
      "sandbox: bubblewrap (writes confined to the workspace, .git read-only, secrets hidden, network allowed, no Unix sockets)",
    );
    assert.equal(
      describeSandbox({ kind: "none", reason: "sandbox disabled by --sandbox off" }),
      "no sandbox: sandbox disabled by --sandbox off",
    );
  });
});

describe("approval", () => {
  const bash = (script: string) => ["bash", "-lc", script];

  const SAFE: string[][] = [
    ["ls"],
    ["ls", "-la", "src"],
    ["cat", "README.md"],
    ["head", "-n", "20", "a.ts"],
    ["tail", "-5", "log"],
    ["wc", "-l", "a", "b"],
    ["pwd"],
    ["echo", "hi"],
    ["grep", "-rn", "TODO", "src"],
    ["rg", "-n", "foo", "src"],
    ["find", ".", "-name", "*.ts", "-type", "f"],
    ["sed", "-n", "10,20p", "src/a.ts"],
    ["sed", "-n", "5p", "a.ts"],
    ["find", ".", "-name", "*.ts", "-newermt", "2024-01-01", "-not", "-path", "./node_modules/*", "-print"],
    ["find", "-L", "src", "(", "-name", "-odd-", "-o", "-iname", "*.md", ")", "-maxdepth", "2"],
    ["which", "node"],
    ["file", "a.bin"],
    ["file", "-b", "--mime-type", "a.bin", "b.bin"],
    ["stat", "a"],
    ["true"],
    ["tree", "-L", "2"],
    ["tree", "-aL", "2", "-I", "node_modules", "--dirsfirst", "src"],
    ["nl", "a.ts"],
    ["sort", "-u", "a"],
    ["sort", "-t:", "-k", "2", "-nr", "--key=3,3", "--numeric-sort", "a", "b"],
    ["sort", "--check=quiet", "a"],
    ["uniq", "-c", "a"],
    ["uniq", "-f", "1", "-w3", "--skip-chars=2", "a"],
    ["uniq", "-"],
    ["rg", "-n", "-g", "*.ts", "--hidden", "--max-count=3", "foo", "src"],
    ["rg", "-e", "-z", "--", "--pre"],
    ["cut", "-d:", "-f1", "/etc/passwd"],
    bash("ls -la"),
    bash("ls && cat a.ts"),
    bash("cat a; wc -l a"),
    bash("grep -rn foo src | sort | uniq -c | head -5"),
    bash("cat a || echo missing"),
    bash('grep ">" file'),
    bash("grep '$(rm -rf /)' file"),
    bash('grep "a\\"b" file'),
    bash("sed -n 1,40p src/a.ts"),
    bash("ls;"),
    bash("ls\ncat a"),
    ["sh", "-c", "ls -la"],
    ["bash", "-c", "echo ok"],
    bash("bash -lc 'ls && pwd'"),
  ];

  const UNSAFE: string[][] = [
    [],
    ["rm", "-rf", "x"],
    ["touch", "x"],
    ["python3", "-c", "print(1)"],
    ["/bin/ls"],
    ["find", ".", "-delete"],
    ["find", ".", "-exec", "rm", "{}", ";"],
    ["find", ".", "-execdir", "rm", "{}", "+"],
    ["find", ".", "-ok", "rm", "{}", ";"],
    ["find", ".", "-fprint", "out"],
    ["find", ".", "-fprintf", "out", "%p"],
    ["sed", "-i", "s/a/b/", "x"],
    ["sed", "s/a/b/", "x"],
    ["sed", "-n", "1p;w out", "x"],
    ["sed", "-n", "1,5p", "-i", "x"],
    // git runs programs named in the repository's config (core.fsmonitor, diff drivers, pagers).
    ["git", "status"],
    ["git", "diff", "--stat"],
    ["git", "log", "--oneline"],
    ["git", "show", "HEAD"],
    ["git", "branch"],
    bash("git status"),
    ["git", "commit", "-m", "x"],
    ["git", "push"],
    ["git", "checkout", "."],
    ["git", "-c", "core.pager=sh", "log"],
    ["git", "branch", "-D", "main"],
    ["git", "branch", "new-branch"],
    ["git", "diff", "--output=patch.txt"],
    ["rg", "--pre", "sh", "foo"],
    ["rg", "--pre=./x", "foo"],
    ["rg", "--search-zip", "foo"],
    ["rg", "-z", "foo"],
    ["sort", "-o", "out", "in"],
    ["sort", "-uoout", "in"],
    ["sort", "--output=out", "in"],
    ["sort", "--output", "out", "in"],
    // GNU getopt takes unambiguous abbreviations of long options.
    ["sort", "--outp=out", "in"],
    ["sort", "--o=out", "in"],
    ["sort", "--compress-program=sh", "in"],
    ["sort", "--compress-prog=sh", "in"],
    ["sort", "-T", "dir", "in"],
    ["sort", "--numeric", "in"],
    ["uniq", "in", "out"],
    // `-` is stdin; the next operand is the output, truncated.
    ["uniq", "-", "out"],
    ["uniq", "-c", "in", "out"],
    ["uniq", "--", "in", "out"],
    ["uniq", "--cou", "in"],
    ["tree", "-o", "out"],
    ["tree", "-Lo", "2", "out"],
    ["tree", "-R", "-H", "."],
    ["file", "-C", "-m", "magic"],
    ["file", "--comp", "-m", "magic"],
    ["file", "-z", "a.gz"],
    ["rg", "--pr=sh", "foo"],
    ["rg", "--hostname-bin=x", "foo"],
    ["rg", "-nz", "foo"],
    ["rg", "--some-future-flag", "foo"],
    ["find", ".", "-fls", "out"],
    ["find", ".", "-newer", "a", "-delete"],
    ["find", ".", "-execd", "rm", "{}", "+"],
    ["find", ".", "-files0-from", "list"],
    bash("rm -rf /"),
    bash("ls && rm x"),
    bash("ls || rm x"),
    bash("ls | xargs rm"),
    bash("echo hi > file"),
    bash("cat a >> b"),
    bash("cat < a"),
    bash("echo $(rm x)"),
    bash("echo `rm x`"),
    bash('echo "$(rm x)"'),
    bash("echo $HOME"),
    bash("(ls)"),
    bash("{ ls; }"),
    bash("ls &"),
    bash("ls & rm x"),
    bash("ls |& cat"),
    bash("ls *"),
    bash("find . -dele{te,}"),
    bash("ls # comment"),
    bash("'unterminated"),
    bash('"unterminated'),
    bash("ls \\"),
    bash(""),
    bash("&& ls"),
    bash("ls &&"),
    bash("ls ;; ls"),
    bash("find . -delete"),
    bash("sed -i s/a/b/ x"),
    bash("bash -lc 'rm x'"),
    bash("git commit -am x"),
    ["bash", "-lc", "ls", "extra"],
    ["bash", "-x", "ls"],
    ["zsh", "-c", "ls"],
  ];

  test("known-safe commands", () => {
    for (const argv of SAFE) assert.equal(isKnownSafeCommand(argv), true, JSON.stringify(argv));
  });

  test("commands that are not known-safe", () => {
    for (const argv of UNSAFE) assert.equal(isKnownSafeCommand(argv), false, JSON.stringify(argv));
  });

  type Expected = "run" | "ask";
  // [mode, known-safe command, sandboxed, escalation requested] → decision when interactive.
  const MATRIX: [ApprovalMode, boolean, boolean, boolean, Expected][] = [
    ["never", true, true, false, "run"],
    ["never", true, true, true, "run"],
    ["never", true, false, false, "run"],
    ["never", true, false, true, "run"],
    ["never", false, true, false, "run"],
    ["never", false, true, true, "run"],
    ["never", false, false, false, "run"],
    ["never", false, false, true, "run"],
    ["on-request", true, true, false, "run"],
    ["on-request", true, true, true, "ask"],
    ["on-request", true, false, false, "run"],
    ["on-request", true, false, true, "ask"],
    ["on-request", false, true, false, "run"],
    ["on-request", false, true, true, "ask"],
    ["on-request", false, false, false, "ask"],
    ["on-request", false, false, true, "ask"],
    ["untrusted", true, true, false, "run"],
    ["untrusted", true, true, true, "ask"],
    ["untrusted", true, false, false, "run"],
    ["untrusted", true, false, true, "ask"],
    ["untrusted", false, true, false, "ask"],
    ["untrusted", false, true, true, "ask"],
    ["untrusted", false, false, false, "ask"],
    ["untrusted", false, false, true, "ask"],
  ];

  test("decideCommand: all modes × sandboxed × escalation × interactive", () => {
    for (const [mode, safe, sandboxed, escalationRequested, expected] of MATRIX) {
      const argv = safe ? ["cat", "README.md"] : ["npm", "test"];
      for (const interactive of [true, false]) {
        const label = JSON.stringify({ mode, safe, sandboxed, escalationRequested, interactive });
        const decision: ApprovalDecision = decideCommand(mode, argv, {
          sandboxed,
          escalationRequested,
          interactive,
        });
        const want = expected === "ask" && !interactive ? "refuse" : expected;
        assert.equal(decision.action, want, label);
        if (decision.action === "ask") assert.ok(decision.reason.length > 0, label);
        if (decision.action === "refuse") {
          assert.match(decision.reason, /needs the user's approval/, label);
          assert.match(decision.reason, /non-interactive/, label);
          assert.match(decision.reason, /--approval never/, label);
        }
      }
    }
    const escalated = decideCommand("on-request", ["npm", "test"], {
      sandboxed: true,
      escalationRequested: true,
      interactive: true,
    });
    assert.match(escalated.action === "ask" ? escalated.reason : "", /outside the sandbox/);
  });

  test("decidePatch: runs in never and on-request, asks in untrusted, refuses without a user", () => {
    assert.deepEqual(decidePatch("never", { interactive: false }), { action: "run" });
    assert.deepEqual(decidePatch("on-request", { interactive: true }), { action: "run" });
    assert.deepEqual(decidePatch("on-request", { interactive: false }), { action: "run" });
    assert.equal(decidePatch("untrusted", { interactive: true }).action, "ask");
    const refused = decidePatch("untrusted", { interactive: false });
    assert.equal(refused.action, "refuse");
    assert.match(refused.action === "refuse" ? refused.reason : "", /--approval never/);
  });

  test("decidePatch: a patch writing a protected path asks in on-request and untrusted, is refused in never and without a user", () => {
    const protectedPaths = [".git"];
    for (const mode of ["on-request", "untrusted"] as const) {
      const asked = decidePatch(mode, { interactive: true, protectedPaths });
      assert.equal(asked.action, "ask", mode);
      assert.match(asked.action === "ask" ? asked.reason : "", /writes \.git, a protected path/);
    }
    for (const [mode, interactive] of [
      ["never", true],
      ["never", false],
      ["on-request", false],
      ["untrusted", false],
    ] as const) {
      const refused = decidePatch(mode, { interactive, protectedPaths });
      assert.equal(refused.action, "refuse", `${mode} ${interactive}`);
      const reason = refused.action === "refuse" ? refused.reason : "";
      assert.match(reason, /\.git, a protected path/);
      assert.match(reason, /needs the user's approval/);
      assert.doesNotMatch(reason, /--approval never/, "never mode does not allow it either");
    }
    assert.deepEqual(decidePatch("never", { interactive: false, protectedPaths: [] }), { action: "run" });
  });
});
