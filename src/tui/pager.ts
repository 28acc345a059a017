/**
 * The footer's pager: what is too tall for the footer and does not belong in the scrollback, shown a
 * screenful at a time: `/diff` (the session's changes) and `/diff K` (a variant's). While it is
 * open every key goes to it, never to the composer: Space/PgDn and PgUp page, Up/Down scroll a row,
 * q, Esc or Enter close it. `pageStep` is the paging keys' meaning, shared with the approvals.
 */
import { page } from "./diff-view.js";
import type { Key } from "./keys.js";
import { truncate } from "./wrap.js";

/** What the pager shows: a head line, the rows, and the first row shown. */
export interface Page {
  head: string;
  rows: string[];
  offset: number;
}

/** +1 (a page on) for Space and PgDn, -1 for PgUp and b; undefined for other keys. */
export function pageStep(key: Key): 1 | -1 | undefined {
  if (key.name === "pagedown" || (key.name === "text" && key.text === " ")) return 1;
  if (key.name === "pageup" || (key.name === "text" && key.text.toLowerCase() === "b")) return -1;
  return undefined;
}

export class Pager {
  #page: Page | undefined;
  /** Rows the page showed at the last draw: Space/PgDn moves by that many. */
  #pageRows = 10;

  get isOpen(): boolean {
    return this.#page !== undefined;
  }

  open(page: Page): void {
    this.#page = page;
  }

  /** A key while the pager is open (the caller draws again). */
  onKey(key: Key): void {
    const pager = this.#page!;
    const scroll = pageStep(key);
    if (scroll !== undefined) pager.offset = Math.max(0, pager.offset + scroll * this.#pageRows);
    else if (key.name === "down" || key.name === "up")
      pager.offset = Math.max(0, pager.offset + (key.name === "down" ? 1 : -1));
    else if (
      key.name === "escape" ||
      key.name === "enter" ||
      key.name === "ctrl-c" ||
      (key.name === "text" && key.text.toLowerCase() === "q")
    )
      this.#page = undefined;
  }

  /** The footer's rows for the open page: its head, a screenful of `room` rows at most, where it is. */
  rows(width: number, room: number): string[] {
    const pager = this.#page!;
    const shown = page(pager.rows, pager.offset, room - 1);
    pager.offset = shown.offset;
    this.#pageRows = Math.max(1, shown.shown.length);
    return [truncate(pager.head, width), ...shown.shown, ...(shown.position ? [shown.position] : [])];
  }
}
