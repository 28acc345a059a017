#!/usr/bin/env node
/**
 * npm's `prepare` script: builds dist/ (the CLI and server) and web/dist (the web app). npm runs it
 * after `npm ci` / `npm install` in the clone, and also for `npm install -g .`, which links the
 * folder into the global prefix without installing its dependencies: on a fresh clone they are
 * missing, so they are installed here first (the dev dependencies too: the build needs them),
 * and that install runs this script again to build. So `npm install -g .` is the one line a fresh
 * machine needs.
 *
 * The nested npm runs without the outer command's location settings (npm passes them down as
 * npm_config_* variables): with `global` or `prefix` inherited, it would install into the global
 * prefix, or refuse (`npm ci` does not work for global packages).
 */
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const root = fileURLToPath(new URL("..", import.meta.url));
const INHERITED = /^npm_config_(global|location|prefix|omit|include|production|only|install_links|dry_run)$/i;
const env = Object.fromEntries(Object.entries(process.env).filter(([key]) => !INHERITED.test(key)));
const npm = "npm";

function run(args) {
  const result = spawnSync(npm, args, { cwd: root, env, stdio: "inherit" });
  if (result.error) throw result.error;
  if (result.status !== 0) process.exit(result.status ?? 1);
}

// Each step says what it does and how long it took: `npm install -g --foreground-scripts .` shows
// these lines (npm hides a lifecycle script's output without that flag).
const started = Date.now();
const seconds = () => `${Math.round((Date.now() - started) / 1000)} s`;
if (!existsSync(join(root, "node_modules", "typescript", "package.json"))) {
  console.error(
    `spark: installing dependencies in ${root} (a fresh clone: minutes; better-sqlite3 compiles SQLite ` +
      "unless its prebuilt binary can be downloaded), then building",
  );
  run(["ci", "--include=dev", "--no-audit", "--no-fund"]);
  console.error(`spark: dependencies installed and built in ${seconds()}`);
} else {
  console.error("spark: building dist/ (TypeScript) and web/dist (the web app)…");
  run(["run", "build"]);
  console.error(`spark: built in ${seconds()}`);
}
