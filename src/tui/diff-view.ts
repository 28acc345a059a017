/**
 * Diffs in the terminal: a coloured unified diff cut into rows of the screen's width (an approval's
 * patch, `/diff`), the one-line `✎ path +3 −1` an applied patch leaves in the transcript, and the
 * pager that shows a long diff a screenful at a time in the footer.
 *
 * The lines come from files the model wrote: they are sanitized (no escape sequences reach the
 * terminal) and broken at the width rather than cut, so that everything approved is on screen.
 */
import type { FileDiff } from "../agent/thread-item.js";
import { bold, cyan, dim, green, red } from "./style.js";
import { hardWrap, sanitize } from "./wrap.js";

/** `+3 −1`, coloured. */
export function counts(added: number, removed: number): string {
  return `${green(`+${added}`)} ${red(`−${removed}`)}`;
}

function label(diff: FileDiff): string {
  return diff.kind === "add" ? " (new)" : diff.kind === "delete" ? " (deleted)" : "";
}

/** The transcript's line for one file an applied patch changed: `✎ path +3 −1`. */
export function changeLine(diff: FileDiff): string {
  return `${green("✎")} ${diff.path}${label(diff)} ${counts(diff.added, diff.removed)}`;
}

/** The diffs as screen rows of at most `width` columns: per file a header, then its hunks. */
export function diffRows(diffs: readonly FileDiff[], width: number): string[] {
  const rows: string[] = [];
  const push = (line: string): void => {
    rows.push(...hardWrap(line, width));
  };
  for (const diff of diffs) {
    push(`${bold(sanitize(diff.path))}${label(diff)} ${counts(diff.added, diff.removed)}`);
    if (diff.note !== undefined) push(dim(`  ${diff.note}`));
    for (const line of diff.lines) {
      // A line's own line break (a CR of CRLF) and control characters never reach the terminal.
      const text = sanitize(line.text).replace(/\n/g, "");
      if (line.kind === "hunk") push(cyan(text));
      else if (line.kind === "add") push(green(`+${text}`));
      else if (line.kind === "del") push(red(`-${text}`));
      else push(` ${text}`);
    }
  }
  return rows;
}

/** A screenful of `rows` from `offset`, and the line that says where it is and how to move. */
export function page(
  rows: readonly string[],
  offset: number,
  room: number,
): { shown: string[]; offset: number; position: string | undefined } {
  room = Math.max(1, room);
  if (rows.length <= room) return { shown: [...rows], offset: 0, position: undefined };
  // One row goes to the position line.
  const size = Math.max(1, room - 1);
  const start = Math.max(0, Math.min(offset, rows.length - size));
  const end = Math.min(rows.length, start + size);
  const more = end < rows.length;
  return {
    shown: rows.slice(start, end),
    offset: start,
    position: dim(
      `lines ${start + 1}–${end} of ${rows.length}` +
        `${more ? " · Space/PgDn more" : ""}${start > 0 ? " · PgUp back" : ""}`,
    ),
  };
}
