// Bundles the extension and vscode-languageclient into one CommonJS file, as VS Code loads it.
import { build } from "esbuild";
import { fileURLToPath, URL } from "node:url";

await build({
  entryPoints: ["src/extension.ts"],
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  external: ["vscode"],
  // The clone this .vsix is built in: with no `spark` on the PATH, the extension runs its bin/spark.js.
  define: { SPARK_PACKAGED_FROM: JSON.stringify(fileURLToPath(new URL("../..", import.meta.url))) },
  outfile: "dist/extension.js",
  minify: true,
  sourcemap: true,
  logLevel: "warning",
});
