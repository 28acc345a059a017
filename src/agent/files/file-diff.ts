/**
 * Unified diffs of file contents, for display: an approval shows what a patch would change before
 * the user answers, the transcript what an applied patch changed, `/diff` what the session changed.
 * Computed from the two contents with the `diff` package (never by running `git diff`, so nothing a
 * repository's configuration names can run).
 */
import { structuredPatch } from "diff";
import type { DiffLine, FileDiff } from "../thread-item.js";

/** A file's content, `null` when it does not exist. */
export type Content = string | Uint8Array | null;

/** Contents larger than this are said to have changed, not diffed (the diff would be unreadable anyway). */
export const MAX_DIFF_BYTES = 1024 * 1024;

const CONTEXT_LINES = 3;
/**
 * The most time one diff may take. Myers' algorithm costs (lines × edits): a 15,000-line file
 * rewritten end to end took over four minutes of the event loop. Past this, the diff shown is the
 * whole old text removed and the whole new text added (correct, not minimal).
 */
const DIFF_TIMEOUT_MS = 300;

function byteLength(content: string | Uint8Array): number {
  return typeof content === "string" ? Buffer.byteLength(content) : content.length;
}

function isBinary(content: Content): boolean {
  if (content === null) return false;
  return typeof content === "string" ? content.includes("\0") : content.includes(0);
}

function text(content: Content): string {
  if (content === null) return "";
  return typeof content === "string" ? content : Buffer.from(content).toString("utf8");
}

/**
 * The diff of one file from `before` to `after` (3 lines of context). `path` is what is shown; a
 * binary or too-large side gives no lines and a `note` saying why.
 */
export function contentDiff(path: string, before: Content, after: Content): FileDiff {
  const kind = before === null ? "add" : after === null ? "delete" : "update";
  const sizes = [before, after].filter((c) => c !== null).map(byteLength);
  if (isBinary(before) || isBinary(after)) {
    return { path, kind, lines: [], added: 0, removed: 0, note: `binary file (${sizes.join(" → ")} bytes)` };
  }
  if (sizes.some((size) => size > MAX_DIFF_BYTES)) {
    return {
      path,
      kind,
      lines: [],
      added: 0,
      removed: 0,
      note: `too large to show (${sizes.join(" → ")} bytes)`,
    };
  }
  const oldText = text(before);
  const newText = text(after);
  const patch = structuredPatch(path, path, oldText, newText, "", "", {
    context: CONTEXT_LINES,
    timeout: DIFF_TIMEOUT_MS,
  }) ?? { hunks: [wholeFile(oldText, newText)] };
  const lines: DiffLine[] = [];
  let added = 0;
  let removed = 0;
  for (const hunk of patch.hunks) {
    // An empty range names the line before it, as diff and git write it (`@@ -0,0 +1,3 @@`).
    const oldStart = hunk.oldLines === 0 ? hunk.oldStart - 1 : hunk.oldStart;
    const newStart = hunk.newLines === 0 ? hunk.newStart - 1 : hunk.newStart;
    lines.push({
      kind: "hunk",
      text: `@@ -${oldStart},${hunk.oldLines} +${newStart},${hunk.newLines} @@`,
    });
    for (const line of hunk.lines) {
      if (line.startsWith("\\")) continue; // "\ No newline at end of file"
      const lineKind = line[0] === "+" ? "add" : line[0] === "-" ? "del" : "context";
      if (lineKind === "add") added++;
      if (lineKind === "del") removed++;
      lines.push({ kind: lineKind, text: line.slice(1) });
    }
  }
  return { path, kind, lines, added, removed };
}

/** One hunk that removes every line of `before` and adds every line of `after`. */
function wholeFile(
  before: string,
  after: string,
): { oldStart: number; oldLines: number; newStart: number; newLines: number; lines: string[] } {
  const split = (content: string): string[] => (content === "" ? [] : content.replace(/\n$/, "").split("\n"));
  const old = split(before);
  const next = split(after);
  return {
    oldStart: 1,
    oldLines: old.length,
    newStart: 1,
    newLines: next.length,
    lines: [...old.map((line) => `-${line}`), ...next.map((line) => `+${line}`)],
  };
}
