/**
 * Writes to Spark's own data (SPARK_HOME, the data directory, scratch folders Spark made for itself):
 * paths no model, repository or task names. Anything else goes through the confined layer
 * (confined.ts), never through these.
 */
import { randomBytes } from "node:crypto";
import { chmod, mkdir, rename, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";

/**
 * Writes `content` to `absPath` atomically: into a temporary file in the same directory, then renamed
 * over the target, so readers never see a half-written file. Parent directories are created as needed;
 * an existing file keeps its permission bits.
 */
export async function writeFileAtomic(absPath: string, content: string | Uint8Array): Promise<void> {
  const dir = path.dirname(absPath);
  await mkdir(dir, { recursive: true });
  let mode: number | undefined;
  try {
    mode = (await stat(absPath)).mode & 0o7777;
  } catch {
    mode = undefined;
  }
  const temp = path.join(
    dir,
    `.${path.basename(absPath)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`,
  );
  try {
    await writeFile(temp, content, { flag: "wx" });
    if (mode !== undefined) await chmod(temp, mode);
    await rename(temp, absPath);
  } catch (error) {
    await rm(temp, { force: true }).catch(() => undefined);
    throw error;
  }
}
