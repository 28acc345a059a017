/**
 * Figure 34: start-up, from process start. Every client is a real process launched the way users
 * launch it (`node bin/spark.js …`, the built CLI), against a `spark serve`-like server in this
 * process (script engine, unlimited rate) behind a WebSocket relay that timestamps what arrives.
 *
 * 34a. `spark exec --server URL "hi"`: spawn → first byte on the wire (the connection's first
 *      chunk at the relay), → its `response.create` frame, → the answer's first text on stdout.
 *      Reference: a minimal Node process (`ws` bundled into one file with esbuild, the cheapest a
 *      Node client gets) that sends the very frame spark exec sent and prints the first text delta.
 *      Besides wall time, the CPU time the process had used when its request reached the relay
 *      (/proc/PID/stat; it waits for the answer then): on a shared machine wall time lies, CPU
 *      time much less.
 * 34b. `spark --server URL "hi"` (the TUI) in a pseudo-terminal (util-linux `script`): spawn → first
 *      paint (the prompt drawn), → first byte on the wire, → the answer's first text on screen.
 *      Reference: the same minimal client.
 * 34c. `spark app --server URL --port 0`: spawn → the app's URL on stdout, → its page served
 *      (`GET /` answered 200). Reference: a bare Node HTTP server that prints its URL.
 *
 * Launches alternate between contenders, after one untimed warm-up of each (disk cache).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, request as httpRequest, type Server } from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";
import { WebSocket, WebSocketServer } from "ws";
import { parseScript, ScriptEngine } from "../src/engines/script/script-engine.js";
import { SparkServer } from "../src/server/http-server.js";
import { fmt, ms, summarize, type FigureResult, type Log, type Summary } from "./kit/report.js";

const ROOT = fileURLToPath(new URL("..", import.meta.url));
const SPARK = join(ROOT, "bin/spark.js");
/** The answer's first piece (the script engine streams up to four characters at a time). */
const FIRST_PIECE = "Qzxq";
const ANSWER = `${FIRST_PIECE} is the answer, streamed in pieces.`;
const CLOCK_TICKS = 100;

/** A relay in front of the server that timestamps each client connection's first byte and first frame. */
interface Arrival {
  firstByte: number;
  frame?: number;
  frameText?: string;
  /** The CPU time the launched process had used when its frame arrived (it waits for the answer then). */
  cpuAtFrame?: number;
}

async function startRelay(
  target: string,
  launched: () => number | undefined,
): Promise<{ url: string; arrivals: Arrival[]; close(): Promise<void> }> {
  const arrivals: Arrival[] = [];
  // Plain HTTP (the clients' `GET /v1/models`) goes through untimed.
  const server: Server = createServer((request, response) => {
    const forward = httpRequest(
      `${target}${request.url ?? "/"}`,
      { method: request.method, headers: request.headers },
      (answer) => {
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(response);
      },
    );
    forward.on("error", () => response.destroy());
    request.pipe(forward);
  });
  const wss = new WebSocketServer({ noServer: true, perMessageDeflate: false });
  const arrivalOf = new WeakMap<Socket, Arrival>();
  server.on("connection", (socket: Socket) => {
    socket.once("data", (chunk: Buffer) => {
      // Only WebSocket connections count (the first chunk of a connection holds its request line).
      if (!/^upgrade:\s*websocket/im.test(chunk.toString("latin1"))) return;
      const arrival = { firstByte: performance.now() };
      arrivals.push(arrival);
      arrivalOf.set(socket, arrival);
    });
  });
  server.on("upgrade", (request, socket, head) => {
    wss.handleUpgrade(request, socket as Socket, head, (client) => {
      // The parser emits the upgrade before this module's own "data" listener ran: looked up later.
      const arrivalOfClient = (): Arrival | undefined => arrivalOf.get(socket as Socket);
      const upstream = new WebSocket(`${target.replace(/^http/, "ws")}/v1/responses`, {
        perMessageDeflate: false,
        headers: request.headers.authorization ? { authorization: request.headers.authorization } : {},
      });
      const backlog: string[] = [];
      upstream.on("open", () => {
        for (const frame of backlog.splice(0)) upstream.send(frame);
      });
      client.on("message", (data) => {
        const text = data.toString();
        const arrival = arrivalOfClient();
        if (arrival && arrival.frame === undefined && text.includes('"response.create"')) {
          arrival.frame = performance.now();
          arrival.cpuAtFrame = cpuMs(launched());
          arrival.frameText = text;
        }
        if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
        else backlog.push(text);
      });
      upstream.on("message", (data) => client.send(data.toString()));
      client.on("close", () => upstream.close());
      upstream.on("close", () => client.close());
      upstream.on("error", () => client.terminate());
      client.on("error", () => upstream.terminate());
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    arrivals,
    close: async () => {
      for (const client of wss.clients) client.terminate();
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

/** The CPU time (user + system) a live process has used, in ms. */
function cpuMs(pid: number | undefined): number {
  if (pid === undefined) return Number.NaN;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS;
  } catch {
    return Number.NaN;
  }
}

/** Resolves with the time `needle` first appears on the child's stdout (and its CPU time then). */
function waitForOutput(
  child: ChildProcess,
  needle: string,
  timeoutMs = 60_000,
): Promise<{ at: number; cpu: number; text: string }> {
  return new Promise((resolve, reject) => {
    let seen = "";
    const timer = setTimeout(() => {
      child.stdout!.off("data", onData);
      reject(new Error(`no "${needle}" in ${timeoutMs} ms; output: ${JSON.stringify(seen.slice(-400))}`));
    }, timeoutMs);
    const onData = (chunk: Buffer): void => {
      seen += chunk.toString();
      if (!seen.includes(needle)) return;
      const at = performance.now();
      const cpu = cpuMs(child.pid);
      clearTimeout(timer);
      child.stdout!.off("data", onData);
      resolve({ at, cpu, text: seen });
    };
    child.stdout!.on("data", onData);
  });
}

function exited(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once("exit", () => resolve());
  });
}

async function stop(child: ChildProcess): Promise<void> {
  const done = exited(child);
  child.kill("SIGKILL");
  await done;
}

/** The minimal client, bundled with its `ws` into one file (what the cheapest Node client loads). */
async function buildMinimalClient(dir: string): Promise<string> {
  const source = join(dir, "minimal-client.mjs");
  writeFileSync(
    source,
    `import { readFileSync } from "node:fs";
import WebSocket from "ws";
const [url, frameFile] = process.argv.slice(2);
const frame = readFileSync(frameFile, "utf8");
const ws = new WebSocket(url.replace(/^http/, "ws") + "/v1/responses", { perMessageDeflate: false });
ws.on("open", () => ws.send(frame));
ws.on("message", (data) => {
  const event = JSON.parse(data.toString());
  if (event.type === "response.output_text.delta") process.stdout.write(event.delta);
  if (event.type === "response.completed" || event.type === "error") ws.close();
});
ws.on("close", () => process.exit(0));
`,
  );
  const out = join(dir, "minimal-client.bundle.mjs");
  await build({
    entryPoints: [source],
    outfile: out,
    bundle: true,
    format: "esm",
    platform: "node",
    target: "node20",
    nodePaths: [join(ROOT, "node_modules")],
    banner: {
      js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);",
    },
    logLevel: "warning",
  });
  return out;
}

function median(summary: Summary): string {
  return ms(summary.p50);
}

export async function startupFigures(options: { rounds: number }, log: Log): Promise<FigureResult[]> {
  const dir = mkdtempSync(join(tmpdir(), "spark-bench-startup-"));
  const workspace = join(dir, "workspace");
  mkdirSync(workspace);
  writeFileSync(join(workspace, "README.md"), "# a project\n");
  // No user config, no saved sessions of the user's: the defaults, as on a fresh machine. Only
  // SPARK_HOME is set (the data go to SPARK_HOME/data, the default place): any other SPARK_*
  // setting, as a config file, has the settings validated, which loads their schema (zod, ~0.75 MB)
  // before the first request; that is not what a fresh machine pays.
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: "", TERM: "xterm-256color" };
  for (const key of Object.keys(env)) if (key.startsWith("SPARK_")) delete env[key];
  env.SPARK_HOME = join(dir, "home");
  const engine = new ScriptEngine({
    lines: parseScript(JSON.stringify({ output: [{ type: "message", text: ANSWER }] })),
  });
  const server = new SparkServer({ engine, port: 0 });
  const serverUrl = await server.listen();
  let launched: ChildProcess | undefined;
  const relay = await startRelay(serverUrl, () => launched?.pid);
  const minimal = await buildMinimalClient(dir);
  const frameFile = join(dir, "frame.json");
  const results: FigureResult[] = [];
  const spawnIn = (argv: string[]): ChildProcess =>
    (launched = spawn(process.execPath, argv, { cwd: workspace, env, stdio: ["ignore", "pipe", "ignore"] }));
  const inTerminal = (command: string): ChildProcess =>
    spawn("script", ["-qfec", `stty cols 120 rows 30; exec ${command}`, "/dev/null"], {
      cwd: workspace,
      env,
      stdio: ["pipe", "pipe", "ignore"],
    });
  try {
    // 34a: spark exec and the minimal client, alternating.
    type Launches = { wire: number[]; frame: number[]; token: number[]; cpu: number[] };
    const exec: Launches = { wire: [], frame: [], token: [], cpu: [] };
    const floor: Launches = { wire: [], frame: [], token: [], cpu: [] };
    const launch = async (argv: string[], into: Launches, round: number): Promise<Arrival> => {
      const mark = relay.arrivals.length;
      const t0 = performance.now();
      const child = spawnIn(argv);
      const first = await waitForOutput(child, FIRST_PIECE);
      await exited(child);
      const arrival = relay.arrivals[mark];
      if (!arrival?.frameText) throw new Error(`${argv.join(" ")} sent no response.create through the relay`);
      if (round > 0) {
        into.wire.push(arrival.firstByte - t0);
        into.frame.push(arrival.frame! - t0);
        into.token.push(first.at - t0);
        into.cpu.push(arrival.cpuAtFrame!);
      }
      return arrival;
    };
    for (let round = 0; round <= options.rounds; round++) {
      const sent = await launch(
        [SPARK, "exec", "--server", relay.url, "--approval", "never", "hi"],
        exec,
        round,
      );
      if (round === 0) writeFileSync(frameFile, sent.frameText!);
      await launch([minimal, relay.url, frameFile], floor, round);
    }
    const summary = (l: Launches) => ({
      wire: summarize(l.wire),
      frame: summarize(l.frame),
      token: summarize(l.token),
      cpu: summarize(l.cpu),
    });
    const e = summary(exec);
    const f = summary(floor);
    log(
      `   spark exec: first byte on the wire ${median(e.wire)}, response.create ${median(e.frame)}, first text ${median(e.token)} (p90 ${ms(e.token.p90)}); CPU time when its request went out ${median(e.cpu)}`,
    );
    log(
      `   minimal client (ws, one file): first byte ${median(f.wire)}, response.create ${median(f.frame)}, first text ${median(f.token)} (p90 ${ms(f.token.p90)}); CPU time when its request went out ${median(f.cpu)}`,
    );
    const execRatio = e.token.p50 / f.token.p50;
    const execCpuRatio = e.cpu.p50 / f.cpu.p50;
    results.push({
      row: {
        figure: "34a. spark exec: start → first token",
        spark: `${median(e.token)} (CPU to send ${median(e.cpu)})`,
        reference: `minimal ws client ${median(f.token)} (CPU to send ${median(f.cpu)})`,
        comparison: `${fmt(execRatio, 2)}× wall, ${fmt(execCpuRatio, 2)}× CPU; wire at ${median(e.wire)}`,
        goal: "≤ 1.1× the minimal client",
        met: execRatio <= 1.1,
      },
      data: { exec: e, floor: f },
    });

    // 34b: the TUI in a pseudo-terminal.
    const tui = { paint: [] as number[], wire: [] as number[], token: [] as number[] };
    for (let round = 0; round <= options.rounds; round++) {
      const mark = relay.arrivals.length;
      const t0 = performance.now();
      const child = inTerminal(`${process.execPath} ${SPARK} --server ${relay.url} hi`);
      const paint = waitForOutput(child, "› ");
      const token = waitForOutput(child, FIRST_PIECE);
      const p = (await paint).at - t0;
      const t = (await token).at - t0;
      await stop(child);
      const arrival = relay.arrivals[mark];
      if (round === 0 || !arrival) continue;
      tui.paint.push(p);
      tui.wire.push(arrival.firstByte - t0);
      tui.token.push(t);
    }
    const t = { paint: summarize(tui.paint), wire: summarize(tui.wire), token: summarize(tui.token) };
    log(
      `   spark (TUI): first paint ${median(t.paint)}, first byte on the wire ${median(t.wire)}, first text on screen ${median(t.token)} (p90 ${ms(t.token.p90)})`,
    );
    const tuiRatio = t.token.p50 / f.token.p50;
    results.push({
      row: {
        figure: "34b. spark TUI: start → first token",
        spark: `${median(t.token)}; first paint ${median(t.paint)}`,
        reference: `minimal ws client ${median(f.token)}`,
        comparison: `${fmt(tuiRatio, 2)}×; wire at ${median(t.wire)}`,
        goal: "≤ 1.1× the minimal client",
        met: tuiRatio <= 1.1,
      },
      data: { tui: t },
    });

    // 34c: spark app serving its page.
    const app = { url: [] as number[], page: [] as number[] };
    const bare = { url: [] as number[], page: [] as number[] };
    const bareServer = `require("node:http").createServer((q,s)=>s.end("<!doctype html>")).listen(0,"127.0.0.1",function(){process.stdout.write("on http://127.0.0.1:"+this.address().port+"/\\n")})`;
    for (let round = 0; round <= options.rounds; round++) {
      for (const contender of ["app", "bare"] as const) {
        const t0 = performance.now();
        const child =
          contender === "app"
            ? spawnIn([SPARK, "app", "--server", relay.url, "--port", "0", "--quiet"])
            : spawnIn(["-e", bareServer]);
        const line = await waitForOutput(child, "\n");
        const url = /http:\/\/[^\s/]+/.exec(line.text)?.[0];
        if (!url) throw new Error("no URL printed");
        await getPage(url);
        const page = performance.now() - t0;
        await stop(child);
        if (round === 0) continue;
        (contender === "app" ? app : bare).url.push(line.at - t0);
        (contender === "app" ? app : bare).page.push(page);
      }
    }
    const a = { url: summarize(app.url), page: summarize(app.page) };
    const b = { url: summarize(bare.url), page: summarize(bare.page) };
    log(`   spark app: URL printed ${median(a.url)}, page served ${median(a.page)} (p90 ${ms(a.page.p90)})`);
    log(`   bare node HTTP server: URL printed ${median(b.url)}, page served ${median(b.page)}`);
    results.push({
      row: {
        figure: "34c. spark app: start → page served",
        spark: `${median(a.page)} (URL at ${median(a.url)})`,
        reference: `bare node server ${median(b.page)}`,
        comparison: `+${ms(a.page.p50 - b.page.p50)} over bare node`,
        goal: "≤ ~250 ms",
        met: a.page.p50 <= 250,
      },
      data: { app: a, bare: b },
    });
  } finally {
    await relay.close();
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  }
  return results;
}

function getPage(url: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const request = httpRequest(`${url}/`, (response) => {
      response.resume();
      if (response.statusCode !== 200) reject(new Error(`GET / answered ${response.statusCode}`));
      else response.on("end", () => resolve());
    });
    request.on("error", reject);
    request.end();
  });
}
