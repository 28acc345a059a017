/**
 * The Spark pane's page. It is not a copy of the app: it paints the app's own "Connecting…"
 * skeleton, tells the extension its origin (the one `spark app --allowed-origin` must allow: a
 * webview's origin is not the app's, and only VS Code knows it), and once the extension answers
 * with the app's URL, loads the front end (web/dist's app.js and app.css) from the app itself, so
 * the pane always runs the front end of the app it talks to. `window.sparkHost` tells the front end
 * where the app is and hands it the page's one `acquireVsCodeApi()` (see web/src/host.ts).
 * Both this page's listener and the front end's obey only messages with the page's own origin, which
 * VS Code's host frame delivers the extension's with: a framed page (a variant's preview) cannot
 * drive the pane (see `fromExtension` in web/src/host.ts).
 */
import { randomBytes } from "node:crypto";

/**
 * `appOrigin`: the configured app's origin, or undefined for one the extension starts on a loopback
 * port not known yet (then any port of 127.0.0.1: still only this machine's loopback).
 */
export function paneHtml(appOrigin: string | undefined): string {
  const nonce = randomBytes(16).toString("base64");
  const http = appOrigin ?? "http://127.0.0.1:*";
  const ws = appOrigin ? appOrigin.replace(/^http/, "ws") : "ws://127.0.0.1:*";
  const csp = [
    "default-src 'none'",
    `script-src 'nonce-${nonce}' ${http}`,
    `style-src 'nonce-${nonce}' ${http}`,
    `connect-src ${http} ${ws}`,
    `img-src ${http} data:`,
    `font-src ${http}`,
    // Variants' pages, framed from the app's preview server (its own loopback port and name).
    "frame-src http://127.0.0.1:* http://localhost:*",
    "base-uri 'none'",
    "form-action 'none'",
  ].join("; ");
  return `<!doctype html>
<html lang="en">
  <head>
    <meta charset="utf-8" />
    <meta http-equiv="Content-Security-Policy" content="${csp}" />
    <meta name="viewport" content="width=device-width, initial-scale=1" />
    <title>Spark</title>
    <style nonce="${nonce}">
      /* VS Code's default webview padding: the app lays out its own page. */
      body { padding: 0; }
      .pane-failed { padding: 12px; color: var(--vscode-errorForeground); font-family: var(--vscode-font-family); }
    </style>
  </head>
  <body>
    <div id="root">
      <div class="layout">
        <aside class="sidebar"><div class="brand">⚡ Spark</div></aside>
        <main class="main"><div class="empty">Connecting…</div></main>
      </div>
    </div>
    <script nonce="${nonce}">
      (() => {
        const api = acquireVsCodeApi();
        let loaded = false;
        window.addEventListener("message", (event) => {
          // Only the extension's messages, which VS Code's host frame delivers with this page's own
          // origin; never a child frame's (a variant's preview: another origin, or "null").
          if (event.origin !== window.origin || event.source === window) return;
          for (let i = 0; i < window.frames.length; i++) if (event.source === window.frames[i]) return;
          const message = event.data;
          if (!message || typeof message !== "object") return;
          if (message.type === "failed") {
            const root = document.getElementById("root");
            root.textContent = "";
            const box = document.createElement("div");
            box.className = "pane-failed";
            box.textContent = message.message;
            root.append(box);
            return;
          }
          if (message.type !== "load" || loaded) return;
          loaded = true;
          window.sparkHost = { kind: "vscode", appUrl: message.appUrl, api, session: message.session };
          const css = document.createElement("link");
          css.rel = "stylesheet";
          css.href = new URL("app.css", message.appUrl).href;
          document.head.append(css);
          const script = document.createElement("script");
          script.type = "module";
          script.src = new URL("app.js", message.appUrl).href;
          script.onerror = () => api.postMessage({ type: "load-failed", message: "the app's script did not load from " + message.appUrl });
          document.head.append(script);
        });
        api.postMessage({ type: "origin", origin: location.origin });
      })();
    </script>
  </body>
</html>
`;
}
