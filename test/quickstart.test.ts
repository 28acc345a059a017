/**
 * The README's quickstart, as a user runs it: the demo project (`examples/demo/`) copied out, the
 * script engine as the model. `spark exec` lists, reads, patches and runs; `spark serve` (through
 * `bin/spark.js`, the command the README names, so one PID) answers a streamed request and stops on
 * SIGTERM and on SIGINT to that PID, freeing its port; the TUI shows the approval with its diff,
 * runs variants, picks one and undoes the turns.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { cpSync, readFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { describe, test } from "node:test";
import { cleanEnv, freshDir, REPO_ROOT, runToExit } from "./helpers/cli.js";
import { distMissing, SPARK_BIN, TmuxServer, tmuxMissing } from "./helpers/tmux.js";

const DEMO = join(REPO_ROOT, "examples", "demo");
const ORIGINAL = readFileSync(join(DEMO, "greet.js"), "utf8");

function demoCopy(): string {
  const dir = join(freshDir("demo-"), "spark-demo");
  cpSync(DEMO, dir, { recursive: true });
  return dir;
}

test("quickstart: spark exec on the demo lists, reads, patches and runs, then exits 0", async () => {
  const demo = demoCopy();
  const run = await runToExit([
    "exec",
    "-C",
    demo,
    "--engine",
    "script",
    "--script",
    join(demo, "agent.jsonl"),
    "greet people by name",
  ]);
  assert.equal(run.code, 0, run.stderr);
  assert.match(run.stderr, /list_files \{\} \(completed\)/);
  assert.match(run.stderr, /read_file .*greet\.js.* \(completed\)/);
  assert.match(run.stderr, /patch completed: update greet\.js/);
  assert.match(run.stderr, /\$ node greet\.js Spark {2}\(completed, exit 0\)\nhello, Spark/);
  assert.match(run.stdout, /^Done: /m);
  assert.match(readFileSync(join(demo, "greet.js"), "utf8"), /function greet\(name = "world"\)/);
});

/** Resolves once nothing listens on `port` any more (a bind succeeds). */
function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once("error", () => resolve(false));
    probe.listen(port, "127.0.0.1", () => probe.close(() => resolve(true)));
  });
}

describe(
  "quickstart: spark serve as the README runs it",
  { skip: distMissing() ?? false, timeout: 120_000 },
  () => {
    for (const signal of ["SIGTERM", "SIGINT"] as const) {
      test(`answers the curl request, then ${signal} to its PID stops it and frees the port`, async () => {
        const demo = demoCopy();
        const server = spawn(
          SPARK_BIN,
          ["serve", "--engine", "script", "--script", "server.jsonl", "--port", "0", "--store", "memory"],
          { cwd: demo, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] },
        );
        let stderr = "";
        server.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
        const exited = new Promise<number | null>((resolve) => server.once("close", resolve));
        try {
          const lines = createInterface({ input: server.stdout });
          const first = await new Promise<string>((resolve) => lines.once("line", resolve));
          lines.close();
          const url = /^spark listening on (http:\/\/127\.0\.0\.1:(\d+))$/.exec(first);
          assert.ok(url, first);
          const response = await fetch(`${url[1]}/v1/responses`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ model: "spark", input: "Write a binary search in Python", stream: true }),
          });
          assert.equal(response.status, 200);
          const body = await response.text();
          assert.match(body, /event: response\.completed/);
          assert.match(body, /binary_search/);
          server.kill(signal);
          assert.equal(await exited, 0, stderr);
          assert.ok(await portFree(Number(url[2])), "the port is free again");
        } finally {
          if (server.exitCode === null && server.signalCode === null) server.kill("SIGKILL");
        }
      });
    }
  },
);

describe(
  "quickstart: the TUI on the demo",
  { skip: tmuxMissing ?? distMissing() ?? false, timeout: 240_000 },
  () => {
    test("an approval with its diff, the command's output, variants, a pick, then /undo", async () => {
      const demo = demoCopy();
      const tmux = new TmuxServer();
      try {
        const ui = tmux.start({
          // The README's command (bin/spark.js), as a user runs it.
          launcher: "bin",
          args: ["--engine", "script", "--script", join(demo, "agent.jsonl"), "--approval", "untrusted"],
          cwd: demo,
          dataDir: freshDir("data-"),
          env: { SPARK_HOME: freshDir("home-") },
          rows: 60,
        });
        const wait = (check: string | RegExp | ((screen: string) => boolean)): Promise<string> =>
          ui.waitFor(check, String(check), 60_000);
        await ui.ready();
        ui.type("greet people by name");
        ui.press("Enter");
        await wait(/Apply patch: update greet\.js \+3 −3/);
        await wait('+function greet(name = "world") {');
        ui.type("y");
        // Untrusted: the command asks too.
        await wait("Run: node greet.js Spark");
        ui.type("y");
        await wait(/Done: /);
        assert.match(readFileSync(join(demo, "greet.js"), "utf8"), /greet\(name = "world"\)/);
        assert.match(ui.screen(), /hello, Spark/);

        ui.type("/variants 3 make it louder");
        ui.press("Enter");
        // Each variant asks for its patch, one prompt at a time, in the footer below the status line.
        const footer = (screen: string): string => screen.split("⚡ spark │").at(-1) ?? "";
        const asking = (screen: string): string | undefined =>
          /Apply patch: (variant \d): update greet\.js/.exec(footer(screen))?.[1];
        for (let answered = 0; answered < 3; answered++) {
          const variant = asking(await wait((screen) => asking(screen) !== undefined))!;
          ui.type("y");
          await wait((screen) => asking(screen) !== variant);
        }
        await wait(/^ 3 +done .* 1 +\+1 −1 /m);
        ui.type("/pick 2");
        ui.press("Enter");
        await wait(/✓ variant 2 landed in your files: greet\.js/);
        assert.match(readFileSync(join(demo, "greet.js"), "utf8"), /HELLO, \$\{name\.toUpperCase\(\)\}!/);

        // The pick is a turn of its own: /undo takes it back, a second /undo the first change.
        ui.type("/undo");
        ui.press("Enter");
        await wait(/undid turn 2: restored greet\.js/);
        ui.type("/undo");
        ui.press("Enter");
        await wait(/undid turn 1: restored greet\.js/);
        assert.equal(readFileSync(join(demo, "greet.js"), "utf8"), ORIGINAL);
        ui.type("/quit");
        ui.press("Enter");
        await wait("EXITED");
      } finally {
        tmux.kill();
      }
    });
  },
);
