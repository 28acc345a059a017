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
  const path = tooDeep(value, MAX_JSON_DEPTH);
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
