/**
 * One `llama-server` process, supervised for the llama engine out of process
 * (`llama-server-engine.ts`).
 *
 * Contract:
 * - `start()` spawns it listening on a Unix socket in a folder only Spark's user can enter (a new
 *   `mkdtemp` folder, mode 0700, removed when the child exits) where the binary can (`socket`: its
 *   `--help` names `.sock` hosts, llama.cpp since 2025), else on 127.0.0.1 with `--port 0`, where
 *   llama-server binds a free port itself and says which in its log, so no port is picked, closed
 *   and bound again by someone else in between. It resolves with the child's address once
 *   `/health` answers 200. A socket costs each relayed token a fraction of a loopback TCP read and
 *   write on both sides (figure 26: the relay at 0.98-1.0x of llama-server alone over a socket,
 *   0.85-0.92x over TCP), and other local users cannot reach it at all.
 * - Only Spark can use it: a random API key (`key`) goes to the child in its environment
 *   (`LLAMA_API_KEY`, never on the command line, which every local user can read) and every request
 *   Spark sends carries it; any other local process gets 401 (its `/health` stays public).
 * - Connections are not reused (`dispatcher`, and the engine's upstream pool): llama-server closes
 *   every connection after a streamed response, so a request sent on a kept connection could meet
 *   that close and fail with "other side closed" before the child read it.
 * - It dies with Spark, whatever ends Spark (SIGKILL included): on Linux it is started through
 *   util-linux `setpriv --pdeathsig KILL`, so the kernel kills it when Spark's process ends; where
 *   setpriv is missing, through a small POSIX `sh` watchdog that kills it when Spark's end of the
 *   watchdog's stdin pipe closes (which the kernel does when Spark ends, however it ends).
 * - An unexpected exit is reported (`onExit`) and the child is started again after a back-off
 *   (1 s, doubling up to 30 s; back to 1 s once a start has stayed up for a minute); `onReady` says
 *   when it is back (with its new URL). `close()` stops it (SIGTERM, then SIGKILL after 10 s) and
 *   ends the restarts.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { Pool, request as undiciRequest, type Dispatcher } from "undici";

/**
 * Where a started child listens: the origin to name in requests and, for a Unix socket, its path
 * (requests then go through `socketPath` and the origin only names the Host header).
 */
export interface ChildAddress {
  origin: string;
  socketPath?: string;
}

/** The address as one line for logs and messages (`unix:PATH` or the URL). */
export function describeAddress(address: ChildAddress): string {
  return address.socketPath !== undefined ? `unix:${address.socketPath}` : address.origin;
}

export interface LlamaServerChildOptions {
  binary: string;
  /** llama-server's arguments apart from where it listens (`--host`, `--port` are added). */
  args: readonly string[];
  /** Listen on a Unix socket (the binary supports it: `supportsUnixSocket`) rather than a port. */
  socket?: boolean;
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
  #address: ChildAddress | undefined;
  /** The running start's requests to the child (health, token counts, calibration). */
  #dispatcher: Pool | undefined;
  /** The running start's socket folder, removed when it exits. */
  #socketDir: string | undefined;
  #closing = false;
  /** Set once a start succeeded: from then on an exit is followed by a restart. */
  #supervising = false;
  #restarts = 0;
  #delay: number;
  #restartTimer: NodeJS.Timeout | undefined;
  #tail = "";
  #offloaded = false;
  readonly #exitListeners = new Set<(why: string) => void>();
  readonly #readyListeners = new Set<(address: ChildAddress) => void>();

  constructor(private readonly options: LlamaServerChildOptions) {
    this.#delay = options.restartDelayMs ?? 1000;
  }

  /** The child's process id (for tests and logs); undefined between starts. */
  get pid(): number | undefined {
    return this.#process?.pid;
  }

  /** Where the child listens while it serves (undefined between starts). */
  get address(): ChildAddress | undefined {
    return this.#address;
  }

  /** The address for logs and messages. */
  get url(): string | undefined {
    return this.#address && describeAddress(this.#address);
  }

  /**
   * One request to the running child, on a connection of its own (see the contract); the body is
   * the caller's to read or dump. Throws while the child is not serving.
   */
  async request(
    path: string,
    options: { method: "GET" | "POST"; body?: string; signal?: AbortSignal; auth?: boolean },
  ): Promise<Dispatcher.ResponseData> {
    const address = this.#address;
    const dispatcher = this.#dispatcher;
    if (!address || !dispatcher) throw new Error("llama-server is not running");
    return undiciRequest(`${address.origin}${path}`, {
      dispatcher,
      method: options.method,
      headers: {
        ...(options.body !== undefined ? { "content-type": "application/json" } : {}),
        ...(options.auth === false ? {} : { authorization: `Bearer ${this.key}` }),
      },
      ...(options.body !== undefined ? { body: options.body } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
    });
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

  onReady(listener: (address: ChildAddress) => void): void {
    this.#readyListeners.add(listener);
  }

  /** Starts the child and waits until it serves; throws (and kills it) when it cannot. */
  async start(): Promise<ChildAddress> {
    const { binary, args } = this.options;
    this.#release();
    let where: string[];
    if (this.options.socket) {
      this.#socketDir = mkdtempSync(join(tmpdir(), "spark-llama-"));
      where = ["--host", join(this.#socketDir, "llama-server.sock")];
    } else where = ["--host", "127.0.0.1", "--port", "0"];
    const argv = [...args, ...where];
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
    this.#tail = "";
    let listening: (address: ChildAddress) => void = () => {};
    const announced = new Promise<ChildAddress>((resolve) => (listening = resolve));
    let log = "";
    let announcedYet = false;
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (chunk: string) => {
      this.#tail = (this.#tail + chunk).slice(-2000);
      // The model loads before llama-server says where it listens: after that, the log is only kept.
      if (announcedYet) return;
      log = (log + chunk).slice(-4096);
      const offload = /offloaded (\d+)\/\d+ layers to GPU/.exec(log);
      if (offload && Number(offload[1]) > 0) this.#offloaded = true;
      const match = /listening on (unix:\/\/\S+|https?:\/\/\S+)/.exec(log);
      if (match) {
        announcedYet = true;
        const said = match[1]!;
        listening(
          said.startsWith("unix://")
            ? { origin: "http://localhost", socketPath: said.slice("unix://".length) }
            : { origin: said.replace(/\/+$/, "") },
        );
      }
    });
    const startedAt = performance.now();
    const exited = new Promise<never>((_, reject) => {
      child.once("error", reject);
      child.once("exit", (code, signal) => {
        const why = `llama-server exited (${signal ?? code})${this.#tail ? `: ${lastLines(this.#tail)}` : ""}`;
        if (this.#process === child) {
          this.#process = undefined;
          this.#release();
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
      const address = await Promise.race([exited, announced]);
      this.#address = address;
      this.#dispatcher = new Pool(address.origin, {
        pipelining: 0,
        ...(address.socketPath !== undefined ? { connect: { socketPath: address.socketPath } } : {}),
      });
      await Promise.race([exited, this.#waitHealthy(this.options.startTimeoutMs, waiting.signal)]);
      this.#supervising = true;
      return address;
    } catch (error) {
      kill(child, "SIGKILL");
      throw error;
    } finally {
      waiting.abort();
    }
  }

  /** Forgets the last start's address and closes its connections; its socket folder goes. */
  #release(): void {
    this.#address = undefined;
    void this.#dispatcher?.destroy().catch(() => {});
    this.#dispatcher = undefined;
    if (this.#socketDir !== undefined) rmSync(this.#socketDir, { recursive: true, force: true });
    this.#socketDir = undefined;
  }

  /**
   * Polls `/health` until it answers 200 (llama-server answers 503 while it loads the model), or
   * until `signal` aborts.
   */
  async #waitHealthy(timeoutMs: number, signal: AbortSignal): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (signal.aborted) throw new Error("llama-server's start was abandoned");
      try {
        const response = await this.request("/health", {
          method: "GET",
          auth: false,
          signal: AbortSignal.any([signal, AbortSignal.timeout(5000)]),
        });
        await response.body.dump();
        if (response.statusCode === 200) return;
      } catch {
        // Not answering yet.
      }
      if (Date.now() > deadline)
        throw new Error(`llama-server did not become healthy in ${timeoutMs / 1000} s`);
      await new Promise((resolve) => setTimeout(resolve, 100));
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
        (address) => {
          for (const listener of this.#readyListeners) listener(address);
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
    if (!child || child.exitCode !== null || child.signalCode !== null) {
      this.#release();
      return;
    }
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGTERM");
    const timer = setTimeout(() => kill(child, "SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
    this.#release();
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
 * Whether `binary` can listen on a Unix socket: its `--help` describes `.sock` hosts (llama.cpp's
 * server since 2025). An older build, or one whose help cannot be read, listens on a port.
 */
export function supportsUnixSocket(binary: string): Promise<boolean> {
  if (process.platform === "win32") return Promise.resolve(false);
  return new Promise((resolve) => {
    execFile(binary, ["--help"], { timeout: 10_000, maxBuffer: 4 * 1024 * 1024 }, (_error, stdout, stderr) =>
      resolve(/\.sock\b/.test(`${stdout}${stderr}`)),
    );
  });
}
