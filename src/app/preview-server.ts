/**
 * Live previews of the web pages variants write: a small read-only HTTP server on its own loopback
 * port, so a preview is a different origin from the app (scheme, host and port) and a variant's
 * script can never reach the app's DOM, its cookie or its socket.
 *
 * Contract:
 * - Each served directory (a variant's worktree) gets an unguessable prefix (`/TOKEN/`): the URL is
 *   the capability, sent only to the browsers of the task's owner. `remove` ends it at once.
 * - GET and HEAD only; a path is confined to its directory (no `..`, no symlink out of it, no
 *   dot-files or `.git`), regular files only, a directory serves its `index.html`.
 * - Cookies are never read (the browser may send the app's cookie to the same host: it is ignored)
 *   and none is ever set. `Host` must be a loopback name (DNS rebinding).
 * - Every response carries a Content-Security-Policy with `sandbox allow-scripts` (an opaque origin
 *   even when the page is opened in a tab of its own), `connect-src 'none'` (no fetch, no
 *   WebSocket to the app or anywhere else) and subresources from this origin or inline only.
 *   The app frames it as `<iframe sandbox="allow-scripts">` and allows only this origin in its own
 *   `frame-src`.
 */
import { randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import { realpath, stat } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { extname, join, sep } from "node:path";

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".htm": "text/html; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".mjs": "text/javascript; charset=utf-8",
  ".json": "application/json",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".jpg": "image/jpeg",
  ".jpeg": "image/jpeg",
  ".gif": "image/gif",
  ".webp": "image/webp",
  ".ico": "image/x-icon",
  ".woff": "font/woff",
  ".woff2": "font/woff2",
  ".txt": "text/plain; charset=utf-8",
  ".wasm": "application/wasm",
};

const LOOPBACK_HOST = /^(127\.\d+\.\d+\.\d+|localhost|\[::1\])(:\d+)?$/i;

export class PreviewServer {
  #server: Server | undefined;
  #origin = "";
  /** Token → the directory it serves (as given, and its real path once resolved). */
  readonly #roots = new Map<string, string>();

  /** Listens on a free loopback port; resolves to the origin (`http://127.0.0.1:PORT`). */
  async listen(host = "127.0.0.1"): Promise<string> {
    const server = createServer((request, response) => {
      this.#handle(request, response).catch(() => {
        if (!response.headersSent) send(response, 500, "internal error");
        else response.destroy();
      });
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, host, () => resolve());
    });
    this.#server = server;
    const { port } = server.address() as AddressInfo;
    this.#origin = `http://${host}:${port}`;
    return this.#origin;
  }

  /** `http://127.0.0.1:PORT`; "" before `listen`. */
  get origin(): string {
    return this.#origin;
  }

  /** Serves `dir` (read-only) under a new prefix; returns its token (`/TOKEN/…`). */
  add(dir: string): string {
    const token = randomBytes(18).toString("base64url");
    this.#roots.set(token, dir);
    return token;
  }

  remove(token: string): void {
    this.#roots.delete(token);
  }

  async close(): Promise<void> {
    this.#roots.clear();
    const server = this.#server;
    if (!server) return;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    server.closeAllConnections();
  }

  async #handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const host = request.headers.host ?? "";
    if (!LOOPBACK_HOST.test(host)) return send(response, 403, "previews answer to loopback names only");
    if (request.method !== "GET" && request.method !== "HEAD")
      return send(response, 405, "previews are read-only");
    let parts: string[];
    try {
      const pathname = new URL(request.url ?? "/", "http://preview").pathname;
      parts = pathname.split("/").slice(1).map(decodeURIComponent);
    } catch {
      return send(response, 400, "bad path");
    }
    const token = parts.shift() ?? "";
    const root = this.#roots.get(token);
    if (root === undefined) return send(response, 404, "no such preview");
    // Confined: no parent steps, no dot-files (.git, .env), no separators smuggled inside a segment.
    if (parts.some((p) => p === ".." || p.startsWith(".") || /[/\\\0]/.test(p)))
      return send(response, 404, "not found");
    let realRoot: string;
    let file: string;
    try {
      realRoot = await realpath(root);
      file = await realpath(join(root, ...parts));
      if (file !== realRoot && !file.startsWith(realRoot + sep)) return send(response, 404, "not found");
      let info = await stat(file);
      if (info.isDirectory()) {
        file = await realpath(join(file, "index.html"));
        if (!file.startsWith(realRoot + sep)) return send(response, 404, "not found");
        info = await stat(file);
      }
      if (!info.isFile()) return send(response, 404, "not found");
      // Removed while it was looked up: serve nothing more of it.
      if (this.#roots.get(token) !== root) return send(response, 404, "no such preview");
      const self = `http://${host}`;
      const headers: Record<string, string | number> = {
        "content-type": TYPES[extname(file).toLowerCase()] ?? "application/octet-stream",
        "content-length": info.size,
        "cache-control": "no-store",
        "x-content-type-options": "nosniff",
        "referrer-policy": "no-referrer",
        "content-security-policy":
          `sandbox allow-scripts; default-src 'none'; script-src ${self} 'unsafe-inline'; ` +
          `style-src ${self} 'unsafe-inline'; img-src ${self} data: blob:; font-src ${self} data:; ` +
          `media-src ${self} data: blob:; connect-src 'none'; form-action 'none'; base-uri 'none'`,
      };
      // Module scripts of a sandboxed page are CORS requests from the opaque origin `null`.
      if (request.headers.origin === "null") headers["access-control-allow-origin"] = "null";
      response.writeHead(200, headers);
      if (request.method === "HEAD") {
        response.end();
        return;
      }
      const stream = createReadStream(file);
      stream.on("error", () => response.destroy());
      stream.pipe(response);
    } catch {
      return send(response, 404, "not found");
    }
  }
}

function send(response: ServerResponse, status: number, message: string): void {
  response.writeHead(status, {
    "content-type": "text/plain; charset=utf-8",
    "content-length": Buffer.byteLength(message),
    "x-content-type-options": "nosniff",
    "content-security-policy": "sandbox; default-src 'none'",
  });
  response.end(message);
}

/** The page a variant's preview shows among the files it changed: `index.html` first, else the shallowest `.html`. */
export function previewPage(paths: readonly string[]): string | undefined {
  const pages = paths.filter((p) => /\.html?$/i.test(p) && !p.split("/").some((s) => s.startsWith(".")));
  pages.sort(
    (a, b) =>
      Number(!/(^|\/)index\.html?$/i.test(a)) - Number(!/(^|\/)index\.html?$/i.test(b)) ||
      a.split("/").length - b.split("/").length ||
      a.localeCompare(b),
  );
  return pages[0];
}
