/**
 * The text of a quick edit's inline diff, without VS Code: the lines the edit touches, the merged
 * view (removed lines kept, added lines after them, unchanged lines once) and which of its lines are
 * removed or added, and the block a quick edit without a selection rewrites. Pure, so the node
 * tests cover it (test/vscode-inline-diff.test.ts).
 */

export type LineKind = "same" | "removed" | "added";

/** Lines of `text` without their terminators (`\n` or `\r\n`); "" is no lines, "a\n" is one. */
export function splitLines(text: string): string[] {
  if (text === "") return [];
  const lines = text.split(/\r?\n/);
  if (lines.at(-1) === "") lines.pop();
  return lines;
}

/** Above this many cells (old × new lines after the common ends) the diff is all removed + all added. */
const MAX_CELLS = 4_000_000;

/**
 * A line diff of `before` against `after` (longest common subsequence), in order; at each change
 * the removed lines come before the added ones, as a unified diff shows them.
 */
export function lineDiff(before: readonly string[], after: readonly string[]): LineKind[] {
  let head = 0;
  while (head < before.length && head < after.length && before[head] === after[head]) head++;
  let tail = 0;
  while (
    tail < before.length - head &&
    tail < after.length - head &&
    before[before.length - 1 - tail] === after[after.length - 1 - tail]
  )
    tail++;
  const a = before.slice(head, before.length - tail);
  const b = after.slice(head, after.length - tail);
  const middle: LineKind[] = [];
  if (a.length * b.length > MAX_CELLS || a.length === 0 || b.length === 0) {
    middle.push(...a.map((): LineKind => "removed"), ...b.map((): LineKind => "added"));
  } else {
    // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
    const width = b.length + 1;
    const lcs = new Uint32Array((a.length + 1) * width);
    for (let i = a.length - 1; i >= 0; i--) {
      for (let j = b.length - 1; j >= 0; j--) {
        lcs[i * width + j] =
          a[i] === b[j]
            ? lcs[(i + 1) * width + j + 1]! + 1
            : Math.max(lcs[(i + 1) * width + j]!, lcs[i * width + j + 1]!);
      }
    }
    let i = 0;
    let j = 0;
    while (i < a.length || j < b.length) {
      if (i < a.length && j < b.length && a[i] === b[j]) {
        middle.push("same");
        i++;
        j++;
      } else if (j >= b.length || (i < a.length && lcs[(i + 1) * width + j]! >= lcs[i * width + j + 1]!)) {
        middle.push("removed");
        i++;
      } else {
        middle.push("added");
        j++;
      }
    }
  }
  return [
    ...before.slice(0, head).map((): LineKind => "same"),
    ...middle,
    ...before.slice(before.length - tail).map((): LineKind => "same"),
  ];
}

export interface MergedView {
  /** What stands in the editor in place of the original lines while the edit is pending. */
  text: string;
  /** Line indexes (from the view's first line) of removed and added lines. */
  removed: number[];
  added: number[];
}

/**
 * The inline diff of `before` → `after` (both whole lines, as the document holds them) as one text
 * with `eol` between lines: unchanged lines once, removed lines, then added lines. It ends with an
 * `eol` when `before` did, so the lines after it stay where they were.
 */
export function mergedView(before: string, after: string, eol: string): MergedView {
  const old = splitLines(before);
  const next = splitLines(after);
  const lines: string[] = [];
  const removed: number[] = [];
  const added: number[] = [];
  let i = 0;
  let j = 0;
  for (const kind of lineDiff(old, next)) {
    if (kind === "removed") removed.push(lines.length);
    if (kind === "added") added.push(lines.length);
    lines.push(kind === "added" ? next[j]! : old[i]!);
    if (kind !== "added") i++;
    if (kind !== "removed") j++;
  }
  const endsWithEol = /\n$/.test(before) && lines.length > 0;
  return { text: lines.join(eol) + (endsWithEol ? eol : ""), removed, added };
}

/**
 * The block a quick edit without a selection rewrites, as [first, last] line numbers: the run of
 * non-blank lines around `line` (at most `limit` lines each way), or the line alone when it is blank.
 */
export function currentBlock(lines: readonly string[], line: number, limit = 40): [number, number] {
  const blank = (n: number): boolean => (lines[n] ?? "").trim() === "";
  if (blank(line)) return [line, line];
  let first = line;
  while (first > 0 && line - first < limit && !blank(first - 1)) first--;
  let last = line;
  while (last < lines.length - 1 && last - line < limit && !blank(last + 1)) last++;
  return [first, last];
}
