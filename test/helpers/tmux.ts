/**
 * Drives the interactive `spark` UI in a real terminal: tmux, on a private socket per test file,
 * one tmux session per UI. Keys go in with `send-keys`; the screen comes back with `capture-pane`
 * (wrapped lines joined, colors dropped, scrollback included). Waits poll the screen against a
 * generous deadline that only exists to fail a broken UI instead of hanging; no assertion depends
 * on how fast anything is. A wait polls often at first and then backs off (each poll starts a tmux
 * client), so a long wait on a loaded machine does not add to the load.
 *
 * The UI runs from the current sources (cliArgs: the bundle made for the tests), never a stale
 * dist/; `launcher: "bin"` runs bin/spark.js, the command the README names (needs `npm run build`).
 */
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { cliArgs } from "./cli-entry.js";
import { cleanEnv, REPO_ROOT } from "./cli.js";

/** Why tmux tests cannot run here, or undefined when they can. */
export const tmuxMissing: string | undefined =
  spawnSync("tmux", ["-V"], { stdio: "ignore" }).status === 0
    ? undefined
    : "tmux is not on PATH: the interactive UI tests need it (CI installs it)";

export const SPARK_BIN = join(REPO_ROOT, "bin", "spark.js");
export const DIST_MAIN = join(REPO_ROOT, "dist", "cli", "main.js");
/** Only so a broken UI fails instead of hanging (sized for a loaded 2-core machine); no assertion depends on it. */
export const WAIT_MS = 30_000;

function shellQuote(text: string): string {
  return `'${text.replace(/'/g, `'\\''`)}'`;
}

export class TmuxServer {
  readonly socket = `spark-tui-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
  #sessions = 0;
  /** The tmux server inherits this environment: no SPARK_* variable from the parent. */
  readonly #env = cleanEnv();

  tmux(...args: string[]): string {
    return execFileSync("tmux", ["-L", this.socket, ...args], { encoding: "utf8", env: this.#env });
  }

  /**
   * Starts `spark ARGS` in a new tmux session in `cwd`. When spark exits, the pane prints
   * `EXITED <code>` and stays open, so the end of the screen can still be read.
   */
  start(options: {
    args: readonly string[];
    cwd: string;
    dataDir: string;
    columns?: number;
    rows?: number;
    /** More environment variables for spark (SPARK_CACHE_DIR…). */
    env?: Record<string, string>;
    /** "bin": run bin/spark.js (the built dist/) instead of the current sources' bundle. */
    launcher?: "bin";
  }): Terminal {
    const name = `t${++this.#sessions}`;
    const command = [
      "env",
      `SPARK_DATA_DIR=${shellQuote(options.dataDir)}`,
      ...Object.entries(options.env ?? {}).map(([key, value]) => `${key}=${shellQuote(value)}`),
      shellQuote(process.execPath),
      ...(options.launcher === "bin" ? [SPARK_BIN] : cliArgs()).map(shellQuote),
      ...options.args.map(shellQuote),
    ].join(" ");
    this.tmux(
      "new-session",
      "-d",
      "-s",
      name,
      "-x",
      String(options.columns ?? 120),
      "-y",
      String(options.rows ?? 40),
      "-c",
      options.cwd,
      `${command}; echo EXITED $?; sleep 600`,
    );
    return new Terminal(this, name);
  }

  /** Ends the tmux server and every UI in it, and removes its socket file (tmux leaves it). */
  kill(): void {
    const path = spawnSync("tmux", ["-L", this.socket, "display-message", "-p", "#{socket_path}"], {
      encoding: "utf8",
    }).stdout?.trim();
    spawnSync("tmux", ["-L", this.socket, "kill-server"], { stdio: "ignore" });
    if (path) rmSync(path, { force: true });
  }
}

export class Terminal {
  constructor(
    private readonly server: TmuxServer,
    readonly name: string,
  ) {}

  /** Types text literally (no key names). */
  type(text: string): void {
    this.server.tmux("send-keys", "-t", this.name, "-l", text);
  }

  /** Presses keys by tmux name: Enter, Tab, Escape, C-t… */
  press(...keys: string[]): void {
    this.server.tmux("send-keys", "-t", this.name, ...keys);
  }

  /** Sends these bytes as the terminal would (a key sequence tmux has no name for, e.g. CSI 13;2u). */
  sendBytes(bytes: string): void {
    this.server.tmux(
      "send-keys",
      "-t",
      this.name,
      "-H",
      ...[...Buffer.from(bytes)].map((b) => b.toString(16)),
    );
  }

  /** The whole screen and scrollback as plain text, wrapped lines joined, trailing spaces cut. */
  screen(): string {
    return this.server
      .tmux("capture-pane", "-p", "-J", "-S", "-", "-t", this.name)
      .split("\n")
      .map((line) => line.trimEnd())
      .join("\n")
      .trimEnd();
  }

  /** The last non-empty screen line (the prompt while the UI runs). */
  lastLine(): string {
    return this.screen().split("\n").at(-1) ?? "";
  }

  /** The status line (`⚡ spark │ ready │ …`): the last line with the tier label. */
  statusLine(): string {
    return (
      this.screen()
        .split("\n")
        .filter((line) => /^(⚡ spark|◆ deep|⟳ auto( → \w+)?) │ /.test(line))
        .at(-1) ?? ""
    );
  }

  /**
   * Polls the screen until `check` holds, and returns that screen. A string or RegExp must occur in
   * the screen; a function gets the screen.
   */
  async waitFor(
    check: string | RegExp | ((screen: string) => boolean),
    what = String(check),
    timeoutMs = WAIT_MS,
  ): Promise<string> {
    const test =
      typeof check === "string"
        ? (s: string) => s.includes(check)
        : check instanceof RegExp
          ? (s: string) => check.test(s)
          : check;
    const deadline = Date.now() + timeoutMs;
    for (let pause = 20; ; pause = Math.min(pause * 1.5, 250)) {
      const screen = this.screen();
      if (test(screen)) return screen;
      if (Date.now() > deadline)
        throw new Error(`waited ${timeoutMs} ms for ${what}; the screen:\n${screen}`);
      await sleep(pause);
    }
  }

  /** Waits until the UI is connected (the "in-process server · … · session ID" line) and idle. */
  async ready(): Promise<string> {
    // The line may wrap at a word boundary (the UI wraps its lines itself): match across lines.
    const line = /^in-process server · [^\n]*(?:\n[^\n]*)?? · session (\S+)$/m;
    const screen = await this.waitFor(line, "the connection line");
    await this.idle();
    return line.exec(screen)![1]!;
  }

  /** Waits until no turn runs: the status says ready and the prompt is the idle `› `. */
  idle(): Promise<string> {
    return this.waitFor(
      () => / │ ready( │|$)/.test(this.statusLine()) && this.lastLine().startsWith("›"),
      "the idle prompt",
    );
  }
}

export function distMissing(): string | undefined {
  return existsSync(DIST_MAIN) ? undefined : `${DIST_MAIN} is missing: run \`npm run build\` first`;
}
