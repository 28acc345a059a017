/**
 * Where a Spark server is, for its clients: an http(s) or ws(s) URL, or a Unix socket, `unix:PATH`
 * (`spark serve --socket PATH`, and the model server `spark app` starts for itself). Spark's own
 * processes on one machine talk over a socket file: no TCP port for other local processes (or a
 * remote editor's port forwarding, which announces every port it sees) to find. Over the socket the
 * server's routes are the same, and requests name `localhost` as their host.
 *
 * Requests to the HTTP routes go through `serverRequest` (node:http, with the socket's path when
 * there is one); the WebSocket through `websocketUrl` (the `ws+unix:` form of the `ws` library).
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";

/** The socket's path of a `unix:PATH` (or `unix://PATH`) server address, else undefined. */
export function unixSocketOf(server: string): string | undefined {
  if (!server.startsWith("unix:")) return undefined;
  const path = server.slice("unix:".length).replace(/^\/\/(?=\/)/, "");
  return path === "" ? undefined : path;
}

/** The address of a server listening on the socket at `path`. */
export function unixAddress(path: string): string {
  return `unix:${path}`;
}

/** `http://h:p[/v1]`, `unix:PATH` → the server's `/v1/responses` as a WebSocket URL. */
export function websocketUrl(server: string): string {
  const socket = unixSocketOf(server);
  if (socket !== undefined) return `ws+unix://${socket}:/v1/responses`;
  const url = new URL(server);
  if (url.protocol === "http:") url.protocol = "ws:";
  else if (url.protocol === "https:") url.protocol = "wss:";
  const path = url.pathname.replace(/\/+$/, "");
  url.pathname = path.endsWith("/v1/responses")
    ? path
    : path.endsWith("/v1")
      ? `${path}/responses`
      : `${path}/v1/responses`;
  return url.toString();
}

/**
 * `ws://h:p/v1/responses` or `http://h:p` → `http://h:p/v1` for the HTTP routes (models, compact);
 * a Unix socket's is `http://localhost/v1` (requests then go through the socket: `serverRequest`).
 */
export function httpBaseUrl(server: string): string {
  if (unixSocketOf(server) !== undefined) return "http://localhost/v1";
  const url = new URL(server);
  if (url.protocol === "ws:") url.protocol = "http:";
  else if (url.protocol === "wss:") url.protocol = "https:";
  const path = url.pathname.replace(/\/+$/, "").replace(/\/responses$/, "");
  url.pathname = path.endsWith("/v1") ? path : `${path}/v1`;
  return url.toString().replace(/\/+$/, "");
}

/** The server's root (`http://h:p`), for the routes outside `/v1` (`/healthz`). */
export function serverRoot(server: string): string {
  return httpBaseUrl(server).replace(/\/v1$/, "");
}

export interface ServerAnswer {
  status: number;
  headers: IncomingHttpHeaders;
  text: string;
}

/**
 * One request to `url` (a URL under `httpBaseUrl(server)` or `serverRoot(server)`), through the
 * server's Unix socket when it has one. Resolves with the status and the body (at most `maxBytes`);
 * rejects when the server cannot be reached, or after `timeoutMs`. `hold: false` lets the process
 * exit while it waits (background information).
 */
export async function serverRequest(
  server: string,
  url: string,
  init: {
    method?: string;
    headers?: Record<string, string>;
    body?: string;
    timeoutMs?: number;
    signal?: AbortSignal;
    maxBytes?: number;
    hold?: boolean;
  } = {},
): Promise<ServerAnswer> {
  const target = new URL(url);
  const socketPath = unixSocketOf(server);
  const { request } = target.protocol === "https:" ? await import("node:https") : await import("node:http");
  const maxBytes = init.maxBytes ?? 16 * 1024 * 1024;
  return new Promise((resolve, reject) => {
    const options = {
      method: init.method ?? "GET",
      headers: {
        ...(socketPath === undefined ? {} : { host: "localhost" }),
        ...(init.body === undefined ? {} : { "content-length": String(Buffer.byteLength(init.body)) }),
        ...init.headers,
      },
      ...(init.timeoutMs === undefined ? {} : { timeout: init.timeoutMs }),
      ...(init.signal ? { signal: init.signal } : {}),
    };
    const answered = (response: IncomingMessage): void => {
      let text = "";
      response.setEncoding("utf8");
      response.on("data", (chunk: string) => {
        text += chunk;
        if (text.length > maxBytes) sent.destroy(new Error("the answer is too large"));
      });
      response.on("end", () =>
        resolve({ status: response.statusCode ?? 0, headers: response.headers, text }),
      );
      response.on("error", reject);
    };
    const sent =
      socketPath === undefined
        ? request(target, options, answered)
        : request({ ...options, socketPath, path: `${target.pathname}${target.search}` }, answered);
    if (init.hold === false) sent.on("socket", (socket) => socket.unref());
    sent.on("timeout", () => sent.destroy(Object.assign(new Error("timed out"), { name: "TimeoutError" })));
    sent.on("error", reject);
    sent.end(init.body);
  });
}
