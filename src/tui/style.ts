/** Colors and the status line's pieces. Colors are off when NO_COLOR is set. */

const enabled = !process.env.NO_COLOR;
const code =
  (open: number, close: number) =>
  (text: string): string =>
    enabled ? `\x1b[${open}m${text}\x1b[${close}m` : text;

export const bold = code(1, 22);
export const dim = code(2, 22);
export const red = code(31, 39);
export const green = code(32, 39);
export const yellow = code(33, 39);
export const blue = code(34, 39);
export const magenta = code(35, 39);
export const cyan = code(36, 39);
export const inverse = code(7, 27);

/** The band a context fill falls in: 0–30%, 30–60%, 60–80%, 80–100%. */
export function contextBand(fraction: number): "low" | "medium" | "high" | "critical" {
  if (fraction < 0.3) return "low";
  if (fraction < 0.6) return "medium";
  if (fraction < 0.8) return "high";
  return "critical";
}

const BAND_COLOR = { low: green, medium: cyan, high: yellow, critical: red } as const;

function compact(n: number): string {
  // From 9950 on, one decimal would round up to "10.0k": switch to whole thousands there.
  return n >= 9_950 ? `${Math.round(n / 1000)}k` : n >= 1000 ? `${(n / 1000).toFixed(1)}k` : String(n);
}

/** `ctx ▕████░░░░░░▏ 38% 3.1k/8.2k`, colored by band. */
export function contextMeter(used: number, window: number, width = 10): string {
  const fraction = window > 0 ? Math.min(1, used / window) : 0;
  const filled = Math.round(fraction * width);
  const color = BAND_COLOR[contextBand(fraction)];
  const bar = "█".repeat(filled) + "░".repeat(width - filled);
  return `ctx ${color(bar)} ${color(`${Math.round(fraction * 100)}%`)} ${dim(`${compact(used)}/${compact(window)}`)}`;
}

export function tierLabel(model: string): string {
  if (model === "spark") return bold(yellow("⚡ spark"));
  if (model === "deep") return bold(blue("◆ deep"));
  if (model === "auto") return bold(magenta("⟳ auto"));
  return bold(model);
}
