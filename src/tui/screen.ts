/**
 * An inline terminal renderer: finished output lines go to the terminal's own scrollback (so they
 * can be scrolled, selected and copied like any command's output), and a small live region at the
 * bottom is redrawn in place: the line being streamed, then the footer (status line, prompt).
 *
 * A redraw moves the cursor to the top of the live region, clears to the end of the screen and
 * writes everything again; it costs one `write` of a few hundred bytes. Streaming redraws are
 * coalesced to one per `frameMs`; input echo and key feedback redraw at once.
 */

// eslint-disable-next-line no-control-regex -- matching terminal escape codes is the point
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07/g;

/** Columns a string takes on screen, ignoring color codes (one column per character). */
export function visibleWidth(text: string): number {
  let width = 0;
  for (const _ of text.replace(ANSI, "")) width++;
  return width;
}

export interface Output {
  write(data: string): unknown;
  columns?: number;
  rows?: number;
}

export class Screen {
  /** Completed lines not yet written to the scrollback. */
  #pending = "";
  /** The output line being streamed (no newline yet). */
  #partial = "";
  #footer: string[] = [];
  /** Where the caret goes: a footer line (default the last) and columns from its start. */
  #caretColumn: number | undefined;
  #caretLine: number | undefined;
  /** Rows the live region took at the last draw, and the caret's row within it. */
  #liveRows = 0;
  #caretRow = 0;
  #timer: NodeJS.Timeout | undefined;

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

  /** Appends output text; `\n` ends a line. Drawn on the next frame. */
  print(text: string): void {
    const joined = this.#partial + text;
    const end = joined.lastIndexOf("\n");
    if (end < 0) this.#partial = joined;
    else {
      this.#pending += joined.slice(0, end + 1);
      this.#partial = joined.slice(end + 1);
    }
    this.schedule();
  }

  /** Ends the streamed line, if one is open. */
  endLine(): void {
    if (this.#partial !== "") this.print("\n");
  }

  /** Prints whole lines (a newline is added). */
  line(text = ""): void {
    this.endLine();
    this.print(`${text}\n`);
  }

  /**
   * Prints a whole line to the scrollback without ending the line being streamed: a notice shown
   * mid-answer goes above the streamed line instead of splitting it in two.
   */
  lineAbove(text = ""): void {
    this.#pending += `${text}\n`;
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

  /** Draws now (key feedback). */
  draw(): void {
    if (this.#timer) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
    const columns = this.columns;
    let frame = "\r";
    if (this.#caretRow > 0) frame += `\x1b[${this.#caretRow}A`;
    frame += "\x1b[J";
    if (this.#pending !== "") {
      frame += this.#pending.replace(/\r?\n/g, "\r\n");
      this.#pending = "";
    }
    const live = this.#partial === "" ? this.#footer : [this.#partial, ...this.#footer];
    frame += live.join("\r\n");
    let rows = 0;
    for (const line of live) rows += Math.max(1, Math.ceil(visibleWidth(line) / columns));
    this.#liveRows = rows;
    // Put the caret on the last line at its column (the cursor is at that line's end now).
    const last = live[live.length - 1] ?? "";
    const lastWidth = visibleWidth(last);
    const lastRows = Math.max(1, Math.ceil(lastWidth / columns));
    const endRow =
      lastWidth > 0 && lastWidth % columns === 0 ? lastRows - 1 : Math.floor(lastWidth / columns);
    let caretRowInLast = endRow;
    const caretIndex =
      this.#caretLine === undefined ? live.length - 1 : live.length - this.#footer.length + this.#caretLine;
    if (caretIndex >= 0 && caretIndex < live.length - 1 && this.#caretColumn !== undefined) {
      // The caret on an earlier line: count the rows from its line's start to the last line's end.
      let above = 0;
      for (const line of live.slice(caretIndex, -1)) {
        above += Math.max(1, Math.ceil(visibleWidth(line) / columns));
      }
      const row = Math.floor(this.#caretColumn / columns);
      const col = this.#caretColumn % columns;
      frame += `\x1b[${above + endRow - row}A\r${col > 0 ? `\x1b[${col}C` : ""}`;
      caretRowInLast = endRow - (above + endRow - row);
    } else if (this.#caretColumn !== undefined && this.#caretColumn < lastWidth) {
      const row = Math.floor(this.#caretColumn / columns);
      const col = this.#caretColumn % columns;
      if (row < endRow) frame += `\x1b[${endRow - row}A`;
      frame += `\r${col > 0 ? `\x1b[${col}C` : ""}`;
      caretRowInLast = row;
    }
    this.#caretRow = rows - lastRows + caretRowInLast;
    this.out.write(frame);
  }

  /** Leaves the live region on screen as plain output (on exit). */
  release(): void {
    this.draw();
    this.out.write("\r\n");
    this.#liveRows = 0;
    this.#caretRow = 0;
  }

  get liveRows(): number {
    return this.#liveRows;
  }
}
