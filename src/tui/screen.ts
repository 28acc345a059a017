/**
 * An inline terminal renderer: finished output lines go to the terminal's own scrollback (so they
 * can be scrolled, selected and copied like any command's output), and a small live region at the
 * bottom is redrawn in place: the unfinished end of the answer being streamed, then the footer
 * (status line, prompt).
 *
 * A redraw moves the cursor to the top of the live region, clears to the end of the screen and
 * writes everything again; it costs one `write` of a few hundred bytes. Streaming redraws are
 * coalesced to one per `frameMs`; input echo and key feedback redraw at once.
 *
 * The renderer breaks every row itself (words at word boundaries, footer lines at the terminal's
 * width), so the terminal never wraps a line behind its back and the rows to move up are known
 * exactly; the live region is kept below the screen's height (a taller answer's top goes to the
 * scrollback as it streams), because the cursor cannot move above the screen's top and whatever
 * is there would stay behind as a copy. After a resize, the rows drawn at the old width are counted
 * again at the new one (terminals reflow them).
 */
import { MarkdownStream } from "./markdown.js";
import { hardWrap, visibleWidth, wrapText } from "./wrap.js";

export { visibleWidth } from "./wrap.js";

export interface Output {
  write(data: string): unknown;
  columns?: number;
  rows?: number;
}

export class Screen {
  /** Finished lines not yet written to the scrollback (wrapped when drawn). */
  #pending: string[] = [];
  /** The answer being streamed, rendered as Markdown. */
  #stream: MarkdownStream | undefined;
  #footer: string[] = [];
  /** Where the caret goes: a footer line (default the last) and columns from its start. */
  #caretColumn: number | undefined;
  #caretLine: number | undefined;
  /** Rows the live region took at the last draw. */
  #liveRows = 0;
  /** At the last draw: the widths of the live rows above the caret's row, the caret's column, the width. */
  #aboveCaret: number[] = [];
  #caretAt = 0;
  #drawnColumns = 0;
  #timer: NodeJS.Timeout | undefined;
  /** Work waiting for the scheduled frame to be drawn (`afterFrame`). */
  #afterFrame: (() => void)[] = [];

  constructor(
    private readonly out: Output,
    private readonly frameMs = 16,
  ) {}

  get columns(): number {
    return Math.max(20, this.out.columns ?? 80);
  }

  get rows(): number {
    return Math.max(10, this.out.rows ?? 24);
  }

  /** Appends streamed answer text (Markdown). Drawn on the next frame. */
  print(text: string): void {
    (this.#stream ??= new MarkdownStream()).append(text);
    this.schedule();
  }

  /** Ends the streamed answer, if one is open: all of it becomes final output. */
  endLine(): void {
    if (!this.#stream) return;
    this.#pending.push(...this.#stream.finish(this.columns));
    this.#stream = undefined;
    this.schedule();
  }

  /** Prints whole lines (a newline is added); they are wrapped at word boundaries. */
  line(text = ""): void {
    this.endLine();
    this.#pending.push(...text.split("\n"));
    this.schedule();
  }

  /**
   * Prints a whole line to the scrollback without ending the streamed answer: a notice shown
   * mid-answer goes above its unfinished part instead of splitting it in two.
   */
  lineAbove(text = ""): void {
    if (this.#stream) this.#pending.push(...this.#stream.drain(this.columns));
    this.#pending.push(...text.split("\n"));
    this.schedule();
  }

  /** `caretLine`: the index in `lines` of the line the caret goes on (a multi-line prompt); default the last. */
  setFooter(lines: string[], caretColumn?: number, caretLine?: number): void {
    this.#footer = lines;
    this.#caretColumn = caretColumn;
    this.#caretLine = caretLine;
  }

  /** Draws on the next frame (streaming). */
  schedule(): void {
    if (this.#timer) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.draw();
    }, this.frameMs);
  }

  /** Runs `work` in the event-loop turn after the frame now scheduled is drawn (soon, when none is). */
  afterFrame(work: () => void): void {
    if (this.#timer) this.#afterFrame.push(work);
    else setImmediate(work);
  }

  /** Rows from the live region's top to the caret, as the terminal shows them now. */
  #rowsToTop(columns: number): number {
    if (columns === this.#drawnColumns || this.#drawnColumns === 0) return this.#aboveCaret.length;
    // Resized: terminals reflow the rows drawn at the old width (a narrower one splits them).
    let rows = 0;
    for (const width of this.#aboveCaret) rows += Math.max(1, Math.ceil(width / columns));
    return rows + Math.floor(Math.min(this.#caretAt, this.#drawnColumns - 1) / columns);
  }

  /** Draws now (key feedback). */
  draw(): void {
    if (this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    const columns = this.columns;
    let frame = "\r";
    const up = this.#rowsToTop(columns);
    if (up > 0) frame += `\x1b[${up}A`;
    frame += "\x1b[J";
    const done: string[] = [];
    for (const line of this.#pending) done.push(...wrapText(line, columns));
    this.#pending = [];

    // The footer, each line cut into rows of the terminal's width; the caret's row and column.
    const footer: string[] = [];
    let caretRow = -1;
    let caretColumn = 0;
    const caretLine = this.#caretLine ?? this.#footer.length - 1;
    this.#footer.forEach((line, index) => {
      const rows = splitRows(line, columns);
      if (index === caretLine && this.#caretColumn !== undefined) {
        const row = Math.floor(this.#caretColumn / columns);
        // A caret just past a full row starts the next one.
        while (rows.length <= row) rows.push("");
        caretRow = footer.length + row;
        caretColumn = this.#caretColumn % columns;
      }
      footer.push(...rows);
    });
    const maxRows = this.rows - 1;
    if (footer.length > maxRows) {
      const cut = footer.length - maxRows;
      footer.splice(0, cut);
      caretRow = caretRow < 0 ? caretRow : Math.max(0, caretRow - cut);
    }
    let answer: string[] = [];
    if (this.#stream) {
      const taken = this.#stream.take(columns, maxRows - footer.length);
      done.push(...taken.done);
      answer = taken.live;
    }
    const live = [...answer, ...footer];
    if (done.length > 0) frame += `${done.join("\r\n")}\r\n`;
    frame += live.join("\r\n");
    const last = live.length - 1;
    if (caretRow >= 0) {
      caretRow += answer.length;
      if (last > caretRow) frame += `\x1b[${last - caretRow}A`;
      frame += `\r${caretColumn > 0 ? `\x1b[${caretColumn}C` : ""}`;
    } else {
      // The cursor stays where the writing ended: the last row's end.
      caretRow = Math.max(0, last);
      caretColumn = visibleWidth(live[last] ?? "");
    }
    this.#liveRows = live.length;
    this.#aboveCaret = live.slice(0, caretRow).map(visibleWidth);
    this.#caretAt = caretColumn;
    this.#drawnColumns = columns;
    this.out.write(frame);
    for (const work of this.#afterFrame.splice(0)) setImmediate(work);
  }

  /** Leaves the live region on screen as plain output (on exit). */
  release(): void {
    this.draw();
    this.out.write("\r\n");
    this.#liveRows = 0;
    this.#aboveCaret = [];
    this.#caretAt = 0;
  }

  get liveRows(): number {
    return this.#liveRows;
  }
}

/** A footer line cut into rows of exactly `columns`, as a terminal would (the prompt's caret arithmetic). */
function splitRows(line: string, columns: number): string[] {
  return visibleWidth(line) <= columns ? [line] : hardWrap(line, columns);
}
