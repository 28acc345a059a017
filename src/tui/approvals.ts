/**
 * Approvals, diff-first: a command, tool call or patch the agent (or a variant) asks to run waits
 * here for y (yes), a (always) or n/Esc (no); Enter is yes. The footer shows what is approved in
 * full before the keys: the whole command, the patch's diff with its +/− counts, paged with
 * Space/PgDn and PgUp when it is taller than the screen. One approval at a time: while one is open
 * every key goes to it. The answer is said in the transcript.
 */
import type { ApprovalAnswer, ApprovalRequest } from "../agent/tools/index.js";
import { counts, diffRows, page } from "./diff-view.js";
import type { Key } from "./keys.js";
import { pageStep } from "./pager.js";
import type { Screen } from "./screen.js";
import type { Phase } from "./status-line.js";
import { dim, inverse, yellow } from "./style.js";
import { wrapText } from "./wrap.js";

export interface ApprovalsHost {
  readonly screen: Screen;
  phase: Phase;
  render(): void;
}

export class Approvals {
  /** `offset`: the first row of its diff shown (Space/PgDn pages through a long one). */
  #open: { request: ApprovalRequest; resolve: (answer: ApprovalAnswer) => void; offset: number } | undefined;
  /** Rows a page showed at the last draw: Space/PgDn moves by that many. */
  #pageRows = 10;

  constructor(private readonly host: ApprovalsHost) {}

  get isOpen(): boolean {
    return this.#open !== undefined;
  }

  /** Shows the request and settles with the user's answer. */
  ask(request: ApprovalRequest): Promise<ApprovalAnswer> {
    return new Promise((resolve) => {
      this.#open = { request, resolve, offset: 0 };
      this.host.phase = "approval";
      this.host.render();
    });
  }

  onKey(key: Key): void {
    const scroll = pageStep(key);
    if (scroll !== undefined && this.#open) {
      this.#open.offset = Math.max(0, this.#open.offset + scroll * this.#pageRows);
      return this.host.render();
    }
    const answer: ApprovalAnswer | undefined =
      key.name === "text"
        ? ({ y: "yes", n: "no", a: "always" } as Record<string, ApprovalAnswer>)[key.text.toLowerCase()]
        : key.name === "escape" || key.name === "ctrl-c"
          ? "no"
          : key.name === "enter"
            ? "yes"
            : undefined;
    if (!answer || !this.#open) return;
    const { resolve, request } = this.#open;
    this.#open = undefined;
    this.host.phase = "tools";
    this.host.screen.line(
      answer === "no"
        ? yellow(`✗ declined: ${request.summary}`)
        : dim(`✓ approved${answer === "always" ? " (always)" : ""}: ${request.summary}`),
    );
    this.host.render();
    resolve(answer);
  }

  /**
   * The footer's rows for the open approval in `room` rows: what is approved (the whole command,
   * the patch's diff) before the keys' line; what does not fit is paged under the line that says
   * what it is.
   */
  rows(width: number, room: number): string[] {
    const approval = this.#open!;
    const { request } = approval;
    const verb = request.kind === "command" ? "Run" : request.kind === "tool" ? "Call" : "Apply patch";
    let total = "";
    if (request.diffs) {
      let added = 0;
      let removed = 0;
      for (const diff of request.diffs) {
        added += diff.added;
        removed += diff.removed;
      }
      total = ` ${counts(added, removed)}`;
    }
    let sticky = [
      ...wrapText(yellow(`${verb}: ${request.summary}`) + total, width),
      ...(request.reason ? wrapText(dim(`  ${request.reason}`), width) : []),
    ];
    let body = request.diffs ? diffRows(request.diffs, width) : [];
    const free = room - 1; // the keys' line
    // A head too long to stay put (a long command) is paged with the rest.
    if (sticky.length + Math.min(body.length, 4) > free) {
      body = [...sticky, ...body];
      sticky = [];
    }
    const shown = page(body, approval.offset, free - sticky.length);
    approval.offset = shown.offset;
    this.#pageRows = Math.max(1, shown.shown.length);
    return [
      ...sticky,
      ...shown.shown,
      ...(shown.position ? [shown.position] : []),
      `${inverse(" y ")} yes  ${inverse(" a ")} always  ${inverse(" n ")} no`,
    ];
  }
}
