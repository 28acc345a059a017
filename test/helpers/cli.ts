/**
 * Runs the `spark` command line as users run it, for tests: a real child process (the CLI bundled
 * from the current sources, see cli-entry.ts: no build is needed and nothing stale runs), real
 * ports, real signals. Every server gets its own
 * data directory under one temporary folder, so no test writes to the user's ~/.local/share/spark.
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, realpathSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { after } from "node:test";
import { fileURLToPath } from "node:url";
import { cliArgs } from "./cli-entry.js";

export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** Only to avoid hanging forever on a broken CLI; no assertion depends on it. */
export const SAFETY_TIMEOUT_MS = 60_000;
export const LISTENING = /^spark listening on (http:\/\/127\.0\.0\.1:(\d+))$/;

export const dir = mkdtempSync(join(tmpdir(), "spark-cli-test-"));
const children = new Set<ChildProcess>();

after(() => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

export function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

/** A fresh empty directory under the test folder (a workspace, a data dir…), as its real path. */
export function freshDir(prefix = "d-"): string {
  return realpathSync(mkdtempSync(join(dir, prefix)));
}

/** Parses JSON Lines output (`spark exec --json`); every non-empty line must be a JSON object. */
export function jsonLines<T = Record<string, unknown>>(text: string): T[] {
  return text
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line, index) => {
      try {
        return JSON.parse(line) as T;
      } catch {
        throw new Error(`line ${index + 1} of the output is not JSON: ${JSON.stringify(line)}`);
      }
    });
}

let dataDirs = 0;

/**
 * The parent's environment without any SPARK_* variable, so only what a test sets counts, plus a
 * fresh SPARK_DATA_DIR (unless the test sets one) so servers never share or leave a database, and
 * a fresh SPARK_HOME (unless the test sets one) so no run reads the machine's ~/.spark config or
 * leaves task worktrees and checkpoints there. A variable `extra` gives as undefined is left out
 * (`SPARK_DATA_DIR: undefined`: the data in SPARK_HOME, as on a fresh machine).
 */
export function cleanEnv(extra: Record<string, string | undefined> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("SPARK_")) env[key] = value;
  const n = ++dataDirs;
  const out: NodeJS.ProcessEnv = {
    ...env,
    SPARK_DATA_DIR: join(dir, `data-${n}`),
    SPARK_HOME: join(dir, `home-${n}`),
    ...extra,
  };
  for (const [key, value] of Object.entries(extra)) if (value === undefined) delete out[key];
  return out;
}

export interface Cli {
  child: ChildProcess;
  /** Resolves with the exit code (or the signal name when killed by one). */
  exited: Promise<number | string>;
  stdout(): string;
  stderr(): string;
}

/**
 * `safetyMs`: when the child is killed if still running. Tests whose own timeout is longer (a
 * browser on a loaded machine) pass one beyond it, so the test's timeout, not this, ends them.
 */
export function spawnCli(
  args: readonly string[],
  env: Record<string, string | undefined> = {},
  safetyMs = SAFETY_TIMEOUT_MS,
): Cli {
  const child = spawn(process.execPath, [...cliArgs(), ...args], {
    cwd: REPO_ROOT,
    env: cleanEnv(env),
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  let stdout = "";
  let stderr = "";
  child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | string>((resolve) => {
    child.once("close", (code: number | null, signal: NodeJS.Signals | null) =>
      resolve(code ?? signal ?? -1),
    );
  });
  const safety = setTimeout(() => child.kill("SIGKILL"), safetyMs);
  void exited.then(() => clearTimeout(safety));
  return { child, exited, stdout: () => stdout, stderr: () => stderr };
}

/** Waits for the first stdout line; fails if the process exits first. */
export async function firstLine(cli: Cli): Promise<string> {
  const lines = createInterface({ input: cli.child.stdout! });
  try {
    const line = await Promise.race([
      once(lines, "line").then(([l]) => l as string),
      cli.exited.then((code) => {
        throw new Error(`the CLI exited (${code}) before printing a line; stderr:\n${cli.stderr()}`);
      }),
    ]);
    return line;
  } finally {
    lines.close();
  }
}

/** Resolves once the CLI's stdout so far matches `pattern`; fails if the process exits first. */
export function waitForStdout(cli: Cli, pattern: RegExp): Promise<void> {
  if (pattern.test(cli.stdout())) return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onData = (): void => {
      if (!pattern.test(cli.stdout())) return;
      cli.child.stdout!.off("data", onData);
      resolve();
    };
    // Listeners run in order: spawnCli's own listener has already appended the chunk.
    cli.child.stdout!.on("data", onData);
    void cli.exited.then((code) => {
      cli.child.stdout!.off("data", onData);
      if (pattern.test(cli.stdout())) resolve();
      else reject(new Error(`the CLI exited (${code}) before printing ${pattern}; stderr:\n${cli.stderr()}`));
    });
  });
}

/**
 * A server's safety: it may serve a whole file's tests (started in `before`), which on a loaded
 * machine take minutes; the file's `after` stops it in any case.
 */
export const SERVER_SAFETY_MS = 600_000;

/** Spawns a server and returns its base URL, taken from the first stdout line. */
export async function startServer(
  args: readonly string[],
  env: Record<string, string> = {},
  safetyMs = SERVER_SAFETY_MS,
): Promise<Cli & { url: string }> {
  const cli = spawnCli(args, env, safetyMs);
  const line = await firstLine(cli);
  const match = LISTENING.exec(line);
  assert.ok(match, `unexpected first stdout line: ${JSON.stringify(line)}`);
  assert.ok(Number(match[2]) > 0, "port 0 must be replaced by the real port");
  return { ...cli, url: match[1]! };
}

/** `spark serve --engine script --script SCRIPT --port 0 EXTRA…`, started as `startServer` does. */
export function startScriptServe(
  script: string,
  extra: readonly string[] = [],
  env: Record<string, string> = {},
): Promise<Cli & { url: string }> {
  return startServer(["serve", "--engine", "script", "--script", script, "--port", "0", ...extra], env);
}

export async function assertHealthy(url: string): Promise<void> {
  const response = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(SAFETY_TIMEOUT_MS) });
  assert.equal(response.status, 200);
  assert.equal(((await response.json()) as { status: string }).status, "ok");
}

export async function stop(cli: Cli, signal: NodeJS.Signals = "SIGTERM"): Promise<number | string> {
  cli.child.kill(signal);
  return cli.exited;
}

/** Runs the CLI to its exit (for commands that are expected to fail or to print and leave). */
export async function runToExit(
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<{ code: number | string; stdout: string; stderr: string }> {
  const cli = spawnCli(args, env);
  const code = await cli.exited;
  return { code, stdout: cli.stdout(), stderr: cli.stderr() };
}

export interface SseEvent {
  type: string;
  data: Record<string, unknown>;
}

/**
 * Reads an SSE response body event by event. `onEvent` may return true to stop reading (the rest
 * of the stream is abandoned). `trailing` is what followed the last complete event: "" when the
 * stream ended on an event boundary.
 */
export async function readSse(
  response: Response,
  onEvent: (event: SseEvent) => boolean | void = () => {},
): Promise<{ events: SseEvent[]; trailing: string }> {
  assert.match(response.headers.get("content-type") ?? "", /text\/event-stream/);
  const reader = response.body!.getReader();
  const decoder = new TextDecoder();
  const events: SseEvent[] = [];
  let buffer = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end: number;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const type = /^event: (.+)$/m.exec(block)?.[1];
      const data = /^data: (.+)$/m.exec(block)?.[1];
      assert.ok(type && data, `malformed SSE block: ${block}`);
      const event = { type, data: JSON.parse(data) as Record<string, unknown> };
      events.push(event);
      if (onEvent(event) === true) {
        await reader.cancel().catch(() => {});
        return { events, trailing: buffer };
      }
    }
  }
  return { events, trailing: buffer };
}
