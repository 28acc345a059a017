/**
 * Where the front end runs. By default a browser tab served by `spark app`. In VS Code's Spark pane
 * (editors/vscode/src/pane-html.ts) the same bundle is loaded from the app into a webview, whose
 * page first sets `window.sparkHost`: the app's URL (the page's own origin is the webview's, which
 * the app allows exactly) and, through `acquireVsCodeApi`, a channel to the extension for what the
 * editor does better: a task's changed files in VS Code's diff editor, paths opened in the editor,
 * "Ask Spark" from a selection.
 *
 * The messages on that channel are mirrored in editors/vscode/src/pane-protocol.ts (the extension
 * is its own package): change both together.
 */

/** Front end → extension. */
export type ToEditor =
  /** The first render with the app's hello: the pane is open (timed by the extension). */
  | { type: "painted" }
  /** Open a workspace file, at a 1-based line. */
  | { type: "open"; path: string; line?: number }
  /** Show a task's changed file in the diff editor: `before` left, the file as it is now right. */
  | { type: "diff"; task: string; path: string; before: string | null; after: string | null }
  /** The open task's tier (opened, changed here): the editor's tier becomes it. */
  | { type: "tier"; tier: "spark" | "deep" }
  /** A task's files now in the workspace as the task has them (after an Apply): its diff tabs follow. */
  | { type: "applied"; task: string; paths: string[] };

/** Extension → front end. */
export type FromEditor =
  /** "Ask Spark": the code goes into the composer as a chip; the user's question goes with it. */
  | { type: "ask"; where: string; code: string; language?: string }
  /** The editor's tier changed; `initial`: the pane just loaded (a task open keeps its own). */
  | { type: "tier"; tier: "spark" | "deep"; initial?: boolean }
  /** The pane was shown again: answer `painted` after the next paint (the warm open's figure). */
  | { type: "ping" }
  /** The diff editor's Apply / Discard, for one file or (no path) the whole task. */
  | { type: "apply"; task: string; path?: string }
  | { type: "discard"; task: string; path?: string };

interface VsCodeApi {
  postMessage(message: unknown): void;
}

interface HostConfig {
  kind: "vscode";
  /** The app's base URL (`http://127.0.0.1:PORT/`). */
  appUrl: string;
  /** What the page's `acquireVsCodeApi()` returned (it may be called only once per page). */
  api: VsCodeApi;
  /** A keyed app: the session the extension signed in with (the webview cannot hold the cookie). */
  session?: string;
}

declare global {
  interface Window {
    sparkHost?: HostConfig;
  }
}

const config = window.sparkHost;
const vscode = config?.kind === "vscode" ? config.api : undefined;

/** Whether the page is the VS Code pane. */
export const inEditor = vscode !== undefined;

/** The WebSocket subprotocols that carry the pane's session to a keyed app (none in a browser). */
export const appProtocols = config?.session ? [`spark-session.${config.session}`] : [];

/** The app's base URL: the page's own in a browser, the configured one in the pane. */
export const appBase = config?.appUrl ?? location.href;

export function toEditor(message: ToEditor): void {
  vscode?.postMessage(message);
}

/**
 * Whether a `message` event comes from the extension. VS Code delivers the extension's messages from
 * the webview's host frame, with this page's own origin (`postMessage(message, window.origin)`; the
 * page and its host frame share one origin, and VS Code deletes `window.parent` from the page, so
 * the origin is what can be checked). A frame inside the pane never has that origin: a variant's
 * preview is served from another origin and sandboxed without `allow-same-origin` (origin "null").
 * Its messages, and any child frame's, are ignored whatever they say: a framed page must never ask,
 * apply or discard on the user's behalf.
 */
export function fromExtension(event: MessageEvent<unknown>): boolean {
  if (event.origin !== window.origin || event.source === window) return false;
  for (let i = 0; i < window.frames.length; i++) if (event.source === window.frames[i]) return false;
  return true;
}

/** Messages from the extension (none in a browser), and from nothing else (`fromExtension`). */
export function onEditor(handler: (message: FromEditor) => void): void {
  if (!vscode) return;
  window.addEventListener("message", (event: MessageEvent<unknown>) => {
    if (!fromExtension(event)) return;
    const data = event.data as { type?: unknown } | null;
    if (data && typeof data === "object" && typeof data.type === "string") handler(data as FromEditor);
  });
}

/** `src/a.ts`, `src/a.ts:12`, `./a/b.py:3:5`: a relative path with an extension, maybe a line. */
const PATH_LINE = /^(?:\.\/)?([\w@.+-]+(?:\/[\w@.+-]+)*\.[\w]+)(?::(\d+))?(?::\d+)?$/;

/** The path and line a transcript's code span names, or undefined when it is not a path. */
export function pathOf(text: string): { path: string; line?: number } | undefined {
  const match = PATH_LINE.exec(text.trim());
  if (!match) return undefined;
  return match[2] ? { path: match[1]!, line: Number(match[2]) } : { path: match[1]! };
}
