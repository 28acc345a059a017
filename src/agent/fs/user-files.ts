/**
 * Files the user named, outside any confined root (an attached image, their own skills in
 * `~/.agents/skills`, Spark's home): read by the opened descriptor, regular files only, never a
 * secret (rule 5 of confined.ts).
 */
import { constants as C } from "node:fs";
import { lstat, open, readdir, readlink, realpath, type FileHandle } from "node:fs/promises";
import type { Stats } from "node:fs";
import path from "node:path";
import {
  asToolError,
  DEFAULT_READ_CAP,
  describeKind,
  kindOf,
  PINNED_WALK,
  readCapped,
  tooLarge,
  type EntryKind,
} from "./pinned.js";
import { isEnvSecretName, isHomeSecret } from "./secret-paths.js";
import { ToolError } from "./tool-error.js";

/**
 * A file the user named (an attached image, their own skills in `~/.agents/skills`, Spark's home):
 * links are followed where the user put them, but only a regular file is opened (non-blocking,
 * `fstat`), and never one of the home directory's secrets or a `.env` file, judged by the real path
 * of the descriptor actually opened. `use` reads it; the descriptor is closed after. Throws ToolError.
 */
export async function withUserFile<T>(
  file: string,
  options: { home?: string },
  use: (opened: { handle: FileHandle; info: Stats }) => Promise<T>,
): Promise<T> {
  let handle: FileHandle;
  try {
    handle = await open(file, C.O_RDONLY | C.O_NONBLOCK | C.O_NOCTTY);
  } catch (error) {
    throw asToolError(file, error);
  }
  try {
    const info = await handle.stat();
    if (!info.isFile()) {
      throw new ToolError("not_a_file", `${file} is ${describeKind(info)}, not a regular file.`);
    }
    const real = PINNED_WALK
      ? await readlink(`/proc/self/fd/${handle.fd}`).catch(() => file)
      : await realpath(file).catch(() => file);
    if (isHomeSecret(real, options.home)) {
      throw new ToolError(
        "secret_path",
        `${file} leads to ${real}, one of the home directory's secrets: it is not read on the model's behalf.`,
      );
    }
    if (isEnvSecretName(path.basename(real))) {
      throw new ToolError("secret_path", `${file} leads to a .env file (credentials): it is not read.`);
    }
    return await use({ handle, info });
  } catch (error) {
    throw asToolError(file, error);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

/** `withUserFile`, reading the whole file (at most `maxBytes`, else ToolError "too_large"). */
export async function readUserFile(
  file: string,
  options: { maxBytes?: number; home?: string } = {},
): Promise<Buffer> {
  const cap = options.maxBytes ?? DEFAULT_READ_CAP;
  return withUserFile(file, options, async ({ handle, info }) => {
    if (info.size > cap) throw tooLarge(file, info.size, cap);
    const bytes = await readCapped(handle, cap + 1);
    if (bytes.length > cap) throw tooLarge(file, bytes.length, cap);
    return bytes;
  });
}

/** The names in a directory the user named (their skills, Spark's home), sorted; [] when unreadable. */
export async function readUserDir(dir: string): Promise<string[]> {
  return (await readdir(dir).catch((): string[] => [])).sort();
}

/** What is at a path (metadata only: nothing is opened, a link is not followed); "absent" when nothing. */
export async function entryKind(abs: string): Promise<EntryKind> {
  return kindOf(await lstat(abs).catch(() => undefined));
}

/** Reads at most `limit` bytes from the start of an open file (see `withFile`, `withUserFile`). */
export function readPrefix(handle: FileHandle, limit: number): Promise<Buffer> {
  return readCapped(handle, limit);
}
