/**
 * For tests of `spark lsp`: the language server as a real child process driven by a real LSP
 * client connection (vscode-languageserver-protocol over its stdio), and a recording HTTP proxy
 * between it and a Spark server that sees every request's body, what came back, and whether the
 * language server hung up before the end (an abort reaching the wire).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { EventEmitter, once } from "node:events";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { after } from "node:test";
import {
  createProtocolConnection,
  StreamMessageReader,
  StreamMessageWriter,
  type ProtocolConnection,
} from "vscode-languageserver-protocol/node";
import { cliArgs } from "./cli-entry.js";
import { cleanEnv, REPO_ROOT, SAFETY_TIMEOUT_MS } from "./cli.js";

const children = new Set<ChildProcess>();
after(() => {
  for (const child of children)
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
});

export interface Notification {
  method: string;
  params: Record<string, unknown>;
}

export interface LspProcess {
  child: ChildProcess;
  connection: ProtocolConnection;
  notifications: Notification[];
  /** Resolves with the first notification of `method` after `from` (an index into notifications). */
  nextNotification(method: string, from?: number): Promise<Notification>;
  stderr(): string;
  /** Resolves when stderr matches `pattern` (rejects if the process ends first). */
  stderrMatches(pattern: RegExp): Promise<void>;
  /** Bytes of the frames (headers included) spark lsp wrote whose method is `method`. */
  bytesWritten(method: string): number;
  exited: Promise<number | string>;
  /** shutdown + exit, then waits for the process to end. */
  close(): Promise<number | string>;
}

export function spawnLsp(args: readonly string[], env: Record<string, string> = {}): LspProcess {
  const child = spawn(process.execPath, [...cliArgs(), "lsp", "--stdio", ...args], {
    cwd: REPO_ROOT,
    env: cleanEnv(env),
    stdio: ["pipe", "pipe", "pipe"],
  });
  children.add(child);
  let stderr = "";
  const stderrEvents = new EventEmitter();
  child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
    stderr += chunk;
    stderrEvents.emit("data");
  });
  const exited = new Promise<number | string>((resolve) =>
    child.once("close", (code: number | null, signal: NodeJS.Signals | null) =>
      resolve(code ?? signal ?? -1),
    ),
  );
  const safety = setTimeout(() => child.kill("SIGKILL"), SAFETY_TIMEOUT_MS * 3);
  void exited.then(() => clearTimeout(safety));
  const bytes = countFrameBytes(child.stdout!);
  const connection = createProtocolConnection(
    new StreamMessageReader(child.stdout!),
    new StreamMessageWriter(child.stdin!),
  );
  const notifications: Notification[] = [];
  const events = new EventEmitter();
  for (const method of [
    "spark/status",
    "spark/quickEditProgress",
    "window/showMessage",
    "window/logMessage",
  ]) {
    connection.onNotification(method, (params: unknown) => {
      notifications.push({ method, params: params as Record<string, unknown> });
      events.emit("notification");
    });
  }
  connection.listen();
  const nextNotification = (method: string, from = 0): Promise<Notification> =>
    new Promise((resolve, reject) => {
      const check = (): boolean => {
        const found = notifications.slice(from).find((n) => n.method === method);
        if (!found) return false;
        events.off("notification", check);
        resolve(found);
        return true;
      };
      if (check()) return;
      events.on("notification", check);
      void exited.then((code) =>
        reject(new Error(`spark lsp exited (${code}) before ${method}; stderr:\n${stderr}`)),
      );
    });
  return {
    child,
    connection,
    notifications,
    nextNotification,
    stderr: () => stderr,
    stderrMatches: (pattern) =>
      new Promise((resolve, reject) => {
        const check = (): void => {
          if (!pattern.test(stderr)) return;
          stderrEvents.off("data", check);
          resolve();
        };
        stderrEvents.on("data", check);
        check();
        void exited.then((code) => reject(new Error(`spark lsp exited (${code}); stderr:\n${stderr}`)));
      }),
    bytesWritten: (method) => bytes.get(method) ?? 0,
    exited,
    async close() {
      if (child.exitCode === null) {
        await connection.sendRequest("shutdown").catch(() => {});
        await connection.sendNotification("exit").catch(() => {});
      }
      const code = await exited;
      connection.dispose();
      return code;
    },
  };
}

/**
 * Frames on `stream` again (Content-Length headers) and adds each frame's bytes to its method's
 * count ("other" for answers and requests). Streams through the bodies without buffering them, so counting a
 * flood costs no more than the flood.
 */
function countFrameBytes(stream: NodeJS.ReadableStream): Map<string, number> {
  const counts = new Map<string, number>();
  let header = "";
  let left = 0;
  let frame = 0;
  let head = "";
  const done = (): void => {
    const method = /^\{"jsonrpc":"2\.0","method":"([^"]+)"/.exec(head)?.[1] ?? "other";
    counts.set(method, (counts.get(method) ?? 0) + frame);
    head = "";
  };
  stream.on("data", (chunk: Buffer) => {
    let at = 0;
    while (at < chunk.length) {
      if (left > 0) {
        const take = Math.min(left, chunk.length - at);
        if (head.length < 80) head += chunk.subarray(at, at + Math.min(take, 80)).toString("latin1");
        left -= take;
        at += take;
        if (left === 0) done();
        continue;
      }
      const end = chunk.indexOf("\n", at);
      const line = chunk.subarray(at, end < 0 ? chunk.length : end + 1).toString("latin1");
      at = end < 0 ? chunk.length : end + 1;
      header += line;
      if (!header.endsWith("\r\n\r\n")) continue;
      left = Number(/content-length:\s*(\d+)/i.exec(header)?.[1] ?? 0);
      frame = header.length + left;
      header = "";
      if (left === 0) done();
    }
  });
  return counts;
}

export async function initialize(
  lsp: LspProcess,
  options: { rootUri?: string; initializationOptions?: unknown } = {},
): Promise<Record<string, unknown>> {
  const result = await lsp.connection.sendRequest("initialize", {
    processId: process.pid,
    rootUri: options.rootUri ?? null,
    capabilities: {},
    ...(options.initializationOptions === undefined
      ? {}
      : { initializationOptions: options.initializationOptions }),
  });
  await lsp.connection.sendNotification("initialized", {});
  return result as Record<string, unknown>;
}

export interface ProxiedRequest {
  method: string;
  path: string;
  body: Record<string, unknown>;
  /** What the Spark server sent back so far. */
  response: string;
  /** The language server closed the connection before the Spark server finished answering. */
  aborted: boolean;
  finished: boolean;
  headers: http.IncomingHttpHeaders;
}

export interface RecordingProxy {
  url: string;
  requests: ProxiedRequest[];
  /** Resolves when `predicate` holds (checked after every change of any request). */
  until<T>(predicate: () => T | undefined | false): Promise<T>;
  close(): Promise<void>;
}

/** An HTTP proxy to `target` that records each request (only the language server calls it). */
export async function recordingProxy(target: string): Promise<RecordingProxy> {
  const requests: ProxiedRequest[] = [];
  const events = new EventEmitter();
  events.setMaxListeners(100);
  const changed = (): boolean => events.emit("change");
  const upstream = new URL(target);
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString("utf8");
      const record: ProxiedRequest = {
        method: req.method ?? "",
        path: req.url ?? "",
        body: text ? (JSON.parse(text) as Record<string, unknown>) : {},
        response: "",
        aborted: false,
        finished: false,
        headers: req.headers,
      };
      requests.push(record);
      changed();
      const forward = http.request(
        {
          host: upstream.hostname,
          port: upstream.port,
          method: req.method,
          path: req.url,
          headers: { ...req.headers, host: upstream.host },
        },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.on("data", (chunk: Buffer) => {
            record.response += chunk.toString("utf8");
            res.write(chunk);
            changed();
          });
          answer.on("end", () => {
            record.finished = true;
            res.end();
            changed();
          });
        },
      );
      forward.on("error", () => {
        if (!res.headersSent) res.writeHead(502);
        res.end();
      });
      res.on("close", () => {
        if (!record.finished) {
          record.aborted = true;
          forward.destroy();
          changed();
        }
      });
      forward.end(text);
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    requests,
    until<T>(predicate: () => T | undefined | false): Promise<T> {
      return new Promise((resolve) => {
        const check = (): void => {
          const value = predicate();
          if (value === undefined || value === false) return;
          events.off("change", check);
          resolve(value);
        };
        events.on("change", check);
        check();
      });
    },
    async close() {
      server.closeAllConnections();
      server.close();
      await once(server, "close");
    },
  };
}
