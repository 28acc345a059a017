/**
 * What the tests run as `spark`: the CLI bundled from the current sources with the build's own
 * bundler (scripts/bundle.mjs, the start path users run), made once per state of the sources and
 * shared by every test file and every child.
 *
 * Why: `node --import tsx src/cli/main.ts` paid ~0.35 s of CPU in tsx's loader (resolving and
 * loading ~270 modules one by one) before the CLI did anything, and the suite spawns the CLI some
 * 200 times; the bundled start costs ~0.08 s. A test never runs stale code: the bundle's folder is
 * named after a hash of everything it is built from (src/, package.json, tsconfig.json, the bundler,
 * the installed packages' lock), checked again before every spawn, so an edited source makes a new
 * bundle before the next child starts.
 *
 * Layout: `dist/test-cli-<hash>/main.js`, two folders below the repository root as the bundler
 * requires (the CLI finds package.json and web/dist from there). Concurrent test files build into
 * private folders and rename; the first rename wins and the others use it. A bundle unused for an
 * hour (older sources) is removed when a new one is made.
 */
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const DIST = join(ROOT, "dist");
const PREFIX = "test-cli-";
const STALE_MS = 60 * 60 * 1000;

/** The files a bundle is made from, in a stable order. */
function inputs(): string[] {
  const sources = readdirSync(join(ROOT, "src"), { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
    .sort();
  const others = ["package.json", "tsconfig.json", "scripts/bundle.mjs", "node_modules/.package-lock.json"]
    .map((name) => join(ROOT, name))
    .filter((path) => existsSync(path));
  return [...sources, ...others];
}

let memo: { signature: string; hash: string } | undefined;

/** A hash of the inputs' contents; re-read only when a file's size or mtime (or the list) changed. */
function sourceHash(): string {
  const files = inputs();
  const signature = files
    .map((path) => {
      const stat = statSync(path);
      return `${path}\0${stat.size}\0${stat.mtimeMs}`;
    })
    .join("\n");
  if (memo?.signature === signature) return memo.hash;
  const hash = createHash("sha256");
  for (const path of files) hash.update(`${path}\0`).update(readFileSync(path)).update("\0");
  memo = { signature, hash: hash.digest("hex").slice(0, 16) };
  return memo.hash;
}

function removeOldBundles(keep: string): void {
  for (const name of readdirSync(DIST)) {
    if (!name.startsWith(PREFIX) || name === keep) continue;
    const path = join(DIST, name);
    try {
      if (Date.now() - statSync(path).mtimeMs > STALE_MS) rmSync(path, { recursive: true, force: true });
    } catch {
      // Another test file removed it first.
    }
  }
}

/**
 * The arguments for `node` that run the CLI: the bundle's entry built from the sources as they are
 * now (built first if needed), or with SPARK_TEST_FROM_SOURCE=1 the sources through tsx (slower:
 * to tell a bundling difference from a defect).
 */
export function cliArgs(): string[] {
  return process.env.SPARK_TEST_FROM_SOURCE === "1"
    ? ["--import", "tsx", join(ROOT, "src/cli/main.ts")]
    : [cliEntry()];
}

/** The path of the CLI's entry built from the sources as they are now (built first if needed). */
export function cliEntry(): string {
  const name = `${PREFIX}${sourceHash()}`;
  const folder = join(DIST, name);
  const main = join(folder, "main.js");
  if (existsSync(main)) {
    // Marks it in use, so no test file removes it as old meanwhile.
    const now = new Date();
    try {
      utimesSync(folder, now, now);
    } catch {
      // Removed meanwhile: made again below.
    }
    if (existsSync(main)) return main;
  }
  const building = join(DIST, `${name}.${process.pid}.tmp`);
  rmSync(building, { recursive: true, force: true });
  execFileSync(process.execPath, [join(ROOT, "scripts/bundle.mjs"), "--outdir", building], {
    cwd: ROOT,
    stdio: ["ignore", "ignore", "inherit"],
  });
  try {
    renameSync(building, folder);
  } catch (error) {
    // Another test file made the same bundle meanwhile: use it.
    rmSync(building, { recursive: true, force: true });
    if (!existsSync(main)) throw error;
  }
  removeOldBundles(name);
  return main;
}
