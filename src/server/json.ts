/**
 * JSON from clients, parsed once at the edge (HTTP bodies and WebSocket frames alike).
 *
 * `JSON.parse` itself is iterative and takes any depth, but much of what runs afterwards recurses
 * (`JSON.stringify` of an event that carries the value back, schema validation), so a few thousand
 * levels of `[[[…]]]` in 10 KB would overflow the stack far from the edge. Nesting is bounded here,
 * before anything else sees the value, and a too-deep value is a 400 that names the top-level field.
 */
import { SparkError } from "../protocol/errors.js";

/**
 * Deepest nesting accepted, counting the outer object as 1. Generous for real requests (a tool's
 * JSON schema rarely passes 20 levels), and far from the depths at which recursion overflows.
 */
export const MAX_JSON_DEPTH = 128;

/** Parses client JSON; throws a 400 `invalid_json` or `nesting_too_deep` (`what` names the source). */
export function parseClientJson(text: string, what: "request body" | "frame"): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw SparkError.invalid(
      `The ${what} is not valid JSON (${(error as Error).message}).`,
      null,
      "invalid_json",
    );
  }
  // The text is scanned first (linear, strings skipped natively): walking the parsed value cost
  // more than parsing it for frames carrying a coding agent's tool schemas. Only a text that is too
  // deep is walked, to name the field.
  const path = textTooDeep(text, MAX_JSON_DEPTH) ? tooDeep(value, MAX_JSON_DEPTH) : undefined;
  if (path !== undefined) {
    const field = typeof path[0] === "string" ? path[0] : null;
    throw SparkError.invalid(
      `The ${what} nests JSON deeper than ${MAX_JSON_DEPTH} levels${field ? ` in '${field.slice(0, 64)}'` : ""}.`,
      field,
      "nesting_too_deep",
    );
  }
  return value;
}

/**
 * Whether valid JSON `text` nests arrays and objects more than `limit` levels deep: brackets are
 * counted outside strings, and strings are skipped with `indexOf` (escaped quotes included).
 */
function textTooDeep(text: string, limit: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code === 34) {
      // A string: its closing quote is the next one not escaped by an odd run of backslashes.
      for (;;) {
        const quote = text.indexOf('"', i + 1);
        if (quote === -1) return false;
        let backslashes = 0;
        while (text.charCodeAt(quote - 1 - backslashes) === 92) backslashes++;
        i = quote;
        if (backslashes % 2 === 0) break;
      }
    } else if (code === 123 || code === 91) {
      if (++depth > limit) return true;
    } else if (code === 125 || code === 93) depth--;
  }
  return false;
}

/**
 * The path to the first value nested more than `limit` levels deep, or undefined. Recursion is
 * safe here: it never goes deeper than `limit` frames.
 */
function tooDeep(value: unknown, limit: number): (string | number)[] | undefined {
  if (typeof value !== "object" || value === null) return undefined;
  if (limit === 0) return [];
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const path = tooDeep(value[i], limit - 1);
      if (path) return [i, ...path];
    }
    return undefined;
  }
  for (const key in value) {
    const path = tooDeep((value as Record<string, unknown>)[key], limit - 1);
    if (path) return [key, ...path];
  }
  return undefined;
}
