#!/usr/bin/env node
// Thin launcher: the CLI is built by `npm install` (the `prepare` script) into dist/: one bundle for
// the start path (dist/bundle, scripts/bundle.mjs), else the per-module build (dist/cli).
import { existsSync } from "node:fs";

const bundled = new URL("../dist/bundle/main.js", import.meta.url);
import(existsSync(bundled) ? bundled.href : "../dist/cli/main.js").catch((error) => {
  if (error && error.code === "ERR_MODULE_NOT_FOUND") {
    console.error("spark: dist/ is missing. Run `npm install` (or `npm run build`) in the repository first.");
    process.exit(1);
  }
  throw error;
});
