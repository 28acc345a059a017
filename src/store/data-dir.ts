/**
 * Where Spark keeps its data (the response database, saved client sessions, the app's tasks):
 * inside Spark's one home, `SPARK_HOME` (default `~/.spark`), which also holds the user config
 * (`config.json`), prompts, the global AGENTS.md, worktrees and checkpoints. Free of native modules.
 *
 * `$SPARK_DATA_DIR` (or `--data-dir`) puts the data elsewhere. Data an earlier version left in
 * `$XDG_DATA_HOME/spark` or `~/.local/share/spark` stays where it is and is used, until
 * `SPARK_HOME/data` exists, so no saved session or stored response is lost by the move.
 */
import { existsSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";

/** `$SPARK_HOME`, else `~/.spark` (as agent/context/spark-home.ts, which the server may not import). */
function home(env: NodeJS.ProcessEnv): string {
  return env.SPARK_HOME ? env.SPARK_HOME : join(env.HOME || homedir(), ".spark");
}

/** `$SPARK_DATA_DIR`, else `SPARK_HOME/data` (or the data dir an earlier version used, while it is the only one). */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.SPARK_DATA_DIR) return env.SPARK_DATA_DIR;
  const data = join(home(env), "data");
  if (existsSync(data)) return data;
  const legacy = [
    ...(env.XDG_DATA_HOME ? [join(env.XDG_DATA_HOME, "spark")] : []),
    join(env.HOME || homedir(), ".local", "share", "spark"),
  ].find((dir) => existsSync(dir));
  return legacy ?? data;
}
