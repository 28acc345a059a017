/**
 * The messages between the Spark pane's webview and the extension (`postMessage`). The front end's
 * side is web/src/host.ts (`ToEditor`, `FromEditor`); this file mirrors it, plus the two messages of
 * the page that loads the front end (pane-html.ts): change them together.
 */

/** Webview → extension. */
export type FromPane =
  /** The page is up: its origin (the one the app must allow) and when it started (performance.timeOrigin). */
  | { type: "origin"; origin: string }
  /** The front end's first paint with the task list. */
  | { type: "painted" }
  /** The app could not be loaded (its script failed). */
  | { type: "load-failed"; message: string }
  | { type: "open"; path: string; line?: number }
  | { type: "diff"; task: string; path: string; before: string | null; after: string | null }
  /** The open task's tier (opened, changed in the pane): the editor's tier becomes it (tier.ts). */
  | { type: "tier"; tier: "spark" | "deep" }
  /** A task's files now in the workspace as the task has them (after an Apply): its diff tabs follow. */
  | { type: "applied"; task: string; paths: string[] };

/** Extension → webview. */
export type ToPane =
  /** Load the front end from the app at `appUrl`. */
  | { type: "load"; appUrl: string; session?: string }
  /** The app could not be started: shown in the pane. */
  | { type: "failed"; message: string }
  /** "Ask Spark": the code goes into the composer as a chip (`where`, e.g. `src/a.ts:3-9`). */
  | { type: "ask"; where: string; code: string; language?: string }
  /**
   * The editor's tier changed (Ctrl+Shift+L, the status menu): the open task and new ones take it.
   * `initial` (once the pane is up): only a pane with no task open takes it; one with a task says
   * that task's tier instead.
   */
  | { type: "tier"; tier: "spark" | "deep"; initial?: boolean }
  /** The pane was shown again: answer `painted` after the next paint. */
  | { type: "ping" }
  | { type: "apply"; task: string; path?: string }
  | { type: "discard"; task: string; path?: string };
