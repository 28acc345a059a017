/**
 * One `llama-server` process, supervised for the llama engine out of process
 * (`llama-server-engine.ts`).
 *
 * Contract:
 * - `start()` spawns it on 127.0.0.1 with `--port 0`: llama-server binds a free port itself and says
 *   which in its log ("listening on http://127.0.0.1:PORT"), so no port is picked, closed and bound
 *   again by someone else in between. It resolves with the child's URL once `/health` answers 200.
 * - Only Spark can use it: a random API key (`key`) goes to the child in its environment
 *   (`LLAMA_API_KEY`, never on the command line, which every local user can read) and every request
 *   Spark sends carries it; any other local process gets 401 (its `/health` stays public).
 * - It dies with Spark, whatever ends Spark (SIGKILL included): on Linux it is started through
 *   util-linux `setpriv --pdeathsig KILL`, so the kernel kills it when Spark's process ends; where
 *   setpriv is missing, through a small POSIX `sh` watchdog that kills it when Spark's end of the
 *   watchdog's stdin pipe closes (which the kernel does when Spark ends, however it ends).
 * - An unexpected exit is reported (`onExit`) and the child is started again after a back-off
 *   (1 s, doubling up to 30 s; back to 1 s once a start has stayed up for a minute); `onReady` says
 *   when it is back (with its new URL). `close()` stops it (SIGTERM, then SIGKILL after 10 s) and
 *   ends the restarts.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants } from "node:fs";
import { delimiter, join } from "node:path";

export interface LlamaServerChildOptions {
  binary: string;
  /** llama-server's arguments apart from where it listens (`--host`, `--port` are added). */
  args: readonly string[];
  /** Longest wait for `/health` after a start (loading a large model takes a while). */
  startTimeoutMs: number;
  /** How the child is tied to Spark's life (default: `pdeathsig` where setpriv exists, else `stdin`). */
  watchdog?: "pdeathsig" | "stdin";
  /** First restart delay; doubles per failed start up to `maxRestartDelayMs`. Default 1000. */
  restartDelayMs?: number;
  maxRestartDelayMs?: number;
  log?: (line: string) => void;
}

/** A start that stayed up this long resets the back-off. */
const STABLE_MS = 60_000;

export class LlamaServerChild {
  /** The API key every request to the child must carry (`Authorization: Bearer …`). */
  readonly key = randomBytes(24).toString("base64url");
  #process: ChildProcess | undefined;
  #url: string | undefined;
  #closing = false;
  /** Set once a start succeeded: from then on an exit is followed by a restart. */
  #supervising = false;
  #restarts = 0;
  #delay: number;
  #restartTimer: NodeJS.Timeout | undefined;
  #tail = "";
  #offloaded = false;
  readonly #exitListeners = new Set<(why: string) => void>();
  readonly #readyListeners = new Set<(url: string) => void>();

  constructor(private readonly options: LlamaServerChildOptions) {
    this.#delay = options.restartDelayMs ?? 1000;
  }

  /** The child's process id (for tests and logs); undefined between starts. */
  get pid(): number | undefined {
    return this.#process?.pid;
  }

  get url(): string | undefined {
    return this.#url;
  }

  /** Its log says it put model layers on a GPU (a GPU build). */
  get offloaded(): boolean {
    return this.#offloaded;
  }

  /** How many times it was started again after an exit. */
  get restarts(): number {
    return this.#restarts;
  }

  onExit(listener: (why: string) => void): void {
    this.#exitListeners.add(listener);
  }

  onReady(listener: (url: string) => void): void {
    this.#readyListeners.add(listener);
  }

  /** Starts the child and waits until it serves; throws (and kills it) when it cannot. */
  async start(): Promise<string> {
    const { binary, args } = this.options;
    const argv = [...args, "--host", "127.0.0.1", "--port", "0"];
    const watchdog = this.options.watchdog ?? (setprivPath() ? "pdeathsig" : "stdin");
    const [file, fileArgs] =
      watchdog === "pdeathsig"
        ? [setprivPath() ?? "setpriv", ["--pdeathsig", "KILL", "--", binary, ...argv]]
        : ["/bin/sh", ["-c", STDIN_WATCHDOG, "spark-llama-server", binary, ...argv]];
    const child = spawn(file, fileArgs, {
      // The watchdog's stdin is a pipe only Spark holds: it closes when Spark ends, however.
      stdio: [watchdog === "stdin" ? "pipe" : "ignore", "ignore", "pipe"],
      env: { ...process.env, LLAMA_API_KEY: this.key },
    });
    this.#process = child;
    this.#url = undefined;
    this.#tail = "";
    let listening: (url: string) => void = () => {};
    const announced = new Promise<string>((resolve) => (listening = resolve));
    let log = "";
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk: string) => {
      this.#tail = (this.#tail + chunk).slice(-2000);
      const offload = /offloaded (\d+)\/\d+ layers to GPU/.exec(this.#tail);
      if (offload && Number(offload[1]) > 0) this.#offloaded = true;
      if (this.#url !== undefined) return;
      log = (log + chunk).slice(-4096);
      const match = /listening on (https?:\/\/[^\s]+)/.exec(log);
      if (match) {
        this.#url = match[1]!.replace(/\/+$/, "");
        listening(this.#url);
      }
    });
    const startedAt = performance.now();
    const exited = new Promise<never>((_, reject) => {
      child.once("error", reject);
      child.once("exit", (code, signal) => {
        const why = `llama-server exited (${signal ?? code})${this.#tail ? `: ${lastLines(this.#tail)}` : ""}`;
        if (this.#process === child) {
          this.#process = undefined;
          this.#url = undefined;
        }
        reject(new Error(why));
        if (this.#closing || !this.#supervising) return;
        for (const listener of this.#exitListeners) listener(why);
        // A start that held for a while was not the cause: the next one is tried soon.
        if (performance.now() - startedAt > STABLE_MS) this.#delay = this.options.restartDelayMs ?? 1000;
        this.#scheduleRestart();
      });
    });
    exited.catch(() => {});
    // The wait for health ends with the start, whichever way (an exit must not leave it polling).
    const waiting = new AbortController();
    try {
      const url = await Promise.race([exited, announced]);
      await Promise.race([exited, waitHealthy(url, this.options.startTimeoutMs, waiting.signal)]);
      this.#supervising = true;
      return url;
    } catch (error) {
      kill(child, "SIGKILL");
      throw error;
    } finally {
      waiting.abort();
    }
  }

  #scheduleRestart(): void {
    const delay = this.#delay;
    this.#delay = Math.min(delay * 2, this.options.maxRestartDelayMs ?? 30_000);
    this.options.log?.(`llama: restarting llama-server in ${Math.round(delay / 100) / 10} s`);
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      if (this.#closing) return;
      this.#restarts++;
      this.start().then(
        (url) => {
          for (const listener of this.#readyListeners) listener(url);
        },
        // A failed start is retried: one that exited has scheduled it already (its exit handler).
        () => {
          if (!this.#closing && this.#restartTimer === undefined) this.#scheduleRestart();
        },
      );
    }, delay);
    this.#restartTimer.unref();
  }

  /** Stops the child and any restart; resolves once it has exited. */
  async close(): Promise<void> {
    this.#closing = true;
    if (this.#restartTimer) clearTimeout(this.#restartTimer);
    const child = this.#process;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    const timer = setTimeout(() => kill(child, "SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }
}

/**
 * `sh -c` script, `$@` = the binary and its arguments: runs it in the background with its stdin
 * closed, kills it when this shell's stdin (Spark's pipe) reaches its end, passes SIGTERM/SIGINT on,
 * and exits with its status.
 */
const STDIN_WATCHDOG = [
  // A background job's stdin is /dev/null unless redirected: the pipe is kept as fd 3 for the watcher.
  "exec 3<&0",
  '"$@" </dev/null 3<&- & child=$!',
  "trap 'kill -TERM \"$child\" 2>/dev/null' TERM INT",
  '( while read -r _; do :; done; kill -KILL "$child" 2>/dev/null ) <&3 & watcher=$!',
  'wait "$child"; status=$?',
  'kill "$watcher" 2>/dev/null',
  'exit "$status"',
].join("\n");

/** Signals the child; SIGKILL also closes the watchdog's pipe (its watcher then kills llama-server). */
function kill(child: ChildProcess, signal: NodeJS.Signals): void {
  if (signal === "SIGKILL") child.stdin?.destroy();
  child.kill(signal);
}

let setprivFound: string | null | undefined;

/** util-linux `setpriv` on the PATH (Linux), or undefined. */
export function setprivPath(): string | undefined {
  if (setprivFound === undefined) setprivFound = process.platform === "linux" ? findOnPath("setpriv") : null;
  return setprivFound ?? undefined;
}

/** An executable named `name` in a folder of the PATH, or null. */
export function findOnPath(name: string, path = process.env.PATH ?? ""): string | null {
  for (const dir of path.split(delimiter)) {
    if (dir === "") continue;
    const candidate = join(dir, name);
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}

function lastLines(text: string): string {
  return text.trim().split("\n").slice(-3).join(" | ");
}

/**
 * Polls `/health` until it answers 200 (llama-server answers 503 while it loads the model), or
 * until `signal` aborts.
 */
async function waitHealthy(url: string, timeoutMs: number, signal: AbortSignal): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (signal.aborted) throw new Error("llama-server's start was abandoned");
    try {
      const response = await fetch(`${url}/health`, {
        signal: AbortSignal.any([signal, AbortSignal.timeout(5000)]),
      });
      await response.body?.cancel();
      if (response.ok) return;
    } catch {
      // Not answering yet.
    }
    if (Date.now() > deadline)
      throw new Error(`llama-server did not become healthy in ${timeoutMs / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
