/**
 * Reproducible installs: `npm ci` (what CI and deployers run) accepts the lock file. It refuses a
 * lock that is out of step with package.json, for instance one that lacks node-llama-cpp's optional
 * packages for other platforms. Checked with `--dry-run` in a copy, so nothing is downloaded.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
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
