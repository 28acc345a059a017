/**
 * The VS Code pane without VS Code, for chromium tests: an HTTP server on a loopback port 0 plays
 * the webview's host frame. Its page frames the pane's real page (editors/vscode/src/pane-html.ts)
 * as VS Code does (the host frame is the pane's parent, and delivers the extension's messages from
 * there), gives it an `acquireVsCodeApi()` that posts to the host, answers its `origin` with `load`
 * (the app's URL), and records what the pane sends (`window.fromPane`). `window.toPane(message)`
 * posts as the extension would. The app must allow the harness's origin (`--allowed-origin`).
 */
import { once } from "node:events";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Frame, Page } from "playwright-core";
import { paneHtml } from "../../editors/vscode/src/pane-html.js";

export interface PaneHarness {
  /** The harness's origin (`http://127.0.0.1:PORT`), the webview origin the app must allow. */
  origin: string;
  /** Sets the app the pane loads its front end from. */
  setApp(url: string): void;
  close(): Promise<void>;
}

/**
 * VS Code (1.100's webview pre/index.html) injects `acquireVsCodeApi` before the page's own scripts
 * and then deletes `window.parent`, `window.top` and `window.frameElement`; so does the harness.
 */
const VSCODE_API = `<script>
  const host = window.parent;
  window.acquireVsCodeApi = () => ({ postMessage: (m) => host.postMessage(m, "*") });
  delete window.parent;
  delete window.top;
  delete window.frameElement;
</script>`;

const HOST_PAGE = (width: string): string => `<!doctype html>
<html><head><meta charset="utf-8"><title>host</title>
<style>html, body { margin: 0; height: 100%; } iframe { border: 0; width: ${width}; height: 100%; }</style></head>
<body><iframe id="pane" src="/pane"></iframe>
<script>
  const pane = document.getElementById("pane");
  window.fromPane = [];
  // As VS Code's host frame delivers the extension's messages: addressed to its own origin.
  window.toPane = (message) => pane.contentWindow.postMessage(message, window.origin);
  window.addEventListener("message", async (event) => {
    if (event.source !== pane.contentWindow) return;
    window.fromPane.push(event.data);
    if (event.data && event.data.type === "origin") {
      const app = await (await fetch("/app-url")).text();
      window.toPane({ type: "load", appUrl: app });
    }
  });
</script></body></html>`;

export async function startPaneHarness(paneWidth = "100%"): Promise<PaneHarness> {
  let app = "";
  const server: Server = createServer((request, response) => {
    const path = new URL(request.url ?? "/", "http://x").pathname;
    const send = (type: string, body: string): void => {
      response.writeHead(200, { "content-type": type, "cache-control": "no-store" });
      response.end(body);
    };
    if (path === "/") send("text/html", HOST_PAGE(paneWidth));
    else if (path === "/pane")
      send("text/html", paneHtml(undefined).replace("<head>", `<head>${VSCODE_API}`));
    else if (path === "/app-url") send("text/plain", app);
    else {
      response.writeHead(404);
      response.end();
    }
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    setApp: (url) => void (app = url),
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/** The pane's frame in the harness page, once its document is there. */
export async function paneFrame(page: Page): Promise<Frame> {
  const element = await page.locator("iframe#pane").elementHandle();
  if (!element) throw new Error("the harness page has no pane frame");
  for (;;) {
    const frame = await element.contentFrame();
    if (frame) return frame;
    await page.waitForTimeout(50);
  }
}
