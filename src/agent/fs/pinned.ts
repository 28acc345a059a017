/**
 * The pieces of the confined layer's descriptor walk (confined.ts): the open flags, the directory the
 * walk holds open (`Pinned`, named beneath `/proc/self/fd/N`), where a walk ended, what an entry is,
 * the capped read, and the `ToolError` every failure becomes (rule 6). Nothing here resolves a path
 * on its own: `ConfinedRoot` does, with these.
 */
import { closeSync, constants as C, existsSync, lstatSync, type Dirent, type Stats } from "node:fs";
import { lstat, readdir, stat, type FileHandle } from "node:fs/promises";
import path from "node:path";
import { ToolError } from "./tool-error.js";

/** Symlinks followed in one path before giving up, as the kernel does. */
export const MAX_LINK_HOPS = 40;
/** What `readFile` reads at most unless told otherwise. */
export const DEFAULT_READ_CAP = 64 * 1024 * 1024;

/** Whether the walk can pin directories by descriptor (`/proc/self/fd`). */
export const PINNED_WALK = process.platform === "linux" && existsSync("/proc/self/fd");

export const DIR_FLAGS = C.O_RDONLY | C.O_DIRECTORY | C.O_NOFOLLOW;
export const READ_FLAGS = C.O_RDONLY | C.O_NOFOLLOW | C.O_NONBLOCK | C.O_NOCTTY;
export const CREATE_FLAGS = C.O_WRONLY | C.O_CREAT | C.O_EXCL | C.O_NOFOLLOW;

export function errnoCode(error: unknown): string | undefined {
  return typeof error === "object" && error !== null && "code" in error
    ? String((error as { code: unknown }).code)
    : undefined;
}

export function isInside(root: string, candidate: string): boolean {
  if (candidate === root) return true;
  const rel = path.relative(root, candidate);
  return rel !== "" && rel !== ".." && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel);
}

export const toPosix = (p: string): string => (path.sep === "/" ? p : p.split(path.sep).join("/"));

/** What an entry is, as `lstat` saw it. */
export type EntryKind = "file" | "directory" | "symlink" | "other" | "absent";

export function kindOf(info: Stats | undefined): EntryKind {
  if (info === undefined) return "absent";
  if (info.isFile()) return "file";
  if (info.isDirectory()) return "directory";
  if (info.isSymbolicLink()) return "symlink";
  return "other";
}

export function describeKind(info: Stats): string {
  if (info.isFIFO()) return "a FIFO";
  if (info.isSocket()) return "a socket";
  if (info.isCharacterDevice() || info.isBlockDevice()) return "a device";
  if (info.isDirectory()) return "a directory";
  if (info.isSymbolicLink()) return "a symlink";
  return "not a regular file";
}

/** A directory the walk holds open; `at(name)` names an entry beneath it without re-resolving it. */
export class Pinned {
  constructor(
    /** Root-relative posix path of the directory ("" for the root). */
    readonly rel: string,
    /** `/proc/self/fd/N` (or the directory's path where the walk cannot pin). */
    readonly base: string,
    private readonly fd: number | undefined,
  ) {}

  at(name: string): string {
    return name === "" ? this.base : `${this.base}/${name}`;
  }

  child(name: string): string {
    return this.rel === "" ? name : `${this.rel}/${name}`;
  }

  close(): void {
    if (this.fd === undefined) return;
    try {
      closeSync(this.fd);
    } catch {
      // Already closed.
    }
  }
}

/** Where a walk ended: the pinned directory holding the entry, and its name ("" for the root). */
export interface Spot {
  dir: Pinned;
  name: string;
  /** Root-relative posix path of the entry ("" for the root). */
  rel: string;
  /** The directories to close once the operation is done. */
  held: Pinned[];
}

export interface WalkOptions {
  /** "follow": a link at the last component is resolved beneath the root too; "entry": it is the entry. */
  final: "follow" | "entry";
  /** Create missing directories on the way (writes). */
  create?: boolean;
  /** A missing directory on the way ends the walk lexically (for checks of paths that need not exist). */
  lexicalTail?: boolean;
  /** Refuse protected names on the way and at the end (writes). */
  write?: boolean;
  allowProtected?: boolean;
}

/** An entry of a listed directory. */
export interface ConfinedEntry {
  name: string;
  /** Root-relative posix path. */
  rel: string;
  kind: Exclude<EntryKind, "absent">;
}

export async function listPinned(dir: Pinned): Promise<ConfinedEntry[]> {
  const entries: Dirent[] = await readdir(dir.base, { withFileTypes: true });
  return entries
    .map((entry) => ({
      name: entry.name,
      rel: dir.child(entry.name),
      kind: entry.isFile()
        ? ("file" as const)
        : entry.isDirectory()
          ? ("directory" as const)
          : entry.isSymbolicLink()
            ? ("symlink" as const)
            : ("other" as const),
    }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/**
 * Any failure as a ToolError (rule 6): a system error gets a code and a sentence (a directory removed
 * by a command while Spark wrote into it, a full disk, a permission), never a bare errno.
 */
export function asToolError(p: string, error: unknown): ToolError {
  if (error instanceof ToolError) return error;
  const code = errnoCode(error);
  const detail = error instanceof Error ? error.message : String(error);
  switch (code) {
    case "ENOENT":
      return new ToolError("not_found", `${p} does not exist (or was removed meanwhile).`);
    case "ENOTDIR":
      return new ToolError("not_a_directory", `${p}: a part of it is not a directory.`);
    case "EISDIR":
    case "ENOTEMPTY":
      return new ToolError("not_a_file", `${p} is a directory, not a file.`);
    case "ELOOP":
      return new ToolError("symlink_refused", `${p} is a symlink; it is not followed.`);
    case "EEXIST":
      return new ToolError("file_exists", `${p} already exists.`);
    case "EACCES":
    case "EPERM":
    case "EROFS":
      return new ToolError("permission_denied", `${p} cannot be changed or read here (${code}).`);
    case "ENOSPC":
    case "EDQUOT":
      return new ToolError("no_space", `No space left to write ${p}.`);
    case "ENAMETOOLONG":
      return new ToolError("invalid_argument", `${p}: a name is too long.`);
    default:
      return new ToolError("io_error", `${p}: ${detail}`);
  }
}

/** The ToolError for a failed open of a file to read. */
export function openError(p: string, error: unknown): unknown {
  const code = errnoCode(error);
  if (code === "ENOENT" || code === "ENOTDIR") return new ToolError("not_found", `${p} does not exist.`);
  if (code === "ELOOP")
    return new ToolError("symlink_refused", `${p} is a symlink; it is not followed here.`);
  if (code === "EISDIR") return new ToolError("not_a_file", `${p} is a directory, not a file.`);
  return error;
}

/** Refuses anything but a regular file (rule 4). */
export function checkRegular(p: string, info: Stats): void {
  if (info.isDirectory()) throw new ToolError("not_a_file", `${p} is a directory, not a file.`);
  if (!info.isFile()) {
    throw new ToolError(
      "not_a_file",
      `${p} is ${describeKind(info)}, not a regular file: only regular files are read.`,
    );
  }
}

/** `lstat` of a walked entry; the directory itself (a `/proc/self/fd` link) by `stat`; undefined when absent. */
export async function entryStat(spot: Spot): Promise<Stats | undefined> {
  if (spot.dir.base === "") return undefined; // a missing directory on the way
  if (spot.name === "") return stat(spot.dir.base).catch(() => undefined);
  return lstat(spot.dir.at(spot.name)).catch(() => undefined);
}

export function lstatOrUndefined(p: string): Stats | undefined {
  try {
    return lstatSync(p);
  } catch {
    return undefined;
  }
}

export function tooLarge(p: string, size: number, cap: number): ToolError {
  return new ToolError("too_large", `${p} has ${size} bytes, more than the ${cap} read at most.`);
}

/** Reads from the handle's start until EOF or `limit` bytes. */
export async function readCapped(handle: FileHandle, limit: number): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let total = 0;
  while (total < limit) {
    const buffer = Buffer.allocUnsafe(Math.min(64 * 1024, limit - total));
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, total);
    if (bytesRead === 0) break;
    chunks.push(buffer.subarray(0, bytesRead));
    total += bytesRead;
  }
  return Buffer.concat(chunks, total);
}
