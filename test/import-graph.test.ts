/**
 * The source's import graph has no cycles: every relative import of `src/` and `web/src/` (static,
 * type-only and dynamic `import()` alike) is an edge, and no file reaches itself again. Lint
 * (eslint.config.js) keeps each layer from importing the layers above it; this catches what a
 * per-folder rule cannot, a cycle inside one folder (config.ts ↔ setting-names.ts was one).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, existsSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import ts from "typescript";

const root = resolve(import.meta.dirname, "..");

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "node_modules" ? [] : sourceFiles(path);
    return /\.tsx?$/.test(entry.name) && !entry.name.endsWith(".d.ts") ? [path] : [];
  });
}

/** The files `file` imports relatively, resolved to the source files (`./x.js` is `./x.ts` or `./x.tsx`). */
function importsOf(file: string): string[] {
  const { importedFiles } = ts.preProcessFile(readFileSync(file, "utf8"), true, true);
  return importedFiles.flatMap(({ fileName }) => {
    if (!fileName.startsWith(".")) return [];
    const target = resolve(dirname(file), fileName);
    const stem = target.replace(/\.(m?js|tsx?)$/, "");
    const found = [`${stem}.ts`, `${stem}.tsx`, join(target, "index.ts")].find((path) => existsSync(path));
    return found ? [found] : [];
  });
}

/** Strongly connected components of more than one file, or of a file importing itself (Tarjan). */
export function cyclesOf(graph: Map<string, string[]>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const cycles: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter);
    counter++;
    stack.push(node);
    onStack.add(node);
    for (const next of graph.get(node) ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (onStack.has(next)) {
        low.set(node, Math.min(low.get(node)!, index.get(next)!));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      if (component.length > 1 || (graph.get(node) ?? []).includes(node)) cycles.push(component.sort());
    }
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return cycles;
}

test("the finder reports a cycle through three files and none in a chain", () => {
  const cycle = new Map([
    ["a", ["b"]],
    ["b", ["c"]],
    ["c", ["a"]],
    ["d", ["a"]],
  ]);
  assert.deepEqual(cyclesOf(cycle), [["a", "b", "c"]]);
  const chain = new Map([
    ["a", ["b"]],
    ["b", ["c"]],
    ["c", []],
  ]);
  assert.deepEqual(cyclesOf(chain), []);
});

test("no import cycles in src/ and web/src/", () => {
  const files = [...sourceFiles(join(root, "src")), ...sourceFiles(join(root, "web", "src"))];
  assert.ok(files.length > 100, `only ${files.length} source files found`);
  const graph = new Map(files.map((file) => [file, importsOf(file)]));
  const cycles = cyclesOf(graph).map((cycle) => cycle.map((file) => relative(root, file)));
  assert.deepEqual(cycles, [], `import cycles:\n${cycles.map((cycle) => cycle.join(" → ")).join("\n")}`);
});
