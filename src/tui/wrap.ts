/**
 * Terminal text measurement and layout for the TUI: columns a string takes (East Asian wide
 * characters count 2, combining marks 0, color codes 0), word wrap, truncation with an ellipsis,
 * and removing control characters from untrusted text (model output) before it reaches the
 * terminal.
 *
 * Strings here may carry SGR color codes (`ESC [ … m`). Wrapping keeps them: a row that ends inside
 * a style closes it with a reset, and the next row opens the same style again, so every row can be
 * written (or erased) on its own.
 */
import { eastAsianWidth } from "get-east-asian-width";

// eslint-disable-next-line no-control-regex -- matching terminal escape codes is the point
const ANSI = /\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07/g;
// eslint-disable-next-line no-control-regex -- ditto, anchored at a position
const ANSI_AT = /\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07/y;
const ZERO_WIDTH = /^[\p{Mn}\p{Me}\p{Cf}]$/u;

/** Columns one code point takes: 0 for controls and combining marks, 2 for wide and fullwidth. */
export function charWidth(codePoint: number): 0 | 1 | 2 {
  if (codePoint < 0x20 || (codePoint >= 0x7f && codePoint < 0xa0)) return 0;
  if (codePoint < 0x300) return 1;
  if (ZERO_WIDTH.test(String.fromCodePoint(codePoint))) return 0;
  if (codePoint >= 0x1160 && codePoint <= 0x11ff) return 0; // Hangul medial vowels and final consonants
  return eastAsianWidth(codePoint, { ambiguousAsWide: false });
}

/** Columns a string takes on screen, ignoring color codes. */
export function visibleWidth(text: string): number {
  let width = 0;
  const plain = text.includes("\x1b") ? text.replace(ANSI, "") : text;
  for (let i = 0; i < plain.length; i++) {
    const code = plain.charCodeAt(i);
    if (code >= 0x20 && code < 0x7f) {
      width++;
      continue;
    }
    const point = plain.codePointAt(i)!;
    if (point > 0xffff) i++;
    width += charWidth(point);
  }
  return width;
}

/** Drops color codes. */
export function stripAnsi(text: string): string {
  return text.replace(ANSI, "");
}

/**
 * Untrusted text made safe to print: escape sequences and control characters other than newline
 * are removed (a model's output must not move the cursor, retitle the window or recolor the
 * terminal), CRLF becomes LF and tabs become spaces to the next multiple of 4 columns.
 */
export function sanitize(text: string): string {
  // eslint-disable-next-line no-control-regex -- removing control characters is the point
  let clean = text.replace(/\r\n?/g, "\n").replace(/[\x00-\x08\x0b-\x1f\x7f-\x9f]/g, "");
  if (clean.includes("\t")) {
    clean = clean
      .split("\n")
      .map((line) => {
        let out = "";
        for (const ch of line) out += ch === "\t" ? " ".repeat(4 - (visibleWidth(out) % 4)) : ch;
        return out;
      })
      .join("\n");
  }
  return clean;
}

// ── SGR state: the style in force at a point, so that a row can reopen it ─────────────────

interface Style {
  bold?: boolean;
  dim?: boolean;
  italic?: boolean;
  underline?: boolean;
  inverse?: boolean;
  strike?: boolean;
  fg?: string;
  bg?: string;
}

function applySgr(style: Style, sequence: string): void {
  if (!sequence.endsWith("m") || !sequence.startsWith("\x1b[")) return;
  const params = sequence.slice(2, -1).split(";");
  for (let i = 0; i < params.length; i++) {
    const n = params[i] === "" ? 0 : Number(params[i]);
    if (n === 0) for (const key of Object.keys(style)) delete style[key as keyof Style];
    else if (n === 1) style.bold = true;
    else if (n === 2) style.dim = true;
    else if (n === 3) style.italic = true;
    else if (n === 4) style.underline = true;
    else if (n === 7) style.inverse = true;
    else if (n === 9) style.strike = true;
    else if (n === 22) style.bold = style.dim = false;
    else if (n === 23) style.italic = false;
    else if (n === 24) style.underline = false;
    else if (n === 27) style.inverse = false;
    else if (n === 29) style.strike = false;
    else if (n === 39) delete style.fg;
    else if (n === 49) delete style.bg;
    else if (n === 38 || n === 48) {
      const extended = params[i + 1] === "5" ? params.slice(i, i + 3) : params.slice(i, i + 5);
      i += extended.length - 1;
      if (n === 38) style.fg = extended.join(";");
      else style.bg = extended.join(";");
    } else if ((n >= 30 && n <= 37) || (n >= 90 && n <= 97)) style.fg = String(n);
    else if ((n >= 40 && n <= 47) || (n >= 100 && n <= 107)) style.bg = String(n);
  }
}

function openStyle(style: Style): string {
  const codes: string[] = [];
  if (style.bold) codes.push("1");
  if (style.dim) codes.push("2");
  if (style.italic) codes.push("3");
  if (style.underline) codes.push("4");
  if (style.inverse) codes.push("7");
  if (style.strike) codes.push("9");
  if (style.fg) codes.push(style.fg);
  if (style.bg) codes.push(style.bg);
  return codes.length > 0 ? `\x1b[${codes.join(";")}m` : "";
}

/** Makes each row self-contained: it opens the style the previous row ended in and resets at its end. */
function closeRows(rows: string[]): string[] {
  const style: Style = {};
  return rows.map((row) => {
    const open = openStyle(style);
    if (row.includes("\x1b")) for (const match of row.matchAll(ANSI)) applySgr(style, match[0]);
    const close = openStyle(style) !== "" ? "\x1b[0m" : "";
    return open + row + close;
  });
}

// ── wrapping ────────────────────────────────────────────────────────────────────────────

interface Piece {
  text: string;
  width: number;
  kind: "word" | "space" | "wide";
}

/** Splits a line into words, runs of spaces and wide characters (a line may break around each). */
function pieces(line: string): Piece[] {
  const out: Piece[] = [];
  let current: Piece | undefined;
  const push = (kind: Piece["kind"], text: string, width: number): void => {
    if (current && current.kind === kind && kind !== "wide") {
      current.text += text;
      current.width += width;
      return;
    }
    current = { text, width, kind };
    out.push(current);
  };
  for (let i = 0; i < line.length;) {
    if (line.charCodeAt(i) === 0x1b) {
      ANSI_AT.lastIndex = i;
      const match = ANSI_AT.exec(line);
      if (match) {
        // A color code sticks to what follows it (or to the piece before, at the end).
        if (current) current.text += match[0];
        else push("word", match[0], 0);
        i += match[0].length;
        continue;
      }
    }
    const point = line.codePointAt(i)!;
    const ch = String.fromCodePoint(point);
    i += ch.length;
    if (ch === " ") push("space", ch, 1);
    else {
      const width = charWidth(point);
      if (width === 2) push("wide", ch, 2);
      else if (current?.kind === "wide" && width === 0) {
        current.text += ch; // a combining mark stays with its base
      } else push("word", ch, width);
    }
  }
  return out;
}

/** Cuts a piece longer than a row into rows of at most `width` columns (a hard break). */
function splitLong(text: string, width: number): { text: string; width: number }[] {
  const out: { text: string; width: number }[] = [];
  let row = "";
  let used = 0;
  for (let i = 0; i < text.length;) {
    if (text.charCodeAt(i) === 0x1b) {
      ANSI_AT.lastIndex = i;
      const match = ANSI_AT.exec(text);
      if (match) {
        row += match[0];
        i += match[0].length;
        continue;
      }
    }
    const point = text.codePointAt(i)!;
    const ch = String.fromCodePoint(point);
    i += ch.length;
    const w = charWidth(point);
    if (used + w > width && used > 0) {
      out.push({ text: row, width: used });
      row = "";
      used = 0;
    }
    row += ch;
    used += w;
  }
  out.push({ text: row, width: used });
  return out;
}

/**
 * Wraps one line (no newlines) at word boundaries into rows of at most `width` columns. A word
 * longer than a row is broken where the row ends; East Asian wide characters may break anywhere.
 * Leading spaces (indentation) are kept; spaces at a break are dropped.
 */
export function wrapLine(line: string, width: number): string[] {
  width = Math.max(1, width);
  if (visibleWidth(line) <= width) return [line];
  const rows: string[] = [];
  let row = "";
  let used = 0;
  let space: Piece | undefined;
  const end = (): void => {
    rows.push(row);
    row = "";
    used = 0;
  };
  for (const piece of pieces(line)) {
    if (piece.kind === "space") {
      // Held until the next word: a space at a break is dropped (its color codes are kept).
      space = space ? { ...space, text: space.text + piece.text, width: space.width + piece.width } : piece;
      continue;
    }
    const gap = space?.width ?? 0;
    if (used + gap + piece.width <= width) {
      row += (space?.text ?? "") + piece.text;
      used += gap + piece.width;
    } else if (piece.width <= width) {
      if (space) row += stripVisible(space.text);
      if (used > 0) end();
      row = piece.text;
      used = piece.width;
    } else {
      // Longer than a whole row: start on a fresh row and break it hard.
      if (space) row += stripVisible(space.text);
      if (used > 0) end();
      const parts = splitLong(piece.text, width);
      for (const part of parts.slice(0, -1)) rows.push(part.text);
      const last = parts.at(-1)!;
      row = last.text;
      used = last.width;
    }
    space = undefined;
  }
  if (space) row += stripVisible(space.text);
  if (row !== "" || rows.length === 0) rows.push(row);
  return closeRows(rows);
}

/** Only the color codes of a string. */
function stripVisible(text: string): string {
  return text.includes("\x1b") ? (text.match(ANSI) ?? []).join("") : "";
}

/** Cuts a line into rows of `width` columns wherever they end (no regard for words). */
export function hardWrap(line: string, width: number): string[] {
  return closeRows(splitLong(line, Math.max(1, width)).map((part) => part.text));
}

/** Wraps text with newlines: each line on its own, at word boundaries. */
export function wrapText(text: string, width: number): string[] {
  const rows: string[] = [];
  for (const line of text.split("\n")) rows.push(...wrapLine(line, width));
  return rows;
}

/** Cuts a line to at most `width` columns, ending in `…` when something was cut. Never wraps. */
export function truncate(text: string, width: number): string {
  if (visibleWidth(text) <= width) return text;
  if (width <= 0) return "";
  let out = "";
  let used = 0;
  const style: Style = {};
  for (let i = 0; i < text.length;) {
    if (text.charCodeAt(i) === 0x1b) {
      ANSI_AT.lastIndex = i;
      const match = ANSI_AT.exec(text);
      if (match) {
        out += match[0];
        applySgr(style, match[0]);
        i += match[0].length;
        continue;
      }
    }
    const point = text.codePointAt(i)!;
    const ch = String.fromCodePoint(point);
    const w = charWidth(point);
    if (used + w > width - 1) break;
    out += ch;
    used += w;
    i += ch.length;
  }
  return `${out}…${openStyle(style) !== "" ? "\x1b[0m" : ""}`;
}

/** Pads with spaces to `width` columns. */
export function padTo(text: string, width: number): string {
  const w = visibleWidth(text);
  return w >= width ? text : text + " ".repeat(width - w);
}
