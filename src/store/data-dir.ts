/** Where Spark keeps its data (the response database, saved client sessions). Free of native modules. */
import { homedir } from "node:os";
import { join } from "node:path";

/** `$SPARK_DATA_DIR`, else `$XDG_DATA_HOME/spark`, else `~/.local/share/spark`. */
export function defaultDataDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.SPARK_DATA_DIR) return env.SPARK_DATA_DIR;
  if (env.XDG_DATA_HOME) return join(env.XDG_DATA_HOME, "spark");
  return join(env.HOME || homedir(), ".local", "share", "spark");
}
