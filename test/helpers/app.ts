/**
 * `spark app` as its tests run it: a real child process (test/helpers/cli.ts's `spawnCli`, so a
 * clean environment and a safety kill), resolved once it prints its URL (and port); every app a
 * test file starts, and every child it hands to `stopWithApps`, is stopped by `stopApps` (or
 * `killApps`) in that file's `after`. Also what those tests build their
 * workspaces and scripts from: a git repository with a first commit, script lines of one message.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { file, firstLine, freshDir, spawnCli, stop, type Cli } from "./cli.js";

/** The app's first stdout line: its URL, its port and its workspace. */
export const APP_LINE = /^spark app on (http:\/\/127\.0\.0\.1:(\d+)\/) \(workspace (.+)\)$/;

/** An app's lifetime: past a browser test's own timeout, so that a slow test fails on that. */
export const APP_SAFETY_MS = 400_000;

export interface AppCli extends Cli {
  /** The app's URL, with its trailing slash. */
  url: string;
  /** The port it listens on (port 0 replaced by the real one). */
  port: number;
}

const started: Cli[] = [];

/**
 * The words after `app` as most app tests start it: `workspace`, any free port, no start-up banner,
 * no sandbox, the script engine playing `script`; then `more`.
 */
export function scriptAppArgs(workspace: string, script: string, ...more: string[]): string[] {
  return [
    workspace,
    "--port",
    "0",
    "--quiet",
    "--sandbox",
    "off",
    "--engine",
    "script",
    "--script",
    script,
    ...more,
  ];
}

/** `spark app ARGS…` (the words after `app`), with `env` added to the clean environment. */
export async function startAppCli(
  args: readonly string[],
  env: Record<string, string> = {},
  safetyMs = APP_SAFETY_MS,
): Promise<AppCli> {
  const cli = spawnCli(["app", ...args], env, safetyMs);
  started.push(cli);
  const line = await firstLine(cli);
  const match = APP_LINE.exec(line);
  assert.ok(match, `unexpected first line: ${line}\n${cli.stderr()}`);
  return { ...cli, url: match[1]!, port: Number(match[2]) };
}

/** Has `stopApps` stop `cli` too (a server or an exec child beside the file's apps). */
export function stopWithApps(cli: Cli): void {
  started.push(cli);
}

/** Stops every app this file started (for the file's `after`). */
export async function stopApps(): Promise<void> {
  await Promise.all(started.map((cli) => stop(cli).catch(() => {})));
}

/** Kills (SIGKILL) every app this file started, for an `after` that must not wait on a graceful end. */
export async function killApps(): Promise<void> {
  await Promise.all(started.map((cli) => stop(cli, "SIGKILL").catch(() => {})));
}

/** `git ARGS…` in `cwd` with a committer of its own; its stdout. */
export function git(cwd: string, ...args: string[]): string {
  return execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@example.com", ...args], {
    cwd,
    encoding: "utf8",
  });
}

/** A fresh git repository holding `files`, committed as "init". */
export function gitWorkspace(files: Record<string, string>): string {
  const workspace = freshDir("ws-");
  for (const [name, text] of Object.entries(files)) writeFileSync(join(workspace, name), text);
  git(workspace, "init", "-q");
  git(workspace, "add", "-A");
  git(workspace, "commit", "-q", "-m", "init");
  return workspace;
}

/** A script line that answers `text` as one message. */
export function message(text: string): object {
  return { output: [{ type: "message", text }] };
}

/** A script file (JSONL) of `lines`, under the tests' folder. */
export function scriptFile(name: string, lines: readonly object[]): string {
  return file(name, lines.map((line) => JSON.stringify(line)).join("\n") + "\n");
}

/**
 * A config file whose Stop hook holds each turn's end until the test lets it go: `entered` exists
 * once the hook runs, and writing `release` ends it. Waits for the test, not for a time.
 */
export function heldStopHook(name: string): { config: string; entered: string; release: string } {
  const dir = freshDir("hook-");
  const entered = join(dir, "entered");
  const release = join(dir, "release");
  const hook = join(dir, "hold.sh");
  writeFileSync(hook, `#!/bin/sh\ntouch '${entered}'\nwhile [ ! -e '${release}' ]; do sleep 0.05; done\n`);
  chmodSync(hook, 0o755);
  const config = file(name, JSON.stringify({ hooks: { Stop: [{ command: hook, timeoutMs: 600_000 }] } }));
  return { config, entered, release };
}
