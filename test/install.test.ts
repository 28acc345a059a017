/**
 * Reproducible installs: `npm ci` (what CI and deployers run) accepts the lock file. It refuses a
 * lock that is out of step with package.json, for instance one that lacks node-llama-cpp's optional
 * packages for other platforms. Checked with `--dry-run` in a copy, so nothing is downloaded.
 *
 * And the README's one line that puts `spark` on the PATH, `npm install -g .`, on a fresh copy of
 * the sources (no node_modules, no dist/) into a temporary prefix; the installed command then runs
 * from another folder. It downloads and compiles the dependencies (minutes), so it runs when
 * SPARK_TEST_INSTALL=1, which `.ci/run` sets.
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { test } from "node:test";
import { REPO_ROOT } from "./helpers/cli.js";

test("npm ci accepts package.json and package-lock.json as committed", () => {
  const copy = mkdtempSync(join(tmpdir(), "spark-npm-ci-"));
  try {
    for (const name of ["package.json", "package-lock.json"])
      copyFileSync(join(REPO_ROOT, name), join(copy, name));
    const run = spawnSync("npm", ["ci", "--dry-run", "--ignore-scripts", "--no-audit", "--no-fund"], {
      cwd: copy,
      encoding: "utf8",
    });
    assert.equal(run.status, 0, `npm ci refused the lock file:\n${run.stderr}`);
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
});

/** The environment of a user's shell: no npm_config_* passed down from the `npm test` running this. */
function shellEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env))
    if (!/^npm_/i.test(key) && !key.startsWith("SPARK_")) env[key] = value;
  return env;
}

test(
  "npm install -g --foreground-scripts . on a fresh copy of the sources shows its progress and installs a spark that runs from any folder",
  {
    skip: process.env.SPARK_TEST_INSTALL === "1" ? false : "set SPARK_TEST_INSTALL=1 (.ci/run does)",
    timeout: 30 * 60_000,
  },
  async () => {
    const root = mkdtempSync(join(tmpdir(), "spark-global-install-"));
    try {
      // The sources as a fresh clone has them: tracked files and new ones git does not ignore.
      const source = join(root, "spark");
      const listed = spawnSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], {
        cwd: REPO_ROOT,
        encoding: "utf8",
      });
      assert.equal(listed.status, 0, listed.stderr);
      for (const file of listed.stdout.split("\0").filter(Boolean)) {
        if (!existsSync(join(REPO_ROOT, file))) continue; // deleted, not yet committed
        mkdirSync(dirname(join(source, file)), { recursive: true });
        copyFileSync(join(REPO_ROOT, file), join(source, file));
      }
      const prefix = join(root, "prefix");
      // The README's command: --foreground-scripts shows the build's progress.
      const install = spawnSync("npm", ["install", "-g", "--foreground-scripts", "--prefix", prefix, "."], {
        cwd: source,
        env: shellEnv(),
        encoding: "utf8",
        maxBuffer: 64 * 1024 * 1024,
      });
      assert.equal(install.status, 0, `npm install -g . failed:\n${install.stdout}\n${install.stderr}`);
      const output = `${install.stdout}\n${install.stderr}`;
      assert.match(output, /spark: installing dependencies in /, "it says what it does");
      assert.match(output, /spark: built in \d+ s/, "and when the build is done");
      const installed = join(prefix, "lib", "node_modules", "spark");
      assert.ok(existsSync(join(installed, "dist", "cli", "main.js")), "dist/ was built");
      assert.ok(existsSync(join(installed, "web", "dist", "index.html")), "web/dist was built");

      const elsewhere = mkdtempSync(join(root, "elsewhere-"));
      const spark = join(prefix, "bin", "spark");
      const version = spawnSync(spark, ["--version"], { cwd: elsewhere, env: shellEnv(), encoding: "utf8" });
      const { version: expected } = JSON.parse(readFileSync(join(REPO_ROOT, "package.json"), "utf8")) as {
        version: string;
      };
      assert.equal(version.status, 0, version.stderr);
      assert.equal(version.stdout.trim(), `spark ${expected}`);

      // The server too (its dependencies load from the installed package), then stopped.
      const script = join(elsewhere, "script.jsonl");
      writeFileSync(script, JSON.stringify({ output: [{ type: "message", text: "installed" }] }) + "\n");
      const server = spawn(
        spark,
        ["serve", "--engine", "script", "--script", script, "--port", "0", "--store", "memory"],
        {
          cwd: elsewhere,
          env: shellEnv(),
          stdio: ["ignore", "pipe", "pipe"],
        },
      );
      let stderr = "";
      server.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
      const exited = new Promise<number | null>((resolve) => server.once("close", resolve));
      const lines = createInterface({ input: server.stdout });
      const first = await Promise.race([
        new Promise<string>((resolve) => lines.once("line", resolve)),
        exited.then((code) => `exited ${code}: ${stderr}`),
      ]);
      lines.close();
      assert.match(first, /^spark listening on http:\/\/127\.0\.0\.1:\d+$/);
      server.kill("SIGTERM");
      assert.equal(await exited, 0, stderr);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  },
);
