/**
 * The TUI's status line: the footer's first row (under a running variants table), redrawn with
 * every token. It shows the tier (and where `auto` routed the latest answer), what the UI is doing
 * (its `Phase`), TTFT, tokens/s, the context meter, `⎇ worktree` for a `--worktree` session, and
 * the latest notice. It is built from plain figures: nothing here reads the agent or the screen.
 */
import { contextMeter, cyan, dim, green, red, tierLabel, yellow } from "./style.js";

/** What the UI is doing: starting (connecting), ready, a turn's steps, or not connected (failed). */
export type Phase =
  "starting" | "ready" | "waiting" | "queued" | "generating" | "tools" | "approval" | "failed";

export interface StatusFigures {
  model: string;
  /** The tier `auto` routed the latest response to. */
  route: string | undefined;
  /** A turn or the variants run: the phase is shown as it is (else "ready" once started). */
  busy: boolean;
  phase: Phase;
  ttftMs: number | undefined;
  tokensPerSecond: number | undefined;
  /** The context meter's figures, once there is an agent. */
  context: { tokens: number; window: number } | undefined;
  /** `--worktree`: the files the session changes are not the user's until /apply. */
  worktree: boolean;
  notice: string;
}

const PHASE: Record<Phase, string> = {
  starting: yellow("starting…"),
  ready: green("ready"),
  waiting: yellow("● waiting"),
  queued: yellow("● queued by server"),
  generating: cyan("● generating"),
  tools: cyan("● running tools"),
  approval: yellow("● waiting for your approval"),
  failed: red("not connected"),
};

export function statusLine(figures: StatusFigures): string {
  const parts: string[] = [
    tierLabel(figures.model) + (figures.model === "auto" && figures.route ? dim(` → ${figures.route}`) : ""),
  ];
  const { phase } = figures;
  parts.push(figures.busy || phase === "starting" || phase === "failed" ? PHASE[phase] : PHASE.ready);
  if (figures.ttftMs !== undefined) parts.push(`TTFT ${Math.round(figures.ttftMs)} ms`);
  if (figures.tokensPerSecond !== undefined) parts.push(`${Math.round(figures.tokensPerSecond)} tok/s`);
  if (figures.context) parts.push(contextMeter(figures.context.tokens, figures.context.window));
  if (figures.worktree) parts.push(cyan("⎇ worktree"));
  if (figures.notice) parts.push(yellow(figures.notice));
  return parts.join(dim(" │ "));
}
