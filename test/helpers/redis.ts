/**
 * A real, private Redis server for a test file: Debian's `redis-server`, in a temporary directory,
 * on 127.0.0.1 and a free port, without persistence (a restart starts empty, the harder case for
 * the fleet). `stop()` and `start()` again keep the port, as a restarted Redis would. Tests skip,
 * with `REDIS_MISSING` as the reason, only where the package is not installed.
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";
import { closedPort } from "./ports.js";

function findBinary(): string | undefined {
  const candidates = [process.env.REDIS_SERVER, "/usr/bin/redis-server", "/usr/local/bin/redis-server"];
  for (const candidate of candidates) {
    if (!candidate) continue;
    if (spawnSync(candidate, ["--version"], { encoding: "utf8" }).status === 0) return candidate;
  }
  return undefined;
}

const BIN = findBinary();

/** Why the Redis tests skip, or undefined when they can run. */
export const REDIS_MISSING: string | undefined = BIN
  ? undefined
  : "redis-server is not installed (apt-get install redis-server; or set REDIS_SERVER to its path)";

export class TestRedis {
  #child: ChildProcess | undefined;
  #log = "";

  private constructor(
    readonly dir: string,
    readonly port: number,
  ) {}

  static async start(): Promise<TestRedis> {
    if (!BIN) throw new Error(REDIS_MISSING);
    const server = new TestRedis(mkdtempSync(join(tmpdir(), "spark-redis-")), await closedPort());
    await server.start();
    return server;
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.#child !== undefined;
  }

  /** Starts the server (again, on the same port) and waits until it answers PING. */
  async start(): Promise<void> {
    if (this.#child) return;
    const child = spawn(
      BIN!,
      [
        "--port",
        String(this.port),
        "--bind",
        "127.0.0.1",
        "--dir",
        this.dir,
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
      ],
      { stdio: ["ignore", "pipe", "pipe"] },
    );
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (this.#log += chunk));
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (this.#log += chunk));
    this.#child = child;
    child.once("exit", () => {
      if (this.#child === child) this.#child = undefined;
    });
    for (let attempt = 0; ; attempt++) {
      if (await this.#answers()) return;
      if (!this.#child) throw new Error(`redis-server exited at start:\n${this.#log}`);
      if (attempt > 600) throw new Error(`redis-server did not answer within a minute:\n${this.#log}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  /** Stops the server (SIGTERM, or SIGKILL for a crash) and waits for it to exit. */
  async stop(signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    const child = this.#child;
    if (!child) return;
    const exited = once(child, "exit");
    child.kill(signal);
    await exited;
    this.#child = undefined;
  }

  async destroy(): Promise<void> {
    await this.stop("SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
  }

  /** Runs one command on a connection of its own (ioredis) and returns the reply. */
  async command(name: string, ...args: (string | number)[]): Promise<unknown> {
    const client = new Redis(this.url, {
      lazyConnect: true,
      retryStrategy: () => null,
      maxRetriesPerRequest: 0,
    });
    client.on("error", () => {});
    try {
      await client.connect();
      return await client.call(name, ...args);
    } finally {
      client.disconnect();
    }
  }

  log(): string {
    return this.#log;
  }

  async #answers(): Promise<boolean> {
    try {
      return (await this.command("PING")) === "PONG";
    } catch {
      return false;
    }
  }
}
