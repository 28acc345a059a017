/**
 * What both VS Code end-to-end runs (e2e.ts: completions and quick edit; pane-e2e.ts: the agent
 * pane) stand on: `spark serve` on the script engine, a recording proxy in front of it (HTTP, and
 * the Responses WebSocket frame by frame for the pane's agents), code-server with the packaged
 * extension installed, headless Debian chromium, and condition waits. Each run keeps its own
 * scenario, settings and clean-up; this module holds no state of its own.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { chromium, type Browser } from "playwright-core";
import WebSocket, { WebSocketServer } from "ws";

export const ROOT = fileURLToPath(new URL("..", import.meta.url));
const CACHE =
  process.env.SPARK_VSCODE_E2E_CACHE ?? join(process.env.HOME ?? "/root", ".cache/spark-vscode-e2e");
/** Installed by setup.sh. */
export const CODE_SERVER = join(CACHE, "cs/node_modules/.bin/code-server");
/** The `spark` CLI (a launcher script; SPARK_CLI picks another build). */
export const SPARK_CLI = process.env.SPARK_CLI ?? join(ROOT, "bin/spark.js");
export const VSIX = join(ROOT, "editors/vscode/spark-vscode.vsix");
export const SHOTS = process.env.OUT_DIR ?? join(ROOT, "test-vscode/screenshots");

/** A request the proxy relayed: its path (`ws PATH` for a WebSocket frame), `model` and whole body. */
export interface Recorded {
  path: string;
  model: string | undefined;
  body: string;
}

/** A log line with the seconds since `started`, under `label`. */
export function timedLog(label: string): (...parts: unknown[]) => void {
  const started = Date.now();
  return (...parts) => console.log(`[${label}${((Date.now() - started) / 1000).toFixed(1)}s]`, ...parts);
}

/** `spark serve` on the script engine with `script` (and `extra` flags); resolves with its URL. */
export async function startSpark(
  script: string,
  children: ChildProcess[],
  extra: readonly string[] = [],
): Promise<string> {
  const child = spawn(
    process.execPath,
    [
      SPARK_CLI,
      "serve",
      "--engine",
      "script",
      "--script",
      script,
      ...extra,
      "--port",
      "0",
      "--store",
      "memory",
    ],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  children.push(child);
  const [line] = (await once(createInterface({ input: child.stdout! }), "line")) as [string];
  const url = /^spark listening on (\S+)/.exec(line)?.[1];
  if (!url) throw new Error(`spark serve said: ${line}`);
  return url;
}

function modelOf(text: string): string | undefined {
  try {
    return (JSON.parse(text) as { model?: string }).model;
  } catch {
    return undefined;
  }
}

/**
 * Forwards everything to `target`, recording each request into `seen`. With `websocket`, upgrades
 * are relayed frame by frame too (the app's agents speak the Responses API over a WebSocket), each
 * frame recorded like an HTTP request; `onFrame` sees each one.
 */
export async function startProxy(
  target: string,
  seen: Recorded[],
  options: { websocket?: boolean; onFrame?: (frame: Recorded) => void } = {},
): Promise<string> {
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const text = body.toString("utf8");
      seen.push({ path: req.url ?? "", model: modelOf(text), body: text });
      const upstream = http.request(
        `${target}${req.url ?? ""}`,
        { method: req.method, headers: { ...req.headers, host: new URL(target).host } },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      upstream.on("error", () => res.destroy());
      res.on("close", () => upstream.destroy());
      upstream.end(body);
    });
  });
  if (options.websocket) relayWebSockets(server, target, seen, options.onFrame);
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

function relayWebSockets(
  server: http.Server,
  target: string,
  seen: Recorded[],
  onFrame: ((frame: Recorded) => void) | undefined,
): void {
  const sockets = new WebSocketServer({ noServer: true });
  server.on("upgrade", (req, socket, head) => {
    const headers = { ...req.headers };
    for (const name of [
      "host",
      "connection",
      "upgrade",
      "sec-websocket-key",
      "sec-websocket-version",
      "sec-websocket-extensions",
    ])
      delete headers[name];
    const upstream = new WebSocket(`${target.replace(/^http/, "ws")}${req.url ?? ""}`, {
      headers,
      perMessageDeflate: false,
    });
    const pending: string[] = [];
    upstream.on("error", () => socket.destroy());
    sockets.handleUpgrade(req, socket, head, (client) => {
      client.on("message", (data) => {
        const text = String(data);
        const frame = { path: `ws ${req.url ?? ""}`, model: modelOf(text), body: text };
        seen.push(frame);
        onFrame?.(frame);
        if (upstream.readyState === WebSocket.OPEN) upstream.send(text);
        else pending.push(text);
      });
      upstream.on("open", () => {
        for (const text of pending.splice(0)) upstream.send(text);
      });
      upstream.on("message", (data, binary) => client.send(binary ? data : String(data)));
      upstream.on("close", () => client.close());
      client.on("close", () => upstream.close());
    });
  });
}

export async function freePort(): Promise<number> {
  const server = http.createServer().listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export function run(command: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: "inherit" });
    child.once("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`${command} exited with ${code}`)),
    );
  });
}

/** Polls `check` every 100 ms (after `refresh`, when given) until it holds; fails after `timeoutMs`. */
export async function waitUntil(
  what: string,
  check: () => boolean,
  timeoutMs: number,
  refresh?: () => Promise<void>,
): Promise<void> {
  for (const deadline = Date.now() + timeoutMs; Date.now() < deadline; await sleep(100)) {
    await refresh?.();
    if (check()) return;
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** The user settings both runs start from: no start-up editor, updates, telemetry, tips or suggestions. */
export const QUIET_WORKBENCH = {
  "workbench.startupEditor": "none",
  "extensions.autoCheckUpdates": false,
  "extensions.autoUpdate": false,
  "telemetry.telemetryLevel": "off",
  "update.mode": "none",
  "workbench.tips.enabled": false,
  "editor.quickSuggestions": { other: false, comments: false, strings: false },
} as const;

/**
 * Installs the packaged extension into `extensions` and starts code-server on a free port with
 * `userData`, in `env`; resolves with the port once it answers `/healthz` (or after `waitS`
 * seconds, as a slow start still shows in the scenario's first step).
 */
export async function startCodeServer(options: {
  userData: string;
  extensions: string;
  env: NodeJS.ProcessEnv;
  children: ChildProcess[];
  waitS: number;
}): Promise<number> {
  const { userData, extensions } = options;
  await run(CODE_SERVER, [
    "--user-data-dir",
    userData,
    "--extensions-dir",
    extensions,
    "--install-extension",
    VSIX,
  ]);
  const port = await freePort();
  const codeServer = spawn(
    CODE_SERVER,
    [
      "--bind-addr",
      `127.0.0.1:${port}`,
      "--auth",
      "none",
      "--disable-telemetry",
      "--disable-update-check",
      "--disable-workspace-trust",
      "--user-data-dir",
      userData,
      "--extensions-dir",
      extensions,
    ],
    { stdio: ["ignore", "ignore", "inherit"], env: options.env },
  );
  options.children.push(codeServer);
  for (let i = 0; i < options.waitS * 2; i++) {
    const ok = await fetch(`http://127.0.0.1:${port}/healthz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) break;
    await sleep(500);
  }
  return port;
}

/** Debian's chromium, headless (no browser download is possible here; CHROMIUM picks another). */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium",
    args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
  });
}
