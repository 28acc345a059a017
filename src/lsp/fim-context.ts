/**
 * What a fill-in-the-middle request sends (the text around the cursor, clipped by lines and
 * characters) and what is done with the answer before it becomes ghost text.
 */

export interface ClipLimits {
  prefixLines: number;
  suffixLines: number;
  prefixChars: number;
  suffixChars: number;
}

export const DEFAULT_CLIP: ClipLimits = {
  prefixLines: 150,
  suffixLines: 50,
  prefixChars: 12_000,
  suffixChars: 4_000,
};

/** The last `lines` lines of `text` (the partial line at its end counts as one), at most `chars` long. */
export function clipPrefix(text: string, lines: number, chars: number): string {
  let start = text.length;
  for (let seen = 0; start > 0 && seen < lines; seen++) {
    const newline = text.lastIndexOf("\n", start - 1);
    start = newline < 0 ? 0 : newline;
  }
  if (start > 0) start += 1;
  if (text.length - start > chars) {
    // Cut at a line start so the model never sees half a line.
    const from = text.length - chars;
    const newline = text.indexOf("\n", from);
    start = newline < 0 || newline + 1 >= text.length ? from : newline + 1;
  }
  return text.slice(start);
}

/** The first `lines` lines of `text` (the partial line at its start counts as one), at most `chars` long. */
export function clipSuffix(text: string, lines: number, chars: number): string {
  let end = -1;
  for (let seen = 0; seen < lines; seen++) {
    end = text.indexOf("\n", end + 1);
    if (end < 0) break;
  }
  let clipped = end < 0 ? text : text.slice(0, end + 1);
  if (clipped.length > chars) {
    const newline = clipped.lastIndexOf("\n", chars);
    clipped = clipped.slice(0, newline > 0 ? newline + 1 : chars);
  }
  return clipped;
}

/** True when the cursor is inside a line's text (something but blanks follows it on its line). */
export function midLine(suffix: string): boolean {
  const newline = suffix.indexOf("\n");
  return (newline < 0 ? suffix : suffix.slice(0, newline)).trim() !== "";
}

/**
 * Where `line` starts writing the closing characters (brackets, quotes, punctuation: no letters or
 * digits) that begin `suffixLine`, as in `world")` before `");`; -1 when it does not.
 */
function closingOverlap(line: string, suffixLine: string): number {
  for (let i = 0; i < line.length; i++) {
    const tail = line.slice(i);
    if (/[\p{L}\p{N}_]/u.test(tail)) continue;
    if (tail.trim() !== "" && suffixLine.startsWith(tail.trim())) return i;
  }
  return -1;
}

/**
 * The completion to show, or undefined for none:
 * - whitespace only, or only what already follows the cursor (a repeat of the suffix): none;
 * - when it writes the rest of the cursor's line again (the suffix's first line, or the closing
 *   brackets and quotes it starts with), it is cut before the repeat (the line then reads once,
 *   with the suffix the editor already has);
 * - when the cursor ends its line and the completion reaches the suffix's next non-blank line,
 *   it is cut before that line.
 */
export function postProcess(completion: string, suffix: string): string | undefined {
  if (completion.trim() === "") return undefined;
  const suffixStart = suffix.trimStart();
  if (suffixStart.startsWith(completion.trim())) return undefined;
  const newline = suffix.indexOf("\n");
  const firstLine = (newline < 0 ? suffix : suffix.slice(0, newline)).trim();
  let text = completion;
  if (firstLine !== "") {
    const lineEnd = text.indexOf("\n");
    const line = lineEnd < 0 ? text : text.slice(0, lineEnd);
    const at = line.indexOf(firstLine);
    const closing = at >= 0 ? at : closingOverlap(line, firstLine);
    if (closing >= 0) text = text.slice(0, closing);
    else if (lineEnd >= 0) text = text.slice(0, lineEnd);
  } else {
    const nextLine = suffix
      .split("\n")
      .slice(1)
      .find((l) => l.trim() !== "")
      ?.trim();
    if (nextLine !== undefined) {
      const lines = text.split("\n");
      const repeat = lines.findIndex((l, i) => i > 0 && l.trim() === nextLine);
      if (repeat > 0) text = lines.slice(0, repeat).join("\n");
    }
  }
  if (text.trim() === "") return undefined;
  return text;
}
