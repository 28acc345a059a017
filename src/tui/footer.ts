/**
 * The footer: the live rows under the scrollback, drawn again after every change (and with every
 * token). From the top: the variants' table while they run, the status line (cut to the width:
 * a wrapped one left debris when redrawn), the queued messages, then one of: the approval waiting
 * for y/a/n, the pager (`/diff`), or the composer under its prompt (`›`, `steer ›` while the model
 * writes, `variants N ›`). It reads the app's parts and writes nothing but the footer.
 */
import type { Agent } from "../agent/agent.js";
import { liveContext } from "../agent/live-context.js";
import type { Runtime } from "../client/agent-runtime.js";
import type { Approvals } from "./approvals.js";
import { PROMPT, STEER_PROMPT, type Composer } from "./composer.js";
import type { Pager } from "./pager.js";
import type { Screen } from "./screen.js";
import { statusLine, type Phase } from "./status-line.js";
import { dim } from "./style.js";
import type { Transcript } from "./transcript.js";
import type { Variants } from "./variants.js";
import { truncate } from "./wrap.js";

export interface FooterHost {
  readonly screen: Screen;
  readonly runtime: Runtime | undefined;
  readonly agent: Agent | undefined;
  readonly model: string;
  readonly phase: Phase;
  readonly notice: string;
  readonly composer: Composer;
  readonly approvals: Approvals;
  readonly pager: Pager;
  readonly transcript: Transcript;
  readonly variants: Variants;
}

/** Sets the footer and draws it: now, or (`streaming`, for a token) with the next scheduled draw. */
export function drawFooter(app: FooterHost, streaming: boolean): void {
  const { screen, agent, variants } = app;
  const lines: string[] = [];
  if (variants.running) {
    const table = variants.table(screen.columns - 1);
    lines.push(...table.slice(0, Math.max(3, screen.rows - 6)));
  }
  // The status line never wraps (a wrapped one left debris when redrawn): it is cut to fit.
  const fit = screen.columns - 1;
  lines.push(
    truncate(
      statusLine({
        model: app.model,
        route: app.transcript.route,
        busy: Boolean(agent?.busy || variants.running),
        phase: app.phase,
        ttftMs: app.transcript.ttftMs,
        tokensPerSecond: app.transcript.tokensPerSecond,
        context: agent ? { tokens: liveContext(agent).tokens, window: agent.contextWindow } : undefined,
        worktree: Boolean(app.runtime?.taskWorkspace),
        notice: app.notice,
      }),
      fit,
    ),
  );
  const queued = agent?.queuedMessages ?? [];
  if (queued.length > 0)
    lines.push(truncate(dim(`queued (Tab): ${queued.map((q) => `“${q}”`).join(" ")}`), fit));
  let caret: number | undefined;
  let caretLine: number | undefined;
  // Rows the footer may take: the screen less one (see Screen.draw).
  const room = screen.rows - 1;
  if (app.approvals.isOpen) lines.push(...app.approvals.rows(fit, room - lines.length));
  else if (app.pager.isOpen) lines.push(...app.pager.rows(fit, room - lines.length));
  else {
    const prompt = agent?.busy ? STEER_PROMPT : variants.next ? `variants ${variants.next} › ` : PROMPT;
    const composer = app.composer.rows(prompt);
    caretLine = lines.length + composer.caretRow;
    caret = composer.caretColumn;
    lines.push(...composer.rows);
  }
  screen.setFooter(lines, caret, caretLine);
  if (streaming) screen.schedule();
  else screen.draw();
}
