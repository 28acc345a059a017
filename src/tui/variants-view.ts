/**
 * The TUI's view of best-of-N variants (`/variants N`): a compact table, one row per variant
 * (state, tokens/s, files, +/−, check result, first line of its answer), and a variant's diff in
 * color (`/diff K`). Model text is sanitized before it is drawn.
 */
import type { TaskFileChange } from "../agent/worktree/task-changes.js";
import type { Variant } from "../agent/variants/runner.js";
import { bold, cyan, dim, green, red, yellow } from "./style.js";
import { hardWrap, padTo, sanitize, truncate, visibleWidth } from "./wrap.js";

const STATE: Record<Variant["state"], (text: string) => string> = {
  queued: dim,
  starting: yellow,
  running: cyan,
  checking: cyan,
  done: green,
  failed: red,
  cancelled: yellow,
};

function checkCell(variant: Variant): string {
  const check = variant.check;
  if (!check) return dim("–");
  if (check.state === "running") return cyan("running");
  if (check.state === "passed") return green("✓ pass");
  return red(check.timedOut ? "✗ timeout" : `✗ exit ${check.exitCode ?? "?"}`);
}

/**
 * The table's rows for `width` columns: a header, then one row per variant. With `withCheck`
 * false (no `variants.check` configured) the check column is left out.
 */
export function variantTable(variants: readonly Variant[], width: number, withCheck: boolean): string[] {
  const columns: { title: string; width: number; cell: (v: Variant) => string; right?: boolean }[] = [
    { title: "#", width: 2, cell: (v) => String(v.index + 1), right: true },
    { title: "state", width: 9, cell: (v) => STATE[v.state](v.state) },
    { title: "temp", width: 4, cell: (v) => v.temperature.toFixed(1), right: true },
    {
      title: "tok/s",
      width: 5,
      cell: (v) => (v.tokensPerSecond === undefined ? "" : String(Math.round(v.tokensPerSecond))),
      right: true,
    },
    { title: "files", width: 5, cell: (v) => String(v.files.length), right: true },
    {
      title: "+/−",
      width: 11,
      cell: (v) => `${green(`+${v.added}`)} ${red(`−${v.removed}`)}`,
    },
    ...(withCheck ? [{ title: "check", width: 9, cell: checkCell }] : []),
  ];
  const fixed = columns.reduce((sum, c) => sum + c.width + 2, 0);
  const answerWidth = Math.max(10, width - fixed - 1);
  const row = (cells: string[]): string => truncate(cells.join("  ").trimEnd(), width);
  const cell = (text: string, column: { width: number; right?: boolean }): string => {
    const cut = truncate(text, column.width);
    return column.right ? padTo("", column.width - visibleWidth(cut)) + cut : padTo(cut, column.width);
  };
  const out = [dim(row([...columns.map((c) => cell(c.title, c)), "answer"]))];
  for (const variant of variants) {
    const answer =
      variant.state === "failed" && variant.error
        ? red(variant.error)
        : sanitize(firstLine(variant.text)) || dim(variant.state === "queued" ? "" : "…");
    out.push(row([...columns.map((c) => cell(c.cell(variant), c)), truncate(answer, answerWidth)]));
  }
  return out;
}

/** The files a variant changed, one line each: `path  +A −R (status)`. */
export function variantFiles(variant: Variant): string[] {
  return variant.files.map(
    (f) =>
      `  ${f.path}  ${green(`+${f.added}`)} ${red(`−${f.removed}`)}${f.status === "modified" ? "" : dim(` (${f.status})`)}`,
  );
}

/** A unified diff in color: file headers bold, hunks cyan, additions green, removals red. */
export function colorDiff(changes: readonly TaskFileChange[]): string[] {
  const lines: string[] = [];
  for (const change of changes) {
    for (const raw of change.patch.replace(/\n$/, "").split("\n")) {
      const line = sanitize(raw);
      if (line.startsWith("+++") || line.startsWith("---") || line.startsWith("diff "))
        lines.push(bold(line));
      else if (line.startsWith("@@")) lines.push(cyan(line));
      else if (line.startsWith("+")) lines.push(green(line));
      else if (line.startsWith("-")) lines.push(red(line));
      else lines.push(line);
    }
  }
  return lines;
}

/** The first non-empty line of an answer, without Markdown heading marks (the table's cell). */
export function firstLine(text: string): string {
  const line = text.split("\n").find((l) => l.trim() !== "") ?? "";
  return line.replace(/^#+\s*/, "").trim();
}

/** `1 file`, `3 files`. */
export function fileCount(n: number): string {
  return `${n} file${n === 1 ? "" : "s"}`;
}

/**
 * `/diff K` for variants: the pager's head and rows (the same pager as `/diff`: Space/PgDn, PgUp,
 * q closes), so nothing typed to leave it lands in the composer.
 */
export function variantDiffPage(
  k: number,
  variant: { state: string; temperature: number },
  changes: readonly TaskFileChange[],
  width: number,
): { head: string; rows: string[]; offset: number } {
  const rows = changes.length === 0 ? [dim("  no changes")] : colorDiff(changes);
  return {
    head:
      bold(`variant ${k}`) +
      dim(
        ` · ${variant.state} · temperature ${variant.temperature} · ${fileCount(changes.length)} · q closes`,
      ),
    rows: rows.flatMap((row) => hardWrap(row, width)),
    offset: 0,
  };
}

/** Said when a message would discard variants still waiting for `/pick K`: it is sent on a second Enter. */
export function discardQuestion(count: number): string {
  return (
    `the ${count} variants wait for /pick K (/diff K shows one): Enter again sends this message ` +
    "and discards them"
  );
}
