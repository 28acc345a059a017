/**
 * A real, private PostgreSQL server for a test file: Debian's `postgresql` package (`initdb`,
 * `pg_ctl`), a cluster in a temporary directory, listening on 127.0.0.1 on a free port (and a
 * Unix socket in the same directory), stopped and removed by `stop()`. As root the server runs as
 * the `postgres` user (PostgreSQL refuses to run as root). Tests skip, with `POSTGRES_MISSING` as the
 * reason, only where the package is not installed.
 */
import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { closedPort } from "./ports.js";

/** The directory of `initdb` and `pg_ctl`: `$PG_BIN`, else the newest `/usr/lib/postgresql/N/bin`. */
function findBinaries(): string | undefined {
  const candidates: string[] = [];
  if (process.env.PG_BIN) candidates.push(process.env.PG_BIN);
  const root = "/usr/lib/postgresql";
  if (existsSync(root)) {
    const versions = readdirSync(root)
      .filter((name) => /^\d+$/.test(name))
      .sort((a, b) => Number(b) - Number(a));
    candidates.push(...versions.map((version) => join(root, version, "bin")));
  }
  return candidates.find((dir) => existsSync(join(dir, "initdb")) && existsSync(join(dir, "pg_ctl")));
}

const BIN = findBinaries();

/** Why the Postgres tests skip, or undefined when they can run. */
export const POSTGRES_MISSING: string | undefined = BIN
  ? undefined
  : "PostgreSQL is not installed (apt-get install postgresql; or set PG_BIN to the directory of initdb and pg_ctl)";

const asRoot = process.getuid?.() === 0;

function owner(): { uid: number; gid: number } | undefined {
  if (!asRoot) return undefined;
  const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
  return { uid, gid };
}

export class TestPostgres {
  #running = false;

  private constructor(
    /** The temporary directory: `data/` (the cluster), the socket and `server.log`. */
    readonly dir: string,
    readonly port: number,
  ) {}

  /** Creates a cluster and starts it. */
  static async start(): Promise<TestPostgres> {
    if (!BIN) throw new Error(POSTGRES_MISSING);
    const dir = mkdtempSync(join(tmpdir(), "spark-pg-"));
    const user = owner();
    if (user) {
      chmodSync(dir, 0o700);
      chownSync(dir, user.uid, user.gid);
    }
    const server = new TestPostgres(dir, await closedPort());
    server.#run("initdb", [
      "-D",
      join(dir, "data"),
      "-U",
      "spark",
      "--auth=trust",
      "--encoding=UTF8",
      "--locale=C",
      "--no-sync",
    ]);
    server.restart();
    return server;
  }

  /** `postgres://spark@127.0.0.1:PORT/DATABASE`. */
  url(database = "postgres"): string {
    return `postgres://spark@127.0.0.1:${this.port}/${database}`;
  }

  /** A new, empty database; its URL. */
  async createDatabase(name: string): Promise<string> {
    await this.sql(`CREATE DATABASE ${name}`);
    return this.url(name);
  }

  /** Runs one statement on a connection of its own and returns its rows. */
  async sql<R extends object = Record<string, unknown>>(
    text: string,
    values: unknown[] = [],
    database = "postgres",
  ): Promise<R[]> {
    const client = new pg.Client({ connectionString: this.url(database) });
    await client.connect();
    try {
      return (await client.query<R>(text, values)).rows;
    } finally {
      await client.end();
    }
  }

  /** Starts the server (again, on the same port), waiting until it accepts connections. */
  restart(): void {
    if (this.#running) this.stop("fast");
    this.#run("pg_ctl", [
      "-D",
      join(this.dir, "data"),
      "-l",
      join(this.dir, "server.log"),
      "-o",
      `-p ${this.port} -k ${this.dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=on`,
      "-w",
      "-t",
      "60",
      "start",
    ]);
    this.#running = true;
  }

  /** Stops the server: `fast` ends sessions cleanly, `immediate` is a crash (no shutdown checkpoint). */
  stop(mode: "fast" | "immediate" = "fast"): void {
    if (!this.#running) return;
    this.#run("pg_ctl", ["-D", join(this.dir, "data"), "-m", mode, "-w", "stop"]);
    this.#running = false;
  }

  /** Stops the server and removes its directory. */
  destroy(): void {
    try {
      this.stop("immediate");
    } finally {
      rmSync(this.dir, { recursive: true, force: true });
    }
  }

  /** The server's log, for failure messages. */
  log(): string {
    try {
      return readFileSync(join(this.dir, "server.log"), "utf8");
    } catch {
      return "";
    }
  }

  #run(tool: string, args: string[]): void {
    const command = join(BIN!, tool);
    const run = asRoot
      ? spawnSync("runuser", ["-u", "postgres", "--", command, ...args], { encoding: "utf8", cwd: this.dir })
      : spawnSync(command, args, { encoding: "utf8", cwd: this.dir });
    if (run.status !== 0) {
      throw new Error(
        `${tool} ${args.join(" ")} failed (${run.status ?? run.signal}):\n${run.stdout}\n${run.stderr}\n${this.log()}`,
      );
    }
  }
}
