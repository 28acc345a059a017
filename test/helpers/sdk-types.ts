/**
 * The `openai` package's own types as a test's reference: the top-level properties of an interface
 * in one of its `.d.ts` files, so a parameter a newer SDK adds fails a classification test until it
 * is classified. Read from the `openai` package the project depends on and, where it brings a newer
 * one of its own, from the copy `@openai/agents` uses (openai 7): both are clients of Spark.
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);

/** The roots of the `openai` packages whose types are read (each package's main entry sits at its root). */
function sdkRoots(): string[] {
  const roots = [dirname(require.resolve("openai"))];
  try {
    const agents = createRequire(require.resolve("@openai/agents-openai"));
    const nested = dirname(agents.resolve("openai"));
    if (!roots.includes(nested)) roots.push(nested);
  } catch {
    // No Agents SDK installed: the project's own openai package is the reference.
  }
  return roots;
}

function interfaceParameters(source: string, name: string): string[] | undefined {
  const start = source.search(new RegExp(`export interface ${name}( extends [\\w.]+)? \\{`));
  if (start < 0) return undefined;
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

/**
 * The top-level properties of `interface name` (its own, not those it extends) in `file`, in every
 * `openai` package read (a union: what any of them can send).
 */
export function sdkParameters(file: string, name: string): string[] {
  const all = new Set<string>();
  sdkRoots().forEach((root, index) => {
    const path = join(root, file);
    const found = existsSync(path) ? interfaceParameters(readFileSync(path, "utf8"), name) : undefined;
    if (index === 0) assert.ok(found, `${name} in ${file}`);
    for (const parameter of found ?? []) all.add(parameter);
  });
  return [...all];
}
