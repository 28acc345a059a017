#!/usr/bin/env node
// Thin launcher: the CLI is compiled to dist/ by `npm install` (the `prepare` script).
import("../dist/cli/main.js").catch((error) => {
  if (error && error.code === "ERR_MODULE_NOT_FOUND") {
    console.error("spark: dist/ is missing. Run `npm install` (or `npm run build`) in the repository first.");
    process.exit(1);
  }
  throw error;
});
