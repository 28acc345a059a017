import type { z } from "zod";
import { shown, SparkError } from "../protocol/errors.js";

/** OpenAI-style parameter path: `input[0].content`. */
function paramPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const key of path) {
    if (typeof key === "number") out += `[${key}]`;
    else out += out ? `.${String(key)}` : String(key);
  }
  return out;
}

/** Validate a parsed JSON body, turning the first zod issue into a 400 with `param`. */
export function validateBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw SparkError.invalid("The request body must be a JSON object.", null, "invalid_body");
  }
  const result = schema.safeParse(body);
  if (result.success) return result.data;
  const issue = result.error.issues[0];
  // Paths and messages can carry client-chosen keys: bounded, so an error never echoes a megabyte.
  const param = issue ? shown(paramPath(issue.path), 200) : null;
  const detail = issue ? shown(issue.message, 500) : "invalid value";
  const where = param ? ` for '${param}'` : "";
  throw SparkError.invalid(`Invalid value${where}: ${detail}.`, param || null, "invalid_value");
}
