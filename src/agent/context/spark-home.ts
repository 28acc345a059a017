/** Spark's home directory: user-wide instructions, prompts and the user config (`config.json`). */
import { homedir } from "node:os";
import { join } from "node:path";

/** `SPARK_HOME`, else `~/.spark`. */
export function sparkHome(): string {
  const fromEnv = process.env.SPARK_HOME;
  return fromEnv !== undefined && fromEnv !== "" ? fromEnv : join(homedir(), ".spark");
}
