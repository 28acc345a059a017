// Bundles the front end into dist/: one minified script, one stylesheet and the page. Run at
// install (the root package's `prepare`) so that `spark app` serves static files and nothing else.
import { build } from "esbuild";
import { copyFile, mkdir, rm } from "node:fs/promises";
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
await copyFile(`${here}src/style.css`, `${here}dist/app.css`);
await copyFile(`${here}index.html`, `${here}dist/index.html`);
await copyFile(`${here}favicon.svg`, `${here}dist/favicon.svg`);
const bytes = Object.values(result.metafile.outputs).reduce((sum, output) => sum + output.bytes, 0);
console.log(`web: built dist/ (app.js ${Math.round(bytes / 1024)} KiB before gzip)`);
