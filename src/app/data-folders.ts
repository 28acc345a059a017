/**
 * The app's folders in Spark's own data directory (`DATA_DIR/app/tasks`, `DATA_DIR/sessions`), made
 * ready at start. Something of the wrong kind where a folder belongs (a file, a FIFO, a dangling
 * link: left by a crash, a tool, a user) does not stop the app: it is moved aside, beside itself as
 * `NAME.not-a-folder-TIMESTAMP` (nothing is deleted), a fresh folder takes its place, and `report`
 * says so with both paths. A link to a folder is a folder (a data dir on another disk).
 *
 * Only Spark's own data is touched here (never the workspace, nothing a model or a task chooses),
 * so it uses node:fs directly.
 */
import { lstatSync, mkdirSync, renameSync, statSync } from "node:fs";
import { join, relative, sep } from "node:path";

/** Makes `dataDir/sub` (each folder on the way) a folder; moves aside what is in the way. */
export function prepareFolder(dataDir: string, sub: string, report: (problem: string) => void): string {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  let path = dataDir;
  for (const part of relative(dataDir, join(dataDir, sub)).split(sep)) {
    path = join(path, part);
    if (isFolder(path)) continue;
    if (exists(path)) {
      const aside = `${path}.not-a-folder-${new Date().toISOString().replace(/[-:.]/g, "")}`;
      renameSync(path, aside);
      report(
        `${path} was ${kindOf(aside)}, not a folder: moved aside to ${aside}, and a new folder made in its place`,
      );
    }
    mkdirSync(path, { mode: 0o700 });
  }
  return path;
}

function isFolder(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

function exists(path: string): boolean {
  try {
    lstatSync(path);
    return true;
  } catch {
    return false;
  }
}

function kindOf(path: string): string {
  const stats = lstatSync(path);
  if (stats.isSymbolicLink()) return "a link to no folder";
  if (stats.isFIFO()) return "a FIFO";
  if (stats.isSocket()) return "a socket";
  if (stats.isFile()) return "a file";
  return "something else";
}
