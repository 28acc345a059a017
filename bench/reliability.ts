/**
 * `npm run reliability`: attacks a real `spark serve` process the way issue 16's review did and
 * reports what the server did, for BENCHMARKS.md's reliability section. Not timings: counts.
 *
 *   1. hostile input: the HTTP corpus (every field of every JSON route × every hostile value,
 *      streaming and not), the WebSocket frame corpus, and malformed HTTP; answers by status, 5xx,
 *      hangs, the largest error body, and whether the process survived;
 *   2. floods, each on a fresh server with a 128 MiB V8 heap, with its memory (RSS and heap used,
 *      from /metrics) after: a client that sends 1.5 M frames without reading; 4 connections × 32
 *      lanes × 1 MiB of `store: false` history; 24 stored `generate: false` requests of 8 MiB;
 *      2,000 connections that send half a header;
 *   3. faults: `kill -9` while stored responses are being written (every acknowledged response
 *      must be there after the restart), and a data directory on a full 1 MiB tmpfs (root only);
 *   4. the surfaces of issue 21, each against its goal: the worst event-loop stall of one request
 *      up to the body limit (bench/loop-stall.ts, llama engine, goal < 100 ms), the RSS a browser
 *      that stops reading adds to `spark app` for a 10 MiB answer, over one that reads it
 *      (bench/app-slow-reader.ts, goal < +64 MiB), and the bytes `spark lsp` writes for a 100 KB quick edit
 *      (bench/lsp-quick-edit-bytes.ts, goal < 2× the rewrite).
 *
 *   5. the confined file layer (issue 30, figure 30, bench/confined-cases.ts): every caller of it tried
 *      with every kind of hostile entry (links out, into `.git`, at secrets, dangling, chained,
 *      looping, FIFOs, a device), and how many escaped (a write outside or into a protected name, a
 *      secret shown, a block).
 *
 * Run: `npm run reliability` (about 75 s on 2 cores, plus sections 4 and 5). `--quick` runs smaller
 * floods; `--surfaces` runs section 4 alone, `--confined` section 5 alone.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setImmediate as nextTurn, setTimeout as sleep } from "node:timers/promises";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { httpCases, wsFrames } from "../test/fixtures/hostile-corpus.js";
import { slowReaderFigure } from "./app-slow-reader.js";
import { confinedCasesFigure } from "./confined-cases.js";
import { loopStallFigure } from "./loop-stall.js";
import { quickEditBytesFigure } from "./lsp-quick-edit-bytes.js";
import { startServe, type SparkChild } from "./kit/children.js";
import { fmt, table } from "./kit/report.js";

const { values: args } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    surfaces: { type: "boolean", default: false },
    confined: { type: "boolean", default: false },
  },
});
const MiB = 1024 * 1024;
const REQUEST_TIMEOUT_MS = 20_000;
const MAX_BODY_BYTES = 256 * 1024;
const work = mkdtempSync(join(tmpdir(), "spark-reliability-"));
const script = join(work, "script.jsonl");
writeFileSync(
  script,
  JSON.stringify({ output: [{ type: "message", text: "Still here, still answering." }] }),
);
const log = (line: string): void => console.log(line);

type Server = SparkChild;

let dataDirs = 0;

function serve(extra: readonly string[] = [], heapMiB = 128, dataDir?: string): Promise<Server> {
  return startServe(["--engine", "script", "--script", script, "--port", "0", ...extra], {
    env: {
      ...process.env,
      NODE_OPTIONS: `--max-old-space-size=${heapMiB}`,
      SPARK_DATA_DIR: dataDir ?? join(work, `data-${++dataDirs}`),
    },
  });
}

async function stopServer(server: Server): Promise<void> {
  if (server.child.exitCode === null && server.child.signalCode === null) server.child.kill("SIGTERM");
  await server.exited;
}

function alive(server: Server): boolean {
  return server.child.exitCode === null && server.child.signalCode === null;
}

async function healthy(server: Server): Promise<boolean> {
  if (!alive(server)) return false;
  try {
    const response = await fetch(`${server.url}/healthz`, {
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
    return response.status === 200;
  } catch {
    return false;
  }
}

async function metric(server: Server, name: string): Promise<number> {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  return Number(
    text
      .split("\n")
      .find((line) => line.startsWith(name))
      ?.split(" ")
      .at(-1) ?? NaN,
  );
}

async function memory(server: Server): Promise<string> {
  if (!alive(server)) return "process died";
  const rss = await metric(server, "spark_process_resident_memory_bytes");
  const heap = await metric(server, "spark_nodejs_heap_size_used_bytes");
  return `RSS ${fmt(rss / MiB)} MiB, heap used ${fmt(heap / MiB)} MiB`;
}

const rows: string[][] = [];
function row(what: string, tried: string, outcome: string, after: string): void {
  rows.push([what, tried, outcome, after]);
  log(`  ${what}: ${tried}; ${outcome}; ${after}`);
}

async function hostileInput(): Promise<void> {
  const server = await serve(["--max-body-bytes", String(MAX_BODY_BYTES)]);
  const statuses = new Map<number, number>();
  let hangs = 0;
  let largestError = 0;
  const cases = httpCases(MAX_BODY_BYTES);
  for (const c of cases) {
    try {
      const response = await fetch(server.url + c.path, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: c.body,
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
      });
      const text = await response.text();
      statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
      if (response.status >= 400) largestError = Math.max(largestError, Buffer.byteLength(text));
    } catch {
      hangs++;
    }
  }
  const fivexx = [...statuses].filter(([status]) => status >= 500).reduce((sum, [, n]) => sum + n, 0);
  const byStatus = [...statuses]
    .sort(([a], [b]) => a - b)
    .map(([status, n]) => `${status}×${n}`)
    .join(" ");
  row(
    "HTTP corpus",
    `${fmt(cases.length)} requests`,
    `${byStatus}; 5xx ${fivexx}, hangs ${hangs}, largest error ${fmt(largestError)} B`,
    (await healthy(server)) ? "alive" : "DEAD",
  );

  const frames = wsFrames(MAX_BODY_BYTES);
  const socket = new WebSocket(`${server.url.replace(/^http/, "ws")}/v1/responses`);
  await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
  const events: {
    type: string;
    status?: number;
    response?: { metadata?: Record<string, string> };
  }[] = [];
  socket.on("message", (data) => events.push(JSON.parse(data.toString()) as never));
  for (const frame of frames) socket.send(frame, { binary: Buffer.isBuffer(frame) });
  // The probe rides the default lane, where every valid create of the corpus went (FIFO): when it
  // ends, everything the corpus started has ended.
  socket.send(JSON.stringify({ type: "response.create", input: "still there?", metadata: { probe: "yes" } }));
  const isProbe = (e: (typeof events)[number]): boolean =>
    e.type === "response.completed" && e.response?.metadata?.probe === "yes";
  const deadline = Date.now() + REQUEST_TIMEOUT_MS * 3;
  while (!events.some(isProbe) && Date.now() < deadline) await sleep(20);
  const usable = events.some(isProbe);
  const errors = events.filter((e) => e.type === "error");
  const largest = Math.max(...errors.map((e) => JSON.stringify(e).length));
  socket.close();
  row(
    "WebSocket frame corpus",
    `${fmt(frames.length)} frames`,
    `${fmt(errors.length)} error events (5xx ${errors.filter((e) => (e.status ?? 0) >= 500).length}), largest ${fmt(largest)} B; connection ${usable ? "still usable" : "NOT usable"}`,
    (await healthy(server)) ? "alive" : "DEAD",
  );

  const raw = [
    "GET /v1/responses/%ZZ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
    "GET /healthz HTTP/1.1\r\n\r\n",
    "CONNECT 127.0.0.1:22 HTTP/1.1\r\nHost: 127.0.0.1:22\r\n\r\n",
    `GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX: ${"a".repeat(20_000)}\r\n\r\n`,
    "\u0000\u0001 / HTTP/9\r\n\r\n",
    "GET /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 12\r\nSec-WebSocket-Key: x\r\n\r\n",
    "POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nOrigin: https://evil.example\r\nContent-Length: 2\r\n\r\n{}",
    "GET /v1/models HTTP/1.1\r\nHost: rebound.evil.example\r\n\r\n",
  ];
  let shaped = 0;
  for (const request of raw) {
    const reply = await rawExchange(server.url, request);
    if (/^HTTP\/1\.1 4\d\d/.test(reply) && reply.includes('{"error":{"type"')) shaped++;
  }
  row(
    "malformed HTTP",
    `${raw.length} requests`,
    `${shaped} answered 4xx with an OpenAI-shaped error`,
    (await healthy(server)) ? "alive" : "DEAD",
  );
  row(
    "after the corpus",
    "",
    /internal error/.test(server.stderr()) ? "internal errors logged" : "no internal error logged",
    await memory(server),
  );
  await stopServer(server);
}

function rawExchange(url: string, request: string): Promise<string> {
  const { port } = new URL(url);
  return new Promise((resolve) => {
    const socket = net.connect(Number(port), "127.0.0.1");
    const chunks: Buffer[] = [];
    socket.setTimeout(REQUEST_TIMEOUT_MS, () => socket.destroy());
    socket.on("data", (chunk: Buffer) => {
      chunks.push(chunk);
      if (Buffer.concat(chunks).includes("}}")) socket.end();
    });
    socket.on("error", () => {});
    socket.on("close", () => resolve(Buffer.concat(chunks).toString("utf8")));
    socket.on("connect", () => socket.write(request));
  });
}

async function connect(url: string): Promise<WebSocket> {
  const socket = new WebSocket(`${url.replace(/^http/, "ws")}/v1/responses`);
  await new Promise((resolve, reject) => socket.once("open", resolve).once("error", reject));
  return socket;
}

/** Sends a create on `socket` and waits for its terminal event (or an error); returns the response id. */
function turn(socket: WebSocket, body: Record<string, unknown>): Promise<string | undefined> {
  return new Promise((resolve) => {
    const onMessage = (data: WebSocket.RawData): void => {
      const event = JSON.parse(data.toString()) as { type: string; response?: { id: string } };
      if (event.type === "error") finish(undefined);
      else if (/^response\.(completed|incomplete|failed)$/.test(event.type)) finish(event.response?.id);
    };
    const finish = (id: string | undefined): void => {
      socket.off("message", onMessage);
      resolve(id);
    };
    socket.on("message", onMessage);
    socket.send(JSON.stringify({ type: "response.create", ...body }));
  });
}

async function floods(): Promise<void> {
  const frameCount = args.quick ? 300_000 : 1_500_000;
  {
    const server = await serve();
    await healthy(server);
    row("baseline", "a fresh server, one /healthz", "", await memory(server));
    await stopServer(server);
  }
  {
    const server = await serve();
    const flooder = await connect(server.url);
    flooder.pause();
    let sent = 0;
    while (sent < frameCount && flooder.bufferedAmount < 4 * MiB) {
      for (let i = 0; i < 5000; i++) flooder.send("x");
      sent += 5000;
      await nextTurn();
    }
    const ok = await healthy(server);
    const paused = await metric(server, 'spark_connection_limits_hit_total{limit="reading_paused"}');
    row(
      "unread frame flood",
      `${fmt(sent)} 1-byte invalid frames, replies never read`,
      `server ${paused > 0 ? "stopped reading that client" : "DID NOT stop reading"} (client left with ${fmt(flooder.bufferedAmount / MiB, 1)} MiB unsent); /healthz ${ok ? "answered" : "FAILED"}`,
      await memory(server),
    );
    flooder.terminate();
    await stopServer(server);
  }
  {
    const server = await serve(["--store", "memory", "--websocket-history-mib", "32"]);
    const sockets = await Promise.all([1, 2, 3, 4].map(() => connect(server.url)));
    let last: string | undefined;
    for (const socket of sockets)
      for (let lane = 0; lane < 32; lane++)
        last = await turn(socket, {
          input: "h".repeat(MiB),
          stream_id: `l${lane}`,
          store: false,
          generate: false,
        });
    const continued = last
      ? await turn(sockets[3]!, { previous_response_id: last, input: "more", stream_id: "l31", store: false })
      : undefined;
    row(
      "lane history",
      "4 connections × 32 lanes × 1 MiB, store: false (--websocket-history-mib 32)",
      `latest lane continues: ${continued ? "yes" : "NO"}; /healthz ${(await healthy(server)) ? "answered" : "FAILED"}`,
      await memory(server),
    );
    for (const socket of sockets) socket.terminate();
    await stopServer(server);
  }
  {
    const server = await serve();
    let stored = 0;
    for (let i = 0; i < (args.quick ? 8 : 24); i++) {
      const response = await fetch(`${server.url}/v1/responses`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ input: `request ${i} `.padEnd(8 * MiB, "y"), generate: false }),
      }).catch(() => undefined);
      if (response?.status === 200) stored++;
      await response?.text();
    }
    row(
      "large stored inputs",
      `${args.quick ? 8 : 24} × 8 MiB, generate: false, SQLite`,
      `${stored} stored; /healthz ${(await healthy(server)) ? "answered" : "FAILED"}`,
      await memory(server),
    );
    await stopServer(server);
  }
  {
    const server = await serve(["--header-timeout", "2"]);
    const { port } = new URL(server.url);
    const sockets: net.Socket[] = [];
    let answered408 = 0;
    for (let i = 0; i < 2000; i++) {
      const socket = net.connect(Number(port), "127.0.0.1", () =>
        socket.write("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "),
      );
      socket.on("data", (chunk: Buffer) => {
        if (chunk.toString().startsWith("HTTP/1.1 408")) answered408++;
      });
      socket.on("error", () => {});
      sockets.push(socket);
    }
    await sleep(500);
    const during = await healthy(server);
    const memoryDuring = await memory(server);
    await sleep(4000);
    row(
      "slow headers",
      "2,000 connections sending half a header (--header-timeout 2)",
      `/healthz meanwhile ${during ? "answered" : "FAILED"}; ${fmt(answered408)} answered 408 request_timeout`,
      memoryDuring,
    );
    for (const socket of sockets) socket.destroy();
    await stopServer(server);
  }
}

async function faults(): Promise<void> {
  const cycles = args.quick ? 5 : 20;
  const dataDir = join(work, "kill9");
  let acknowledged = 0;
  let lost = 0;
  for (let cycle = 0; cycle < cycles; cycle++) {
    const server = await serve([], 128, dataDir);
    const ids: string[] = [];
    const writers = Array.from({ length: 4 }, async () => {
      for (;;) {
        const response = await fetch(`${server.url}/v1/responses`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ input: `cycle ${cycle}` }),
        }).catch(() => undefined);
        if (!response || response.status !== 200) return;
        const body = (await response.json().catch(() => undefined)) as { id?: string } | undefined;
        if (!body?.id) return;
        ids.push(body.id);
      }
    });
    await sleep(200 + Math.random() * 300);
    server.child.kill("SIGKILL");
    await Promise.all(writers);
    await server.exited;
    acknowledged += ids.length;
    const restarted = await serve([], 128, dataDir);
    for (const id of ids) {
      const response = await fetch(`${restarted.url}/v1/responses/${id}`);
      if (response.status !== 200) lost++;
      await response.text();
    }
    await stopServer(restarted);
  }
  row(
    "kill -9 while writing",
    `${cycles} cycles, 4 writers each`,
    `${fmt(acknowledged)} responses acknowledged, ${lost} lost`,
    "",
  );

  const mount = join(work, "full");
  rmSync(mount, { recursive: true, force: true });
  spawnSync("mkdir", ["-p", mount]);
  if (spawnSync("mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mount]).status !== 0) {
    row("full disk", "skipped: mounting a tmpfs needs root", "", "");
    return;
  }
  try {
    const server = await serve([], 128, mount);
    let stored = 0;
    let failed = 0;
    const acknowledgedIds: string[] = [];
    for (let i = 0; i < 64; i++) {
      const response = await fetch(`${server.url}/v1/responses`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ input: `fill ${i} `.padEnd(64 * 1024, "f") }),
      });
      const body = (await response.json()) as { id?: string };
      if (response.status === 200 && body.id) {
        stored++;
        acknowledgedIds.push(body.id);
      } else failed++;
    }
    let intact = 0;
    for (const id of acknowledgedIds)
      if ((await fetch(`${server.url}/v1/responses/${id}`)).status === 200) intact++;
    row(
      "full disk (1 MiB tmpfs)",
      "64 stored responses of 64 KiB",
      `${stored} stored, ${failed} answered 507 store_write_failed, ${intact}/${stored} acknowledged intact; /healthz ${(await healthy(server)) ? "answered" : "FAILED"}`,
      await memory(server),
    );
    await stopServer(server);
  } finally {
    spawnSync("umount", [mount]);
  }
}

const goals: string[][] = [];

/** Section 4: one figure per new surface, each with its goal. Counts and sizes, one timing (the stall). */
async function surfaces(): Promise<void> {
  const goal = (figure: string, measured: string, target: string, met: boolean): void => {
    goals.push([figure, measured, target, met ? "yes" : "NO"]);
    log(`  ${figure}: ${measured} (goal ${target})`);
  };
  const stall = await loopStallFigure((line) => log(`    ${line}`));
  goal(
    "worst event-loop stall of one request (FIM, 14 MB bodies, predictions)",
    `${stall.worstStallMs} ms (${stall.cases.map((c) => `${c.name}: ${c.stallMs}`).join("; ")})`,
    "< 100 ms",
    stall.worstStallMs < 100,
  );
  // `spark app` runs its Spark server in process, so its RSS also pays for generating the answer:
  // the slow browser's own cost is the growth over a browser that reads the same answer.
  const reading = await slowReaderFigure({ read: true });
  const paused = await slowReaderFigure();
  const added = paused.rssGrowthMiB - reading.rssGrowthMiB;
  goal(
    "spark app RSS a browser that stops reading adds, 10 MiB answer",
    `+${fmt(added, 1)} MiB (app + in-process server grew +${fmt(paused.rssGrowthMiB, 1)} MiB with it paused, +${fmt(reading.rssGrowthMiB, 1)} MiB with it reading)`,
    "< +64 MiB",
    added < 64,
  );
  const lsp = await quickEditBytesFigure();
  goal(
    "spark lsp bytes written for a 100 KB quick edit",
    `${fmt(lsp.bytesWritten / 1024)} KiB for ${fmt(lsp.rewriteBytes / 1024)} KiB (${lsp.ratio.toFixed(2)}×)`,
    "< 2× the rewrite",
    lsp.ratio < 2,
  );
}

/** Section 5 (figure 30): every caller of the confined file layer × every hostile entry. */
async function confined(): Promise<void> {
  const tallies = await confinedCasesFigure((line) => log(`  ${line}`));
  const tried = tallies.reduce((sum, t) => sum + t.tried, 0);
  const escaped = tallies.reduce((sum, t) => sum + t.escapes.length, 0);
  confinedRows.push(
    ...tallies.map((t) => [
      t.caller,
      String(t.tried),
      String(t.refused),
      t.escapes.length === 0 ? "0" : t.escapes.join("; "),
    ]),
    ["all callers", String(tried), String(tallies.reduce((sum, t) => sum + t.refused, 0)), String(escaped)],
  );
}
const confinedRows: string[][] = [];

try {
  if (!args.surfaces && !args.confined) {
    log("1. hostile input");
    await hostileInput();
    log("2. floods");
    await floods();
    log("3. faults");
    await faults();
  }
  if (!args.confined) {
    log("4. the new surfaces");
    await surfaces();
  }
  if (!args.surfaces) {
    log("5. the confined file layer (figure 30)");
    await confined();
  }
  log("");
  if (rows.length > 0) log(table(["attack", "tried", "outcome", "server after"], rows));
  log("");
  if (goals.length > 0) log(table(["figure", "measured", "goal", "met"], goals));
  log("");
  if (confinedRows.length > 0)
    log(table(["caller", "hostile cases tried", "refused with an error", "escaped"], confinedRows));
} finally {
  rmSync(work, { recursive: true, force: true });
}
