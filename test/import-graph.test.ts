/**
 * The source's import graph: every relative import of `src/` and `web/src/` (static, type-only and
 * dynamic `import()` alike) is an edge. No file reaches itself again (a cycle inside one folder,
 * such as config.ts ↔ setting-names.ts was, escapes a per-folder lint rule), and no folder of `src/`
 * imports one above it (lint checks static imports as they are written; this checks `import()` too,
 * which is how the TUI reached up into the CLI).
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

/**
 * The folders of `src/`, bottom up, in two stacks that meet only at the top (the CLI wires them):
 * the server's and the clients'. A folder imports folders lower in its own stack; folders of one
 * rank do not import each other. The wire shapes (protocol) are the bottom of both.
 */
const SERVER_STACK = [
  ["protocol"],
  ["engine"],
  ["router"],
  ["core"],
  ["engines", "store"],
  ["server"],
  ["cli"],
];
const CLIENT_STACK = [["protocol"], ["agent"], ["settings"], ["client"], ["lsp", "app", "tui"], ["cli"]];
/** Imports across the stacks or a rank, each with its reason. */
const ALLOWED = new Map([
  ["client -> store/data-dir.ts", "where Spark's data lives, the same for the server and its clients"],
  ["app -> server/origin-policy.ts", "the app guards its socket with the server's origin policy"],
  ["app -> server/request-target.ts", "and parses request targets as the server does"],
]);

function rankIn(stack: string[][], folder: string): number {
  return stack.findIndex((rank) => rank.includes(folder));
}

/** Why an import from `from` to `to` (paths under src/) goes up or across, or undefined when it goes down. */
export function upwardImport(from: string, to: string): string | undefined {
  const [fromFolder = "", toFolder = ""] = [from.split("/")[0], to.split("/")[0]];
  if (fromFolder === toFolder || !to.includes("/")) return undefined;
  if (ALLOWED.has(`${fromFolder} -> ${to}`)) return undefined;
  for (const stack of [SERVER_STACK, CLIENT_STACK]) {
    const [a, b] = [rankIn(stack, fromFolder), rankIn(stack, toFolder)];
    if (a >= 0 && b >= 0 && b < a) return undefined;
  }
  return `src/${from} imports src/${to}: ${toFolder}/ is not below ${fromFolder}/`;
}

test("the layer check lets an import go down its stack, never up or across", () => {
  assert.equal(upwardImport("cli/main.ts", "tui/app.ts"), undefined);
  assert.equal(upwardImport("tui/app.ts", "client/agent-runtime.ts"), undefined);
  assert.equal(upwardImport("server/http-server.ts", "core/keys.ts"), undefined);
  assert.match(upwardImport("tui/app.ts", "cli/main.ts") ?? "", /cli\/ is not below tui\//);
  assert.match(upwardImport("client/agent-runtime.ts", "server/http-server.ts") ?? "", /not below/);
  assert.match(upwardImport("lsp/server.ts", "tui/app.ts") ?? "", /not below/);
});

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

test("no folder of src/ imports one above it", () => {
  const src = join(root, "src");
  const upward = sourceFiles(src).flatMap((file) =>
    importsOf(file).flatMap((target) => upwardImport(relative(src, file), relative(src, target)) ?? []),
  );
  assert.deepEqual(upward, []);
});
