/**
 * Finding the Spark the extension runs, and reading `spark serve`'s model download progress. No
 * VS Code API here, so the node tests cover it (test/vscode-extension.test.ts).
 */
import { accessSync, constants, existsSync, statSync } from "node:fs";
import { delimiter, join, resolve } from "node:path";

export interface SparkCommand {
  command: string;
  /** Arguments before the subcommand (`lsp`, `serve`): the script, for `node bin/spark.js`. */
  args: string[];
  /** Extra environment (ELECTRON_RUN_AS_NODE when VS Code's own binary runs the script). */
  env: Record<string, string>;
  /** How it was found, for the log. */
  how: string;
}

export interface LocateOptions {
  /** `spark.command`: empty to search. */
  setting: string;
  /** The PATH to search (`process.env.PATH`). */
  path: string | undefined;
  /** Clones to try, in order: the one the .vsix was packaged from, the one the extension runs in. */
  repos: readonly string[];
  /** The running binary: Node in code-server, VS Code's Electron (run as Node) on the desktop. */
  execPath: string;
  platform?: NodeJS.Platform;
}

/** `node /path/spark.js` → ["node", "/path/spark.js"]; quotes group words with spaces. */
export function splitCommand(command: string): string[] {
  return [...command.matchAll(/"([^"]*)"|'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3] ?? "");
}

/** The first executable `name` on `path`, or undefined. */
export function onPath(
  name: string,
  path: string | undefined,
  platform: NodeJS.Platform = process.platform,
): string | undefined {
  const names = platform === "win32" ? [`${name}.cmd`, `${name}.exe`, name] : [name];
  for (const dir of (path ?? "").split(platform === "win32" ? ";" : delimiter)) {
    if (!dir) continue;
    for (const file of names.map((n) => join(dir, n))) {
      try {
        if (!statSync(file).isFile()) continue;
        if (platform !== "win32") accessSync(file, constants.X_OK);
        return file;
      } catch {
        // not here
      }
    }
  }
  return undefined;
}

/**
 * The Spark to run: `spark.command` when set (as written); else `spark` on the PATH; else the
 * clone the extension came from (`bin/spark.js`, once built: `dist/cli/main.js`), run by `node`
 * from the PATH or by the running binary as Node. Undefined: Spark is not installed.
 */
export function locateSpark(options: LocateOptions): SparkCommand | undefined {
  const platform = options.platform ?? process.platform;
  const [command, ...args] = splitCommand(options.setting.trim());
  if (command) return { command, args, env: {}, how: "spark.command" };
  const spark = onPath("spark", options.path, platform);
  if (spark) return { command: spark, args: [], env: {}, how: `spark on the PATH (${spark})` };
  for (const repo of options.repos) {
    const script = resolve(repo, "bin/spark.js");
    if (!existsSync(script) || !existsSync(resolve(repo, "dist/cli/main.js"))) continue;
    const node = onPath("node", options.path, platform);
    return node
      ? { command: node, args: [script], env: {}, how: `the clone at ${resolve(repo)}` }
      : {
          command: options.execPath,
          args: [script],
          env: { ELECTRON_RUN_AS_NODE: "1" },
          how: `the clone at ${resolve(repo)}, run by ${options.execPath} as Node`,
        };
  }
  return undefined;
}

/** The clone `npm run package` ran in (build.mjs defines it; undefined in the tests). */
declare const SPARK_PACKAGED_FROM: string | undefined;

/**
 * The Spark this extension runs (for `spark lsp`, `spark serve`, `spark app`): locateSpark with
 * `spark.command`, the PATH, the clone the .vsix was packaged from, then the clone the extension
 * runs from (editors/vscode, two folders up).
 */
export function findSpark(setting: string, extensionPath: string): SparkCommand | undefined {
  const repos = [
    ...(typeof SPARK_PACKAGED_FROM === "string" ? [SPARK_PACKAGED_FROM] : []),
    resolve(extensionPath, "../.."),
  ];
  return locateSpark({ setting, path: process.env.PATH, repos, execPath: process.execPath });
}

export interface DownloadLine {
  percent: number;
  receivedMb: number;
  totalMb: number;
}

/**
 * A progress line of `spark serve`'s model download on a pipe (src/engines/llama/model-source.ts,
 * `progressBar`: `[######------…]  25%  169.0/675.7 MB  8.1 MB/s`, one per ~10%), or undefined.
 */
export function downloadProgress(line: string): DownloadLine | undefined {
  const match = /\]\s+(\d+)%\s+([\d.]+)\/([\d.]+) MB/.exec(line);
  if (!match) return undefined;
  return { percent: Number(match[1]), receivedMb: Number(match[2]), totalMb: Number(match[3]) };
}
