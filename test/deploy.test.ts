/**
 * `deploy/`, exercised where it can run here: the nginx configuration through `nginx -t` and then
 * a real nginx (Debian's) in front of three real `spark serve` instances sharing a real Postgres
 * and a real Redis, with only its addresses replaced; the systemd unit through `systemd-analyze
 * verify`; the compose file's and the unit's Spark settings through Spark's own settings check.
 *
 * Then a rolling restart under a steady WebSocket load through nginx: clients run chains of turns
 * (`store: true`, each turn continuing the last with `previous_response_id`); one instance gets
 * SIGTERM, drains (its clients' responses finish, then close code 1012), exits 0 and starts again
 * on its port. No response is lost or cut, and every client whose connection was closed continues
 * its chain on a new connection, from Postgres (the script engine answers by turn number, so a
 * turn that lost history would get the wrong answer).
 */
import assert from "node:assert/strict";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { parse as parseYaml } from "yaml";
import { ENV_NAMES, resolveSettings } from "../src/settings/config.js";
import { file, REPO_ROOT } from "./helpers/cli.js";
import { createKeys, health, killAll, serve, until, type Instance } from "./helpers/fleet.js";
import { closedPort } from "./helpers/ports.js";
import { POSTGRES_MISSING, TestPostgres } from "./helpers/postgres.js";
import { REDIS_MISSING, TestRedis } from "./helpers/redis.js";
import { TERMINAL_TYPES, WsClient, type ServerEvent } from "./helpers/ws-client.js";

const NGINX = ["/usr/sbin/nginx", "/usr/bin/nginx"].find(
  (path) => spawnSync(path, ["-v"], { encoding: "utf8" }).status === 0,
);
const NGINX_MISSING = NGINX ? undefined : "nginx is not installed (apt-get install nginx)";
const fleetSkip = NGINX_MISSING ?? REDIS_MISSING ?? POSTGRES_MISSING ?? false;
const DEPLOY = join(REPO_ROOT, "deploy");
const NGINX_CONF = readFileSync(join(DEPLOY, "nginx", "spark.conf"), "utf8");

/** Turn N's answer: its number, then enough pieces to take a while at the script's rate. */
const answer = (n: number): string => `Answer ${n}. ${"word ".repeat(30).trimEnd()}`;
const SCRIPT = file(
  "deploy.jsonl",
  Array.from({ length: 80 }, (_, i) =>
    JSON.stringify({ output: [{ type: "message", text: answer(i + 1) }] }),
  ).join("\n") + "\n",
);

/** The deploy configuration with the instances' and nginx's addresses replaced (nothing else). */
function renderNginx(ports: number[], listen: number): string {
  const servers = NGINX_CONF.match(/^\s*server spark-\d:8484;$/gm) ?? [];
  assert.equal(servers.length, 3, "the deploy config names three instances");
  let rendered = NGINX_CONF;
  servers.forEach((line, i) => {
    rendered = rendered.replace(line, `    server 127.0.0.1:${ports[i]};`);
  });
  assert.match(rendered, /^\s*listen 80;$/m);
  return rendered.replace(/^\s*listen 80;$/m, `    listen 127.0.0.1:${listen};`);
}

class TestNginx {
  #child: ChildProcess | undefined;

  private constructor(
    readonly dir: string,
    readonly port: number,
  ) {}

  /** nginx's main config around the deploy file, all paths in a temporary directory. */
  static prepare(ports: number[], port: number): TestNginx {
    const dir = mkdtempSync(join(tmpdir(), "spark-nginx-"));
    for (const sub of ["logs", "temp"]) mkdirSync(join(dir, sub));
    chmodSync(join(dir, "temp"), 0o777);
    writeFileSync(join(dir, "spark.conf"), renderNginx(ports, port));
    writeFileSync(
      join(dir, "nginx.conf"),
      [
        // As root nginx would run its workers as nobody; keep them as the test's user.
        process.getuid?.() === 0 ? "user root;" : "",
        "worker_processes 1;",
        "daemon off;",
        `pid ${join(dir, "nginx.pid")};`,
        `error_log ${join(dir, "logs", "error.log")} info;`,
        "events { worker_connections 256; }",
        "http {",
        `  access_log ${join(dir, "logs", "access.log")};`,
        ...["client_body", "proxy", "fastcgi", "uwsgi", "scgi"].map(
          (kind) => `  ${kind}_temp_path ${join(dir, "temp", kind)};`,
        ),
        `  include ${join(dir, "spark.conf")};`,
        "}",
        "",
      ].join("\n"),
    );
    return new TestNginx(dir, port);
  }

  /** `nginx -t` on the configuration: exit status and what it said. */
  check(): { status: number | null; output: string } {
    const run = spawnSync(NGINX!, ["-t", "-p", this.dir, "-c", join(this.dir, "nginx.conf")], {
      encoding: "utf8",
    });
    return { status: run.status, output: run.stdout + run.stderr };
  }

  async start(): Promise<void> {
    this.#child = spawn(NGINX!, ["-p", this.dir, "-c", join(this.dir, "nginx.conf")], { stdio: "ignore" });
    await until(async () => {
      try {
        return (await fetch(`${this.url}/healthz`)).status > 0;
      } catch {
        return false;
      }
    }, "nginx to listen");
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async destroy(): Promise<void> {
    if (this.#child && this.#child.exitCode === null) {
      const exited = once(this.#child, "exit");
      this.#child.kill("SIGTERM");
      await exited;
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  log(): string {
    try {
      return readFileSync(join(this.dir, "logs", "error.log"), "utf8");
    } catch {
      return "";
    }
  }
}

test("the compose file's and the systemd unit's Spark settings are settings Spark accepts; the unit verifies", () => {
  const compose = parseYaml(readFileSync(join(DEPLOY, "compose.yaml"), "utf8")) as {
    services: Record<string, { environment?: Record<string, string>; volumes?: string[] }>;
  };
  const known = new Set(Object.values(ENV_NAMES));
  const instances = Object.keys(compose.services).filter((name) => /^spark-\d$/.test(name));
  assert.deepEqual(instances, ["spark-1", "spark-2", "spark-3"]);
  // nginx's upstream names are the compose services, and nginx mounts the tested file.
  for (const name of instances) assert.match(NGINX_CONF, new RegExp(`server ${name}:8484;`));
  assert.ok(compose.services.nginx?.volumes?.some((volume) => volume.startsWith("./nginx/spark.conf:")));

  const unitEnv = Object.fromEntries(
    readFileSync(join(DEPLOY, "systemd", "spark.env"), "utf8")
      .split("\n")
      .filter((line) => /^[A-Z_]+=/.test(line))
      .map((line) => [line.slice(0, line.indexOf("=")), line.slice(line.indexOf("=") + 1)]),
  ) as Record<string, string>;
  for (const [where, env] of [
    ["compose", compose.services["spark-1"]!.environment!],
    ["spark.env", unitEnv],
  ] as const) {
    for (const name of Object.keys(env).filter((key) => key.startsWith("SPARK_")))
      assert.ok(known.has(name), `${where}: ${name} is not a Spark setting`);
    // Throws (naming the variable) on any value Spark would refuse at start.
    const settings = resolveSettings({}, env);
    assert.equal(settings.engine, "openai");
    assert.match(settings.redis ?? "", /^redis:\/\//);
    assert.match(settings.store, /^postgres:\/\//);
  }

  const analyze = spawnSync("systemd-analyze", ["--version"], { encoding: "utf8" });
  if (analyze.status !== 0) return; // systemd-analyze is not installed: the unit is checked where it is
  // The unit as installed for port 8484, its command pointed at this checkout's launcher.
  const unitDir = mkdtempSync(join(tmpdir(), "spark-unit-"));
  try {
    const unit = join(unitDir, "spark@8484.service");
    writeFileSync(
      unit,
      readFileSync(join(DEPLOY, "systemd", "spark@.service"), "utf8").replace(
        "/usr/local/bin/spark",
        join(REPO_ROOT, "bin", "spark.js"),
      ),
    );
    const verify = spawnSync("systemd-analyze", ["verify", unit], { encoding: "utf8" });
    const problems = (verify.stdout + verify.stderr)
      .split("\n")
      .filter((line) => line.includes("spark@8484.service"));
    assert.deepEqual(problems, [], verify.stderr);
  } finally {
    rmSync(unitDir, { recursive: true, force: true });
  }
});

let postgres: TestPostgres;
let redis: TestRedis;
let nginx: TestNginx;
let keys: Record<string, string>;
let keyFile: string;
let storeUrl: string;
const ports: number[] = [];
const instances: (Instance | undefined)[] = [];

function instance(port: number): Promise<Instance> {
  return serve(
    SCRIPT,
    [
      "--port",
      String(port),
      "--rate",
      "60",
      "--key-file",
      keyFile,
      "--store",
      storeUrl,
      "--redis",
      redis.url,
      "--drain-timeout",
      "60",
    ],
    {},
  );
}

before(async () => {
  if (fleetSkip) return;
  [postgres, redis] = await Promise.all([TestPostgres.start(), TestRedis.start()]);
  storeUrl = await postgres.createDatabase("deploy");
  ({ file: keyFile, keys } = await createKeys({ load: { rpm: 100_000, concurrent: 100 } }));
  for (let i = 0; i < 3; i++) ports.push(await closedPort());
  // One at a time on an empty database would also work (migration takes turns); together is faster.
  instances.push(...(await Promise.all(ports.map((port) => instance(port)))));
  nginx = TestNginx.prepare(ports, await closedPort());
});
after(async () => {
  killAll(instances.filter((member): member is Instance => member !== undefined));
  await nginx?.destroy();
  await redis?.destroy();
  postgres?.destroy();
});

test("nginx -t accepts the deploy configuration", { skip: fleetSkip }, () => {
  const { status, output } = nginx.check();
  assert.equal(status, 0, output);
  assert.match(output, /syntax is ok/);
});

interface Turn {
  n: number;
  id: string;
  text: string;
  terminal: string;
}

/**
 * One client of the steady load: turns one after another over WebSocket through nginx, each
 * continuing the last; on close 1012 (or a turn refused because the instance drains) it reconnects
 * and goes on. Stops after `enough()` says so.
 */
interface Load {
  turns: Turn[];
  /** Close codes of the connections it used. */
  closes: number[];
  connections: number;
}

async function client(
  url: string,
  key: string,
  load: Load,
  enough: (turns: number) => boolean,
): Promise<Load> {
  const { turns, closes } = load;
  let socket: WsClient | undefined;
  while (!enough(turns.length) && turns.length < 70) {
    if (!socket || socket.socket.readyState !== socket.socket.OPEN) {
      socket = await WsClient.connect(url, { headers: { authorization: `Bearer ${key}` } });
      load.connections++;
      const current = socket;
      void current.closed.then(({ code }) => closes.push(code));
    }
    const from = socket.events.length;
    const previous = turns.at(-1)?.id;
    socket.send({
      type: "response.create",
      model: "spark",
      input: `turn ${turns.length + 1}`,
      ...(previous ? { previous_response_id: previous } : {}),
    });
    const current = socket;
    // The turn's own end, or the sign it was not taken (refused while draining, or closed first).
    const outcome = await Promise.race([
      current.waitFor((event) => TERMINAL_TYPES.has(event.type) || event.type === "error", from),
      current.closed.then(() => undefined),
    ]);
    const created = current.events.slice(from).find((event) => event.type === "response.created");
    if (!outcome || outcome.type === "error") {
      // Not started (no response.created): send it again on a new connection.
      assert.equal(created, undefined, `a started turn was cut: ${JSON.stringify(outcome)}`);
      if (outcome) assert.equal((outcome.error as { code: string }).code, "server_shutting_down");
      await current.closed;
      continue;
    }
    const events = current.events.slice(from);
    const text = events
      .filter((event: ServerEvent) => event.type === "response.output_text.delta")
      .map((event) => event.delta as string)
      .join("");
    turns.push({
      n: turns.length + 1,
      id: (outcome.response as { id: string }).id,
      text,
      terminal: outcome.type,
    });
  }
  await socket?.close();
  return load;
}

test(
  "rolling restart under a steady WebSocket load through nginx: nothing lost or cut, every chain goes on",
  { skip: fleetSkip },
  async () => {
    await nginx.start();
    const key = keys.load!;
    // Plain HTTP through nginx, spread over the instances.
    for (let i = 0; i < 3; i++) {
      const answerOf = await fetch(`${nginx.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "spark", input: "over nginx" }),
      });
      const text = await answerOf.text();
      assert.equal(answerOf.status, 200, text);
    }

    // Six clients; each stops two turns after it sees the restarted instance up.
    let restarted = false;
    const states: Load[] = Array.from({ length: 6 }, () => ({ turns: [], closes: [], connections: 0 }));
    const loads = states.map((state) => {
      let seenAt: number | undefined;
      return client(nginx.url, key, state, (done) => {
        if (!restarted) return false;
        seenAt ??= done;
        return done >= seenAt + 2;
      });
    });
    // Under way: every client has finished a turn, and the instance to restart has work in flight.
    await until(() => states.every((state) => state.turns.length >= 1), "every client's first turn");
    await until(async () => (await health(instances[1]!.url)).body.fleet !== undefined, "the fleet view");

    // Roll instance 2: SIGTERM, it drains and exits 0; then it starts again on its port.
    const target = instances[1]!;
    target.child.kill("SIGTERM");
    assert.equal(await target.exited, 0, target.stderr());
    assert.match(target.stderr(), /SIGTERM: draining/);
    instances[1] = await instance(ports[1]!);
    await until(async () => (await health(instances[1]!.url)).body.status === "ok", "the new instance");
    restarted = true;

    const results = await Promise.all(loads);
    let closedForRestart = 0;
    for (const { turns, closes, connections } of results) {
      // Every turn completed, whole, with the answer for its place in the chain: nothing was lost,
      // cut, or continued without its history.
      for (const turn of turns) {
        assert.equal(turn.terminal, "response.completed", `turn ${turn.n}`);
        assert.equal(turn.text, answer(turn.n), `turn ${turn.n} of a chain`);
      }
      if (closes.includes(1012)) {
        closedForRestart++;
        // It went on, on a new connection (the drained one's memory is gone: from Postgres).
        assert.ok(connections >= 2);
      }
    }
    assert.ok(closedForRestart >= 1, "the drained instance told its clients to reconnect (1012)");
    console.log(
      `# rolling restart: ${closedForRestart} of 6 clients closed with 1012 went on elsewhere; turns per client ${results.map((r) => r.turns.length).join(", ")}`,
    );
    // Every chain is whole in Postgres, readable through any instance.
    for (const { turns } of results) {
      const last = turns.at(-1)!;
      const stored = await fetch(`${nginx.url}/v1/responses/${last.id}`, {
        headers: { authorization: `Bearer ${key}` },
      });
      assert.equal(stored.status, 200);
    }
    assert.doesNotMatch(nginx.log(), /\[(error|crit|alert|emerg)\].*upstream prematurely closed/);
  },
);
