/**
 * The workspace boundary of the agent's file tools. Every path a tool touches goes through
 * `Workspace.resolve`, which turns it into an absolute real path and refuses anything that would land
 * outside the workspace root: `..` escapes, absolute paths elsewhere, and symlinks (existing ones or a
 * dangling one that a write would create through) whose target is outside. Inside the root, the
 * home directory's secrets (secrets.ts `HOME_SECRETS`: ~/.ssh, ~/.aws…) are refused too when HOME lies
 * in the workspace, as the sandbox hides them from commands.
 */
import { randomBytes } from "node:crypto";
import { chmod, lstat, mkdir, readlink, realpath, rename, rm, stat, writeFile } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { HOME_SECRETS } from "./secrets.js";

/**
 * An error a file tool reports to the model. `code` is one of "outside_workspace", "not_found",
 * "not_a_file", "not_a_directory", "patch_invalid", "patch_conflict", "file_exists", "too_large",
 * "invalid_argument", "protected_path", "secret_path", "timeout", "cancelled"; `message` is a complete sentence meant to be shown to the model as is.
 */
export class ToolError extends Error {
  override readonly name = "ToolError";

  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** Symlink hops followed when resolving a dangling link chain before giving up, as the kernel does. */
const MAX_LINK_HOPS = 40;

function isInside(root: string, candidate: string): boolean {
  if (candidate === root) return true;
  const rel = path.relative(root, candidate);
  return rel !== "" && !rel.startsWith(`..${path.sep}`) && rel !== ".." && !path.isAbsolute(rel);
}

function errnoCode(error: unknown): string | undefined {
  return typeof error === "object" && error !== null && "code" in error
    ? String((error as { code: unknown }).code)
    : undefined;
}

/**
 * Where a path really lands: its realpath when it exists; for a path that does not exist, the realpath
 * of its deepest existing ancestor joined with the rest; a dangling symlink is followed to where a
 * write through it would go.
 */
async function landingPath(abs: string, hops = 0): Promise<string> {
  try {
    return await realpath(abs);
  } catch (error) {
    const code = errnoCode(error);
    if (code !== "ENOENT" && code !== "ENOTDIR") throw error;
  }
  let info;
  try {
    info = await lstat(abs);
  } catch {
    info = undefined;
  }
  if (info?.isSymbolicLink()) {
    if (hops >= MAX_LINK_HOPS)
      throw new ToolError("invalid_argument", `Too many levels of symlinks at ${abs}.`);
    const target = await readlink(abs);
    return landingPath(path.resolve(path.dirname(abs), target), hops + 1);
  }
  const parent = path.dirname(abs);
  if (parent === abs) return abs;
  return path.join(await landingPath(parent, hops), path.basename(abs));
}

export interface WorkspaceOptions {
  /** The home directory whose secrets are refused where they lie in the workspace; default `$HOME`. */
  home?: string;
  /** The secrets as another `Workspace` of the same root found them (the search worker's). */
  secrets?: readonly string[];
}

/** Where the home directory's secrets land (real paths), those strictly inside `root`. */
async function secretsInside(root: string, home: string): Promise<string[]> {
  if (home === "") return [];
  const found: string[] = [];
  for (const rel of HOME_SECRETS) {
    try {
      const landing = await landingPath(path.resolve(home, rel));
      if (landing !== root && isInside(root, landing)) found.push(landing);
    } catch {
      // Cannot be resolved: nothing there to read or write through either.
    }
  }
  return found;
}

export class Workspace {
  private constructor(
    /** The real path of the workspace root. */
    readonly root: string,
    /** The root as it was given (absolute), so absolute paths spelled through it are accepted too. */
    private readonly givenRoot: string,
    /** The home directory's secrets inside the root (real paths, existing or not): refused. */
    readonly secrets: readonly string[],
  ) {}

  /** Opens the workspace at `root`, which must be an existing directory. */
  static async open(root: string, options: WorkspaceOptions = {}): Promise<Workspace> {
    const given = path.resolve(root);
    let real: string;
    try {
      real = await realpath(given);
    } catch (error) {
      if (errnoCode(error) === "ENOENT") {
        throw new ToolError("not_found", `Workspace root ${given} does not exist.`);
      }
      throw error;
    }
    if (!(await stat(real)).isDirectory()) {
      throw new ToolError("not_a_directory", `Workspace root ${given} is not a directory.`);
    }
    const secrets =
      options.secrets ?? (await secretsInside(real, options.home ?? (process.env.HOME || os.homedir())));
    return new Workspace(real, given, [...secrets]);
  }

  /** Whether `abs` (a real path) is or lies in one of the home directory's secrets. */
  isSecret(abs: string): boolean {
    return this.secrets.some((secret) => isInside(secret, abs));
  }

  /**
   * The absolute real path to use for `p` (relative paths are relative to the root). Throws
   * ToolError "outside_workspace" when `p`, after normalisation or through a symlink, is outside the
   * root, "secret_path" when it lands in one of the home directory's secrets, and for `purpose: "read"` ToolError "not_found" when it does not exist. For writes the path
   * may not exist yet; the result is where the write must go (a symlinked file resolves to its target).
   */
  async resolve(p: string, purpose: "read" | "write"): Promise<string> {
    if (typeof p !== "string" || p.trim() === "" || p.includes("\0")) {
      throw new ToolError(
        "invalid_argument",
        `Invalid path ${JSON.stringify(p)}: expected a non-empty path.`,
      );
    }
    const abs = path.isAbsolute(p) ? path.normalize(p) : path.resolve(this.root, p);
    const lexicallyInside = isInside(this.root, abs) || isInside(this.givenRoot, abs);
    if (!lexicallyInside && !path.isAbsolute(p)) throw this.outside(p);

    const landing = await landingPath(abs);
    if (!isInside(this.root, landing)) {
      throw this.outside(p, lexicallyInside ? landing : undefined);
    }
    if (this.isSecret(landing)) {
      throw new ToolError(
        "secret_path",
        `${p} is in ${this.relative(this.secrets.find((secret) => isInside(secret, landing))!)}, one of the ` +
          "home directory's secrets (keys, credentials, histories): the agent's tools neither read nor write them.",
      );
    }
    if (purpose === "read") {
      try {
        await stat(landing);
      } catch (error) {
        const code = errnoCode(error);
        if (code === "ENOENT" || code === "ENOTDIR") {
          throw new ToolError("not_found", `${p} does not exist (in the workspace ${this.root}).`);
        }
        throw error;
      }
    }
    return landing;
  }

  /** `abs` relative to the root, posix-style, for display; "." for the root itself. */
  relative(abs: string): string {
    const rel = path.relative(this.root, abs);
    if (rel === "") return ".";
    return path.sep === "/" ? rel : rel.split(path.sep).join("/");
  }

  private outside(p: string, landing?: string): ToolError {
    const via = landing === undefined ? "" : ` (it resolves through a symlink to ${landing})`;
    return new ToolError(
      "outside_workspace",
      `${p} is outside the workspace${via}: file tools only work inside the workspace ${this.root}.`,
    );
  }
}

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
