/**
 * Live previews of the web pages variants write: a small read-only HTTP server on its own loopback
 * port, so a preview is a different origin from the app (scheme, host and port) and a variant's
 * script can never reach the app's DOM, its cookie or its socket.
 *
 * Contract:
 * - Each served directory (a variant's worktree) gets an unguessable prefix (`/TOKEN/`): the URL is
 *   the capability, sent only to the browsers of the task's owner. `remove` ends it at once.
 * - GET and HEAD only; a path is confined to its directory through the confined file layer (no
 *   `..`, no symlink out of it), and no dot-file is served, asked for by name or reached through a
 *   link (`env.txt → .env`, `git.txt → .git/config`: the resolved path's components are checked);
 *   regular files only (a FIFO is never waited on), a directory serves its `index.html`.
 * - Cookies are never read (the browser may send the app's cookie to the same host: it is ignored)
 *   and none is ever set. `Host` must be a loopback name (DNS rebinding).
 * - Every response carries a Content-Security-Policy with `sandbox allow-scripts` (an opaque origin
 *   even when the page is opened in a tab of its own), `connect-src 'none'` (no fetch, no
 *   WebSocket to the app or anywhere else) and subresources from this origin or inline only.
 *   The app frames it as `<iframe sandbox="allow-scripts">` and allows only this origin in its own
 *   `frame-src`.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { extname } from "node:path";
import { pipeline } from "node:stream/promises";
import { ConfinedRoot } from "../agent/fs/confined.js";

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
  /** Token → the directory it serves (as given). */
  readonly #roots = new Map<string, string>();
  /** Token → that directory as a root of the confined layer, opened on its first request. */
  readonly #opened = new Map<string, Promise<ConfinedRoot>>();

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
    this.#opened.delete(token);
  }

  async close(): Promise<void> {
    this.#roots.clear();
    this.#opened.clear();
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
    try {
      let confined = this.#opened.get(token);
      if (confined === undefined) {
        confined = ConfinedRoot.open(root, { label: "the preview" });
        this.#opened.set(token, confined);
      }
      const files = await confined;
      // Where the path lands beneath the root; none of its components may be a dot-file, whatever
      // link led there.
      const dotted = (rel: string): boolean => rel.split("/").some((part) => part.startsWith("."));
      let where = await files.locate(parts.length === 0 ? "." : parts.join("/"));
      if (dotted(where.rel)) return send(response, 404, "not found");
      if (where.kind === "directory") {
        where = await files.locate(where.rel === "" ? "index.html" : `${where.rel}/index.html`);
        if (dotted(where.rel)) return send(response, 404, "not found");
      }
      if (where.kind !== "file") return send(response, 404, "not found");
      const file = where.rel;
      await files.withFile(file, { final: "entry" }, async ({ handle, info }) => {
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
        // The descriptor the layer checked is the one streamed (closed once the response is sent).
        await pipeline(
          handle.createReadStream({ start: 0, end: Math.max(0, info.size - 1), autoClose: false }),
          response,
        ).catch(() => response.destroy());
      });
    } catch {
      if (!response.headersSent) return send(response, 404, "not found");
      response.destroy();
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
