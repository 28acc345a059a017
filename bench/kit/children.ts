/**
 * Spark as a child process, as users run it, from the current sources: `node --import tsx
 * src/cli/main.ts …` in the repository root. `startServe` runs `spark serve` and resolves with the
 * URL of its first stdout line (`listening on URL`); `startApp` runs `spark app` and resolves with
 * the URL of its first line (`spark app on URL (workspace …)`). Either rejects with the child's
 * stderr when the child exits first, prints something else or (with `timeoutMs`) prints nothing in
 * time, and then leaves no child behind. `stop()` is SIGTERM, then SIGKILL after 5 s.
 * `startScriptApp` is `startApp` as the app figures run it (the script engine, a data folder of its own).
 *
 * What a figure measures stays in the figure: the kit only starts, names and stops the child.
 * (The start-up figures time `bin/spark.js`, the built CLI, from spawn on: they spawn it themselves.)
 */
import { spawn, type ChildProcess, type StdioOptions } from "node:child_process";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";

/** The repository root: every child runs here. */
export const REPO_ROOT = fileURLToPath(new URL("../..", import.meta.url));

const SERVE_LINE = /listening on (\S+)/;
const APP_LINE = /^spark app on (http:\/\/127\.0\.0\.1:\d+\/) \(workspace .+\)$/;

export interface SparkChild {
  child: ChildProcess;
  /** The URL the child printed first. */
  url: string;
  /** What the child wrote to stderr so far (empty with `stderr: "inherit"`). */
  stderr(): string;
  /** Resolves with the exit code (or signal) once the child has closed. */
  exited: Promise<number | string>;
  /** Whether the child is still running. */
  alive(): boolean;
  /** SIGTERM, then SIGKILL after 5 s; resolves once the child has exited. */
  stop(): Promise<void>;
}

export interface ChildOptions {
  /** The child's whole environment (default: this process's). */
  env?: NodeJS.ProcessEnv;
  /** Node flags before `--import tsx` (`--max-old-space-size=…` goes in `env.NODE_OPTIONS`). */
  nodeArgs?: readonly string[];
  /** Where the child's stderr goes: kept for error messages (default) or this process's. */
  stderr?: "pipe" | "inherit";
  /** Give up when no first line came in this time (default: wait until the child exits). */
  timeoutMs?: number;
}

/** This process's environment without any `SPARK_*` variable, plus `extra`. */
export function envWithoutSpark(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!key.startsWith("SPARK_")) env[key] = value;
  return { ...env, ...extra };
}

/** `spark ARGS…` from the current sources, in the repository root. */
export function spawnSpark(
  args: readonly string[],
  options: { env?: NodeJS.ProcessEnv; nodeArgs?: readonly string[]; stdio?: StdioOptions } = {},
): ChildProcess {
  return spawn(
    process.execPath,
    [...(options.nodeArgs ?? []), "--import", "tsx", "src/cli/main.ts", ...args],
    {
      cwd: REPO_ROOT,
      env: options.env ?? process.env,
      stdio: options.stdio ?? ["ignore", "pipe", "pipe"],
    },
  );
}

/** `spark serve ARGS…`; resolves with the URL it listens on. */
export function startServe(args: readonly string[], options: ChildOptions = {}): Promise<SparkChild> {
  return start(["serve", ...args], SERVE_LINE, "spark serve", options);
}

/** `spark app ARGS…`; resolves with the app's URL. */
export function startApp(args: readonly string[], options: ChildOptions = {}): Promise<SparkChild> {
  return start(["app", ...args], APP_LINE, "spark app", options);
}

export interface ScriptAppOptions {
  /** The workspace the app opens. */
  workspace: string;
  /** The script engine's JSONL file. */
  script: string;
  /** Its data folder (`--data-dir`). */
  dataDir: string;
  /** `--rate`: the script engine's tokens a second (default: its own). */
  rate?: number;
  /** More words after those. */
  extra?: readonly string[];
  /** Variables added to the environment without SPARK_* (`envWithoutSpark`). */
  env?: NodeJS.ProcessEnv;
}

/**
 * `spark app` as the app figures run it: the script engine playing `script` on `workspace`, any
 * free port, no banner, no sandbox, its own data folder, no SPARK_* variable from this environment;
 * it must print its URL within a minute.
 */
export function startScriptApp(options: ScriptAppOptions): Promise<SparkChild> {
  const rate = options.rate === undefined ? [] : ["--rate", String(options.rate)];
  return startApp(
    [
      options.workspace,
      ...["--engine", "script", "--script", options.script, ...rate],
      ...["--port", "0", "--quiet", "--sandbox", "off", "--data-dir", options.dataDir],
      ...(options.extra ?? []),
    ],
    { env: envWithoutSpark(options.env), timeoutMs: 60_000 },
  );
}

/** Until `GET URL/healthz` answers 200 (a `spark serve` loads its model after the port opens). */
export async function waitHealthy(url: string): Promise<void> {
  for (;;) {
    const health = await fetch(`${url}/healthz`).catch(() => undefined);
    if (health?.status === 200) return;
    await sleep(100);
  }
}

async function start(
  args: readonly string[],
  pattern: RegExp,
  name: string,
  options: ChildOptions,
): Promise<SparkChild> {
  const child = spawnSpark(args, {
    ...(options.env ? { env: options.env } : {}),
    ...(options.nodeArgs ? { nodeArgs: options.nodeArgs } : {}),
    stdio: ["ignore", "pipe", options.stderr ?? "pipe"],
  });
  let stderr = "";
  child.stderr?.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | string>((resolve) =>
    child.once("close", (code, signal) => resolve(code ?? signal ?? -1)),
  );
  const alive = (): boolean => child.exitCode === null && child.signalCode === null;
  const stop = async (): Promise<void> => {
    if (!alive()) return void (await exited);
    const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
    child.kill("SIGTERM");
    await exited;
    clearTimeout(timer);
  };
  try {
    const line = await firstLine(child, exited, name, () => stderr, options.timeoutMs);
    const url = pattern.exec(line)?.[1];
    if (!url) throw new Error(`${name} printed ${JSON.stringify(line)} first; stderr: ${stderr.slice(-600)}`);
    return { child, url, stderr: () => stderr, exited, alive, stop };
  } catch (error) {
    child.kill("SIGKILL");
    await exited;
    throw error;
  }
}

/** The first line the child prints, or why it never came. */
function firstLine(
  child: ChildProcess,
  exited: Promise<number | string>,
  name: string,
  stderr: () => string,
  timeoutMs: number | undefined,
): Promise<string> {
  return new Promise((resolve, reject) => {
    const lines = createInterface({ input: child.stdout! });
    const timer =
      timeoutMs === undefined
        ? undefined
        : setTimeout(
            () =>
              reject(
                new Error(
                  `${name} printed no line in ${timeoutMs / 1000} s; stderr: ${stderr().slice(-600)}`,
                ),
              ),
            timeoutMs,
          );
    lines.once("line", (line) => {
      clearTimeout(timer);
      lines.close();
      // Keep draining stdout, so that a child that prints more never blocks on a full pipe.
      child.stdout!.resume();
      resolve(line);
    });
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code}) before its URL; stderr: ${stderr().slice(-600)}`));
    });
  });
}
