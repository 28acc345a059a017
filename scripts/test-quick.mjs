// `npm run test:quick`: the everyday subset of the tests, under 5 minutes on a 2-core machine.
// Every test file runs except the end-to-end ones below, the slowest of the suite by CPU time
// (measured one file at a time, user+system time of the file's process and its children; the
// figures are in the README's Development section). `npm test` still runs every file.
// A new test file is quick by default: add it here if it drives whole CLI sessions, browsers,
// databases or models end to end.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";

const SLOW = new Set([
  "app",
  "app-first-day",
  "app-robustness",
  "app-variants",
  "app-webview",
  "app-worktree",
  "cli",
  "codex-setup",
  "deploy",
  "config-errors",
  "context-size",
  "diff-first",
  "durable-store",
  "edit-file",
  "exec",
  "fim-llama",
  "fleet-failure",
  "fleet-limits",
  "hooks",
  "hostile-input",
  "images",
  "install",
  "key-reload",
  "llama",
  "llama-ignore-eos",
  "llama-limits",
  "lsp",
  "mcp",
  "postgres-instances",
  "store-memory",
  "tui",
  "tui-render",
  "tui-variants",
  "websocket-memory",
]);

const files = readdirSync(new URL("../test/", import.meta.url))
  .filter((name) => name.endsWith(".test.ts") && !SLOW.has(name.slice(0, -".test.ts".length)))
  .sort()
  .map((name) => `test/${name}`);
const result = spawnSync(
  process.execPath,
  ["--import", "tsx", "--test", "--test-concurrency=1", ...process.argv.slice(2), ...files],
  { stdio: "inherit" },
);
process.exit(result.status ?? 1);
