// Bundles the extension and vscode-languageclient into one CommonJS file, as VS Code loads it.
import { build } from "esbuild";

await build({
  entryPoints: ["src/extension.ts"],
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  external: ["vscode"],
  outfile: "dist/extension.js",
  minify: true,
  sourcemap: true,
  logLevel: "warning",
});
