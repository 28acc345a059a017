#!/usr/bin/env node
/**
 * Bundles the CLI's start path into dist/bundle/ with esbuild (part of `npm run build`, after tsc):
 * `main.js` (what bin/spark.js runs) and `search-worker.js` (the search tool's worker thread), plus
 * the chunks they load on demand.
 *
 * Why: started from dist/cli (tsc's output, one file per module), `spark exec` resolved, read and
 * compiled 266 module files (its own and its packages': zod alone is dozens) before it sent anything.
 * Bundled, the same start loads 36 files: the start path, and one chunk per lazily imported part
 * (each `await import()` stays a split point: the server, the llama engine, the TUI's Markdown, MCP);
 * 28 (0.50 MB) since the tools' code, the TOML parser and the built-ins' chunks left the start path.
 * Figure 34 in BENCHMARKS.md measures it.
 *
 * Layout contract: everything lands flat in dist/bundle/, two folders below the repository root
 * like every module of dist/<layer>/, so the paths modules compute from `import.meta.url`
 * (`../../package.json`, `../../web/dist/`, `./search-worker.js`) still resolve. Packages with
 * native addons or files they find at run time (node-llama-cpp, better-sqlite3, pg) stay external
 * and load from node_modules. CommonJS packages inside the bundle get a real `require` (the banner),
 * which esbuild's ESM output does not have on its own.
 *
 * `node scripts/bundle.mjs --outdir dist/NAME` writes the same bundle elsewhere (the tests' CLI
 * entry, test/helpers/cli-entry.ts); the folder must also be two below the repository root.
 */
import { build } from "esbuild";
import { readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const require = createRequire(import.meta.url);

/**
 * Spark's own static imports of built-in modules (`import { x } from "node:fs"` in src/), rewritten
 * in place to `const { x } = require("node:fs")` before esbuild sees the file. Left to
 * `builtinsViaRequire` below, each built-in would be one small module shared by many chunks, so
 * esbuild gave each its own chunk file: seven of the 34 files `spark exec` loaded before its first
 * request were such chunks, each costing the ESM loader a resolve, a read and a link (figure 34).
 * Type-only imports are left to TypeScript; anything the pattern does not match (a re-export, a
 * package's import) still goes through `builtinsViaRequire`.
 */
const STATIC_BUILTIN_IMPORT = /^import\s+(?!type\s)([^;]*?)\s+from\s+"(node:[^"]+)";/gm;

/** `import CLAUSE from "SPEC";` as `const` declarations of the same names from `require(SPEC)`. */
function requireDeclarations(clause, spec) {
  const call = `require(${JSON.stringify(spec)})`;
  const braces = /\{([^}]*)\}/.exec(clause);
  const head = clause
    .replace(/,?\s*\{[^}]*\}/, "")
    .trim()
    .replace(/,$/, "")
    .trim();
  const declarations = [];
  let from = call;
  if (head !== "") {
    // `import * as fs` and `import fs` alike: a built-in's exports object.
    const name = head.replace(/^\*\s+as\s+/, "");
    declarations.push(`const ${name} = ${call};`);
    from = name;
  }
  const names = (braces?.[1] ?? "")
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "" && !name.startsWith("type "))
    .map((name) => name.replace(/^(\S+)\s+as\s+(\S+)$/, "$1: $2"));
  if (names.length > 0) declarations.push(`const { ${names.join(", ")} } = ${from};`);
  return declarations.join(" ");
}

const ownBuiltinsViaRequire = {
  name: "own-builtins-via-require",
  setup(build) {
    build.onLoad({ filter: /[\\/]src[\\/].*\.tsx?$/ }, (args) => ({
      contents: readFileSync(args.path, "utf8").replace(STATIC_BUILTIN_IMPORT, (_, clause, spec) =>
        requireDeclarations(clause, spec),
      ),
      loader: args.path.endsWith(".tsx") ? "tsx" : "ts",
    }));
  },
};

/**
 * Node's built-in modules, statically imported, become `require` calls with one export per name
 * used: an ESM `import … from "node:fs"` makes Node build a module facade over every export (for
 * node:fs that reads its lazy getters, loading its streams), which cost `spark exec` ~15 ms of CPU
 * before its first request. Unused names are dropped (each is a pure expression).
 */
const builtinsViaRequire = {
  name: "builtins-via-require",
  setup(build) {
    build.onResolve({ filter: /^node:/ }, (args) =>
      args.kind === "import-statement" ? { path: args.path, namespace: "builtin" } : undefined,
    );
    build.onLoad({ filter: /.*/, namespace: "builtin" }, (args) => {
      const names = Object.keys(require(args.path)).filter(
        (name) => /^[A-Za-z_$][\w$]*$/.test(name) && name !== "default",
      );
      const lines = [`const m = require(${JSON.stringify(args.path)});`, "export default m;"];
      for (const name of names) lines.push(`export const ${name} = /* @__PURE__ */ (() => m.${name})();`);
      return { contents: lines.join("\n"), loader: "js" };
    });
  },
};

const root = fileURLToPath(new URL("..", import.meta.url));
const outdirFlag = process.argv.indexOf("--outdir");
const outdir = outdirFlag > 0 ? resolve(root, process.argv[outdirFlag + 1] ?? "") : `${root}dist/bundle`;
if (dirname(dirname(outdir)) !== resolve(root)) throw new Error(`--outdir must be two folders below ${root}`);

rmSync(outdir, { recursive: true, force: true });
await build({
  absWorkingDir: root,
  entryPoints: { main: "src/cli/main.ts", "search-worker": "src/agent/files/search-worker.ts" },
  outdir,
  bundle: true,
  splitting: true,
  format: "esm",
  platform: "node",
  target: "node20",
  chunkNames: "[name]-[hash]",
  external: ["node-llama-cpp", "better-sqlite3", "pg", "pg-native"],
  banner: {
    js: "import { createRequire as __sparkCreateRequire } from 'node:module'; const require = __sparkCreateRequire(import.meta.url);",
  },
  plugins: [ownBuiltinsViaRequire, builtinsViaRequire],
  sourcemap: "linked",
  logLevel: "warning",
});
