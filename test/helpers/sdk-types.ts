/**
 * The `openai` package's own types as a test's reference: the top-level properties of an interface
 * in one of its `.d.ts` files, so a parameter a newer SDK adds fails a classification test until it
 * is classified.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

/** The top-level properties of `interface name` (its own, not those it extends) in `file`. */
export function sdkParameters(file: string, name: string): string[] {
  // The package's main entry sits at its root (its exports hide package.json).
  const root = dirname(createRequire(import.meta.url).resolve("openai"));
  const source = readFileSync(join(root, file), "utf8");
  const start = source.search(new RegExp(`export interface ${name}( extends [\\w.]+)? \\{`));
  assert.ok(start >= 0, `${name} in ${file}`);
  let depth = 0;
  let end = start;
  for (let i = start; i < source.length; i++) {
    if (source[i] === "{") depth++;
    else if (source[i] === "}" && --depth === 0) {
      end = i;
      break;
    }
  }
  return [...source.slice(start, end).matchAll(/\n {4}([a-z_]+)\??:/g)].map((match) => match[1]!);
}
