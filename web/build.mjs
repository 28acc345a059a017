// Bundles the front end into dist/: one minified script, one stylesheet and the page. Run at
// install (the root package's `prepare`) so that `spark app` serves static files and nothing else.
import { build } from "esbuild";
import { copyFile, mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";

const here = fileURLToPath(new URL(".", import.meta.url));
await rm(`${here}dist`, { recursive: true, force: true });
await mkdir(`${here}dist`, { recursive: true });
const result = await build({
  absWorkingDir: here,
  entryPoints: ["src/main.tsx"],
  bundle: true,
  format: "esm",
  target: "es2022",
  jsx: "automatic",
  jsxImportSource: "preact",
  outfile: "dist/app.js",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  metafile: true,
  logLevel: "warning",
});
// The stylesheet is src/styles/, a file per part of the page, joined in this order: the cascade's
// (where two rules tie, the later file's wins), so a rule goes in the file of its part, at its end.
const styles = [
  "theme",
  "layout",
  "transcript",
  "composer",
  "highlight",
  "narrow",
  "images",
  "variants",
  "workspace",
  "vscode",
];
const css = await Promise.all(styles.map((name) => readFile(`${here}src/styles/${name}.css`, "utf8")));
await writeFile(`${here}dist/app.css`, css.join("\n"));
await copyFile(`${here}index.html`, `${here}dist/index.html`);
await copyFile(`${here}favicon.svg`, `${here}dist/favicon.svg`);
const bytes = Object.values(result.metafile.outputs).reduce((sum, output) => sum + output.bytes, 0);
console.log(`web: built dist/ (app.js ${Math.round(bytes / 1024)} KiB before gzip)`);
