/**
 * One instance's connection to the Redis its fleet shares (`--redis redis://…`), through ioredis,
 * and whether Redis can be counted on right now.
 *
 * Contracts:
 * - Commands never wait for a connection: with Redis away they fail at once (no offline queue, no
 *   resend after a reconnect), and a command that gets no answer within `timeoutMs` fails too. A
 *   failed command marks the link down; while it is down commands fail at once (no request waits on
 *   a Redis that stopped answering) and a probe (`PING`, every `probeMs`) brings it back up.
 *   ioredis reconnects by itself; the link is up again once a probe answers.
 * - Every failure is a `SharedStoreUnavailable`, whatever its cause, so callers have one case.
 * - The log gets one line when Redis becomes unreachable and one when it is back (with how long it
 *   was away), never one per request or per reconnection attempt.
 * - Scripts run by SHA (`EVALSHA`). Every script `run` has seen is loaded (`SCRIPT LOAD`) each time
 *   the link comes up, before it counts as up, so the first use after a (re)start costs no extra
 *   round trip (which would let a later command from another instance overtake it); one Redis
 *   does not know anyway (flushed meanwhile) gets the script itself.
 * - The URL's password is never printed (`shownUrl`).
 */
import { createHash } from "node:crypto";
import { Redis } from "ioredis";
import { SharedStoreUnavailable } from "../core/limits/shared.js";

export interface RedisLinkOptions {
  /** The server log, one line each. */
  log?: (line: string) => void;
  /** What the log says the instance does while Redis is away. */
  whileDown?: string;
  /** Longest wait for one command's answer. */
  timeoutMs?: number;
  /** Interval of the probe that brings a down link back. */
  probeMs?: number;
  /** Called on every change of `up`. */
  onChange?: (up: boolean) => void;
}

interface Pending {
  command: (string | number)[];
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
}

export interface RedisScript {
  lua: string;
  sha: string;
  keys: number;
}

export function redisScript(lua: string, keys: number): RedisScript {
  return { lua, keys, sha: createHash("sha1").update(lua).digest("hex") };
}

const DEFAULT_TIMEOUT_MS = 1000;
const DEFAULT_PROBE_MS = 500;

export class RedisLink {
  readonly client: Redis;
  readonly shownUrl: string;
  #up = false;
  /** Why Redis is unreachable (the last error), while it is. */
  #reason = "not connected yet";
  #downSince = performance.now();
  /** Whether an outage has been logged (the first connection failing counts as one). */
  #loggedDown = false;
  #probe: NodeJS.Timeout | undefined;
  #closed = false;
  /** Commands waiting for the end of this turn of the event loop (see `#send`). */
  #batch: Pending[] = [];
  /** Scripts to load whenever the link comes up. */
  readonly #scripts = new Map<string, RedisScript>();
  readonly #log: (line: string) => void;
  readonly #options: RedisLinkOptions;

  constructor(url: string, options: RedisLinkOptions = {}) {
    this.#options = options;
    this.#log = options.log ?? (() => {});
    this.shownUrl = hidePassword(url);
    this.client = new Redis(url, {
      lazyConnect: true,
      enableOfflineQueue: false,
      autoResendUnfulfilledCommands: false,
      maxRetriesPerRequest: 0,
      commandTimeout: options.timeoutMs ?? DEFAULT_TIMEOUT_MS,
      connectTimeout: 2000,
      // Reconnect quickly and keep trying: a Redis restart should be noticed within a second.
      retryStrategy: (times) => Math.min(100 * times, 1000),
      // The link batches commands itself (see `#send`).
      enableAutoPipelining: false,
      connectionName: "spark",
    });
    // ioredis reports every failed reconnection as an 'error'; the link logs outages itself.
    this.client.on("error", (error: Error) => this.#markDown(error));
    // A close follows the error that caused it: keep that error as the reason while down.
    this.client.on("close", () => this.#markDown(new Error(this.#up ? "connection closed" : this.#reason)));
    this.client.on("ready", () => void this.#check());
  }

  get up(): boolean {
    return this.#up;
  }

  /** `ok`, or why Redis cannot be used right now. */
  get detail(): string {
    return this.#up ? "ok" : `unreachable: ${this.#reason}`;
  }

  /** Connects; resolves whether or not Redis answers (the link comes up on its own later). */
  async connect(): Promise<boolean> {
    try {
      // Once started, ioredis reconnects by itself: a second call only checks.
      if (this.client.status === "wait" || this.client.status === "end") await this.client.connect();
      await this.#check();
    } catch (error) {
      this.#markDown(error as Error);
    }
    return this.#up;
  }

  /** Runs a command; rejects with `SharedStoreUnavailable` at once while the link is down. */
  async call(command: string, ...args: (string | number)[]): Promise<unknown> {
    if (!this.#up) throw new SharedStoreUnavailable(`Redis ${this.detail}`);
    try {
      return await this.#send([command, ...args]);
    } catch (error) {
      throw this.#failed(error as Error);
    }
  }

  /** Loads `script` now and whenever the link comes up again. */
  register(script: RedisScript): void {
    this.#scripts.set(script.sha, script);
    if (this.#up) this.client.call("SCRIPT", "LOAD", script.lua).catch(() => {});
  }

  /** Runs a script (by SHA, sending it once when Redis does not know it). */
  async run(
    script: RedisScript,
    keys: readonly string[],
    args: readonly (string | number)[],
  ): Promise<unknown> {
    if (!this.#scripts.has(script.sha)) this.register(script);
    if (!this.#up) throw new SharedStoreUnavailable(`Redis ${this.detail}`);
    try {
      return await this.#send(["EVALSHA", script.sha, keys.length, ...keys, ...args]);
    } catch (error) {
      if (!/NOSCRIPT/.test((error as Error).message)) throw this.#failed(error as Error);
    }
    try {
      return await this.#send(["EVAL", script.lua, keys.length, ...keys, ...args]);
    } catch (error) {
      throw this.#failed(error as Error);
    }
  }

  /**
   * Sends a command. Commands asked for in the same turn of the event loop go out in one write (a
   * pipeline) at the end of it, in order: many responses admitted at once cost one system call,
   * and nothing waits for an earlier batch's answers (ioredis's own auto-pipelining holds a batch
   * back until the previous one is answered, which let a release trail a later admission).
   */
  #send(command: (string | number)[]): Promise<unknown> {
    return new Promise((resolve, reject) => {
      if (this.#batch.length === 0) queueMicrotask(() => this.#flush());
      this.#batch.push({ command, resolve, reject });
    });
  }

  #flush(): void {
    const batch = this.#batch;
    this.#batch = [];
    if (batch.length === 1) {
      const [{ command, resolve, reject }] = batch as [Pending];
      this.client.call(String(command[0]), ...command.slice(1)).then(resolve, reject);
      return;
    }
    const pipeline = this.client.pipeline();
    for (const { command } of batch) pipeline.call(String(command[0]), ...command.slice(1));
    pipeline.exec().then(
      (results) =>
        batch.forEach(({ resolve, reject }, i) => {
          const [error, value] = results?.[i] ?? [new Error("no reply"), undefined];
          if (error) reject(error);
          else resolve(value);
        }),
      (error: unknown) => batch.forEach(({ reject }) => reject(error)),
    );
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#probe);
    try {
      await this.client.quit();
    } catch {
      this.client.disconnect();
    }
  }

  /** A command failed: a reply error (a script's own error) leaves the link up; anything else downs it. */
  #failed(error: Error): SharedStoreUnavailable {
    if (error.name !== "ReplyError" || /LOADING|BUSY|MASTERDOWN|READONLY/.test(error.message))
      this.#markDown(error);
    return new SharedStoreUnavailable(`Redis: ${error.message}`);
  }

  /** Pings; up when it answers. */
  async #check(): Promise<void> {
    if (this.#closed) return;
    try {
      await this.client.call("PING");
      if (!this.#up)
        await Promise.all([...this.#scripts.values()].map((s) => this.client.call("SCRIPT", "LOAD", s.lua)));
    } catch (error) {
      this.#markDown(error as Error);
      return;
    }
    if (this.#up) return;
    this.#up = true;
    clearInterval(this.#probe);
    this.#probe = undefined;
    if (this.#loggedDown) {
      const seconds = ((performance.now() - this.#downSince) / 1000).toFixed(1);
      this.#log(`Redis at ${this.shownUrl} is reachable again after ${seconds} s: limits are shared again`);
    } else this.#log(`Redis at ${this.shownUrl} connected: limits and revocations are shared`);
    this.#loggedDown = false;
    this.#options.onChange?.(true);
  }

  #markDown(error: Error): void {
    if (this.#closed) return;
    this.#reason = error.message || String(error);
    if (!this.#up && this.#probe) return;
    const wasUp = this.#up;
    this.#up = false;
    if (wasUp || !this.#loggedDown) {
      this.#downSince = performance.now();
      this.#loggedDown = true;
      this.#log(
        `Redis at ${this.shownUrl} is unreachable (${this.#reason})` +
          (this.#options.whileDown ? `: ${this.#options.whileDown}` : ""),
      );
    }
    if (wasUp) this.#options.onChange?.(false);
    this.#probe ??= setInterval(() => {
      if (this.client.status === "ready") void this.#check();
    }, this.#options.probeMs ?? DEFAULT_PROBE_MS).unref();
  }
}

/** `redis://user:secret@host:6379/0` → `redis://user:***@host:6379/0`. */
export function hidePassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = "***";
    return parsed.toString().replace(/\/$/, "");
  } catch {
    return "(invalid URL)";
  }
}
