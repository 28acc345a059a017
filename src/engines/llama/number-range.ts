/**
 * Numbers between bounds as a grammar: the JSON text of every integer (or number) in a range, and
 * of nothing else, written as digit patterns (the way llama.cpp's JSON-schema converter does it).
 *
 * - Integers: bounds anywhere in ±(10^15 − 1), the magnitude Spark's integer rule allows (below
 *   2^53, so every integer written survives a JSON parser unchanged). Written without exponent,
 *   leading zeros or `-0`.
 * - Numbers (with a fraction): integer bounds only (`minimum: 0`, `exclusiveMaximum: 100`), no
 *   exponent. A bound with a fraction (`minimum: 0.5`) is refused by the caller.
 *
 * The patterns are built as a small tree (`Pattern`) rendered as GBNF for the grammar, and as a
 * `RegExp` for tests, so the same tree can be checked against numbers directly.
 */

/** The largest magnitude of an integer Spark's grammars write (15 digits). */
export const MAX_MAGNITUDE = 10 ** 15 - 1;

export type Pattern =
  | { kind: "literal"; text: string }
  | { kind: "digits"; from: number; to: number; min: number; max: number }
  | { kind: "sequence"; items: Pattern[] }
  | { kind: "choice"; items: Pattern[] };

const literal = (text: string): Pattern => ({ kind: "literal", text });
const digits = (from: number, to: number, min = 1, max = min): Pattern => ({
  kind: "digits",
  from,
  to,
  min,
  max,
});
const sequence = (...items: Pattern[]): Pattern => ({ kind: "sequence", items });
const choice = (items: Pattern[]): Pattern => (items.length === 1 ? items[0]! : { kind: "choice", items });

/** Integers `lo`…`hi` (both included) of the same number of digits, as patterns. */
function sameLength(lo: string, hi: string): Pattern[] {
  if (lo === hi) return [literal(lo)];
  let common = 0;
  while (lo[common] === hi[common]) common++;
  const prefix = lo.slice(0, common);
  const rest = lo.length - common - 1;
  const low = Number(lo[common]);
  const high = Number(hi[common]);
  const out: Pattern[] = [];
  const withPrefix = (pattern: Pattern): Pattern => (prefix ? sequence(literal(prefix), pattern) : pattern);
  if (rest === 0) return [withPrefix(digits(low, high))];
  // From lo up to `low` followed by nines, the whole digits between, then `high` followed by zeros up to hi.
  for (const suffix of atLeast(lo.slice(common + 1)))
    out.push(withPrefix(sequence(literal(String(low)), suffix)));
  if (high - low > 1) out.push(withPrefix(sequence(digits(low + 1, high - 1), digits(0, 9, rest))));
  for (const suffix of atMost(hi.slice(common + 1)))
    out.push(withPrefix(sequence(literal(String(high)), suffix)));
  return out;
}

/** Digit strings of `text.length` digits ≥ `text`. */
function atLeast(text: string): Pattern[] {
  if (/^0*$/.test(text)) return [digits(0, 9, text.length)];
  const first = Number(text[0]);
  const rest = text.length - 1;
  if (rest === 0) return [digits(first, 9)];
  const out = atLeast(text.slice(1)).map((suffix) => sequence(literal(String(first)), suffix));
  if (first < 9) out.push(sequence(digits(first + 1, 9), digits(0, 9, rest)));
  return out;
}

/** Digit strings of `text.length` digits ≤ `text`. */
function atMost(text: string): Pattern[] {
  if (/^9*$/.test(text)) return [digits(0, 9, text.length)];
  const first = Number(text[0]);
  const rest = text.length - 1;
  if (rest === 0) return [digits(0, first)];
  const out: Pattern[] = [];
  if (first > 0) out.push(sequence(digits(0, first - 1), digits(0, 9, rest)));
  out.push(...atMost(text.slice(1)).map((suffix) => sequence(literal(String(first)), suffix)));
  return out;
}

/** Non-negative integers `lo`…`hi`, without leading zeros. */
function naturals(lo: number, hi: number): Pattern[] {
  const out: Pattern[] = [];
  for (let length = String(lo).length; length <= String(hi).length; length++) {
    const from = Math.max(lo, length === 1 ? 0 : 10 ** (length - 1));
    const to = Math.min(hi, 10 ** length - 1);
    if (from <= to) out.push(...sameLength(String(from), String(to)));
  }
  return out;
}

/** The JSON integers `lo`…`hi` (inclusive; clamped to ±MAX_MAGNITUDE), or undefined when there are none. */
export function integerRange(lo: number, hi: number): Pattern | undefined {
  lo = Math.max(lo, -MAX_MAGNITUDE);
  hi = Math.min(hi, MAX_MAGNITUDE);
  if (lo > hi) return undefined;
  const out: Pattern[] = [];
  if (lo < 0) out.push(sequence(literal("-"), choice(naturals(Math.max(1, -hi), -lo))));
  if (hi >= 0) out.push(...naturals(Math.max(0, lo), hi));
  return choice(out);
}

const FRACTION = sequence(literal("."), digits(0, 9, 1, 16));
/** A fraction that is not zero: some digit after the point is not 0. */
const NONZERO_FRACTION = sequence(literal("."), digits(0, 9, 0, 15), digits(1, 9), digits(0, 9, 0, 15));
const ZERO_FRACTION = sequence(literal("."), digits(0, 0, 1, 16));

/** An optional fraction of the kind given. */
function withFraction(whole: Pattern[], fraction: "any" | "zero" | "nonzero"): Pattern[] {
  if (whole.length === 0) return [];
  const part = fraction === "any" ? FRACTION : fraction === "zero" ? ZERO_FRACTION : NONZERO_FRACTION;
  const w = choice(whole);
  return fraction === "nonzero" ? [sequence(w, part)] : [w, sequence(w, part)];
}

export interface Bound {
  value: number;
  exclusive: boolean;
}

/**
 * JSON numbers (fraction allowed, no exponent) between integer bounds; each bound may be absent
 * (±MAX_MAGNITUDE then, as for integers) or exclusive. Undefined when no number fits.
 */
export function numberRange(lower: Bound | undefined, upper: Bound | undefined): Pattern | undefined {
  const lo = lower ?? { value: -MAX_MAGNITUDE, exclusive: false };
  const hi = upper ?? { value: MAX_MAGNITUDE, exclusive: false };
  if (lo.value > hi.value || (lo.value === hi.value && (lo.exclusive || hi.exclusive))) return undefined;
  const out: Pattern[] = [];
  // Values ≥ 0: whole part w, fraction f. Values < 0: "-" then a magnitude m = w.f > 0.
  if (hi.value >= 0 && !(hi.value === 0 && hi.exclusive)) {
    const from = Math.max(lo.value, 0);
    // w in [from, hi) takes any fraction, except w = lo when lo is exclusive (nonzero fraction only).
    const inside = naturals(from + (lo.value >= 0 && lo.exclusive ? 1 : 0), hi.value - 1);
    out.push(...withFraction(inside, "any"));
    if (lo.value >= 0 && lo.exclusive && lo.value < hi.value)
      out.push(...withFraction([literal(String(lo.value))], "nonzero"));
    // w = hi: only hi itself (no fraction, or zeros), unless excluded.
    if (!hi.exclusive && hi.value >= from && !(lo.exclusive && lo.value === hi.value))
      out.push(...withFraction([literal(String(hi.value))], "zero"));
  }
  if (lo.value < 0) {
    // m = -value: m ≤ -lo (< when exclusive), m ≥ -hi (> when exclusive) when hi < 0, else m > 0.
    const mLo: Bound =
      hi.value < 0 ? { value: -hi.value, exclusive: hi.exclusive } : { value: 0, exclusive: true };
    const mHi: Bound = { value: -lo.value, exclusive: lo.exclusive };
    const magnitudes = numberRange(mLo, mHi);
    if (magnitudes) out.push(sequence(literal("-"), magnitudes));
  }
  return out.length > 0 ? choice(out) : undefined;
}

/** The pattern as a GBNF expression. */
export function toGbnf(pattern: Pattern): string {
  switch (pattern.kind) {
    case "literal":
      return JSON.stringify(pattern.text);
    case "digits": {
      const set = pattern.from === pattern.to ? `[${pattern.from}]` : `[${pattern.from}-${pattern.to}]`;
      if (pattern.min === 1 && pattern.max === 1) return set;
      return pattern.min === pattern.max ? `${set}{${pattern.min}}` : `${set}{${pattern.min},${pattern.max}}`;
    }
    case "sequence":
      return `(${pattern.items.map(toGbnf).join(" ")})`;
    case "choice":
      return `(${pattern.items.map(toGbnf).join(" | ")})`;
  }
}

/** The pattern as an anchored regular expression (for tests). */
export function toRegExp(pattern: Pattern): RegExp {
  const render = (p: Pattern): string => {
    switch (p.kind) {
      case "literal":
        return p.text.replace(/[.-]/g, "\\$&");
      case "digits": {
        const set = `[${p.from}-${p.to}]`;
        return p.min === 1 && p.max === 1 ? set : `${set}{${p.min},${p.max}}`;
      }
      case "sequence":
        return `(?:${p.items.map(render).join("")})`;
      case "choice":
        return `(?:${p.items.map(render).join("|")})`;
    }
  };
  return new RegExp(`^${render(pattern)}$`);
}
