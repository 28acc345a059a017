/** Small statistics and formatting helpers for the benchmark. */

export interface Summary {
  n: number;
  p50: number;
  p90: number;
  min: number;
  max: number;
}

/** Nearest-rank percentile (`p` in 0..1) of unsorted values. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length, Math.max(1, Math.ceil(p * sorted.length)));
  return sorted[rank - 1]!;
}

export function summarize(values: readonly number[]): Summary {
  return {
    n: values.length,
    p50: percentile(values, 0.5),
    p90: percentile(values, 0.9),
    min: Math.min(...values),
    max: Math.max(...values),
  };
}

/** A number with `digits` decimals and thousands separators. */
export function fmt(value: number, digits = 0): string {
  if (!Number.isFinite(value)) return "n/a";
  return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Milliseconds, with more decimals for small values. */
export function ms(value: number): string {
  return `${fmt(value, value < 10 ? 3 : value < 100 ? 2 : 1)} ms`;
}

/** Renders rows as a left-aligned text table with a header rule. */
export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = header.map((title, column) =>
    Math.max(title.length, ...rows.map((row) => (row[column] ?? "").length)),
  );
  const line = (cells: readonly string[]): string =>
    cells
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join("  ")
      .trimEnd();
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

/** One line of the summary table. */
export interface FigureRow {
  figure: string;
  spark: string;
  reference: string;
  comparison: string;
  goal: string;
  /** Whether the goal was met; undefined when the figure was skipped. */
  met: boolean | undefined;
}

export interface FigureResult {
  row: FigureRow;
  /** Raw figures for `--json`. */
  data: Record<string, unknown>;
}

export type Log = (line: string) => void;
