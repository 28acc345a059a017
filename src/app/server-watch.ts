/**
 * Whether the Spark server the app's agents talk to (`spark app --server URL`) answers. Probed at
 * start (so the user hears at once that nothing is there) and then every few seconds: while it is
 * down, messages sent in the browser wait in their tasks (see `Task.send`) and go out once it
 * answers again, and the browsers show a banner. Any HTTP answer counts as reachable (a 401 or 404
 * is the server talking); only a failed connection or no answer in time counts as down.
 *
 * The probe is a plain node:http(s) request, not `fetch`: the first `fetch` loads Node's own undici
 * (~40 ms of the main thread here), and the first probe runs the moment the app has printed its
 * URL, which is when the browser (or VS Code's pane) asks for the page (figures 27 and 34).
 */
import { request as httpRequest } from "node:http";
import type { ServerHealth } from "./protocol.js";

const PROBE_TIMEOUT_MS = 3000;

export class ServerWatch {
  #health: ServerHealth;
  #timer: NodeJS.Timeout | undefined;
  #closed = false;
  #probing: Promise<ServerHealth> | undefined;

  constructor(
    readonly url: string,
    /** Called when reachability changes (not on every probe). */
    private readonly onChange: (health: ServerHealth) => void,
    private readonly intervals = { down: 1000, up: 5000 },
  ) {
    this.#health = { url, reachable: true };
  }

  get health(): ServerHealth {
    return this.#health;
  }

  /** Probes now; the result is also the watch's state (and `onChange` hears of a change). */
  check(): Promise<ServerHealth> {
    this.#probing ??= this.#probe().finally(() => (this.#probing = undefined));
    return this.#probing;
  }

  /** Probes on a timer from now on: often while the server is down, seldom while it is up. */
  start(): void {
    if (this.#closed || this.#timer) return;
    const next = (): void => {
      if (this.#closed) return;
      this.#timer = setTimeout(
        () => void this.check().finally(next),
        this.#health.reachable ? this.intervals.up : this.intervals.down,
      );
      this.#timer.unref();
    };
    next();
  }

  close(): void {
    this.#closed = true;
    clearTimeout(this.#timer);
  }

  async #probe(): Promise<ServerHealth> {
    let health: ServerHealth;
    try {
      await answers(new URL("/healthz", this.url), PROBE_TIMEOUT_MS);
      health = { url: this.url, reachable: true };
    } catch (error) {
      health = { url: this.url, reachable: false, error: describe(error) };
    }
    const changed = health.reachable !== this.#health.reachable;
    this.#health = health;
    if (changed && !this.#closed) this.onChange(health);
    return health;
  }
}

/** Resolves once `url` answers with any status; rejects when it cannot be reached in `timeoutMs`. */
async function answers(url: URL, timeoutMs: number): Promise<void> {
  const request = url.protocol === "https:" ? (await import("node:https")).request : httpRequest;
  await new Promise<void>((resolve, reject) => {
    const probe = request(url, { method: "GET", timeout: timeoutMs, agent: false }, (response) => {
      response.resume();
      resolve();
    });
    probe.on("timeout", () => {
      const timedOut = new Error(`no answer in ${timeoutMs / 1000} s`);
      timedOut.name = "TimeoutError";
      probe.destroy(timedOut);
    });
    probe.on("error", reject);
    probe.end();
  });
}

/** `connection refused`, `no answer in 3 s`, …: the cause of a failed probe, in a few words. */
function describe(error: unknown): string {
  const cause = ((error as { cause?: unknown }).cause ?? error) as { code?: string; message?: string };
  if ((error as Error).name === "TimeoutError") return `no answer in ${PROBE_TIMEOUT_MS / 1000} s`;
  if (cause?.code === "ECONNREFUSED") return "connection refused";
  if (cause?.code === "ENOTFOUND") return "no such host";
  return cause?.code ?? cause?.message ?? (error as Error).message;
}
