/**
 * Watches a key file and calls `reload` when it may have changed. The directory is watched, not the
 * file: `spark keys` (and most editors) replace the file by renaming a new one over it, which a
 * watch on the old file would not see. Events come in bursts (write, rename, attribute change), so
 * `reload` runs once, `settleMs` after the last of them.
 */
import { watch, type FSWatcher } from "node:fs";
import { basename, dirname, resolve } from "node:path";

export function watchKeyFile(
  file: string,
  reload: () => void,
  log: (line: string) => void,
  settleMs = 50,
): () => void {
  const path = resolve(file);
  const name = basename(path);
  let timer: NodeJS.Timeout | undefined;
  let watcher: FSWatcher;
  try {
    watcher = watch(dirname(path), { persistent: false }, (_event, changed) => {
      if (changed !== null && changed !== name) return;
      clearTimeout(timer);
      timer = setTimeout(reload, settleMs);
    });
  } catch (error) {
    log(`cannot watch key file ${file} (${(error as Error).message}): restart the server to apply changes`);
    return () => {};
  }
  watcher.on("error", (error) =>
    log(`stopped watching key file ${file} (${error.message}): restart the server to apply changes`),
  );
  return () => {
    clearTimeout(timer);
    watcher.close();
  };
}
