/**
 * The confined file layer: the only way agent and app code reads, writes, creates, removes, lists,
 * chmods or links a path that the model, a repository or a task can influence (the workspace, a
 * task's worktree, project skills, prompts, AGENTS.md, checkpoints' restore targets, Apply targets,
 * preview files). Lint (eslint.config.js) keeps `node:fs` out of `src/agent` and `src/app` except in
 * this folder and a short allow-list of files that touch only Spark's own data. One `ConfinedRoot`
 * per root; every path is relative to it (an absolute path must be spelled inside it).
 *
 * The rules (each has tests in test/confined-fs.test.ts, all of them together the property test in
 * test/confined-property.test.ts):
 * 1. Resolution happens beneath the root, component by component: each directory is opened with
 *    `O_NOFOLLOW|O_DIRECTORY` and the walk continues beneath the opened descriptor
 *    (`/proc/self/fd/N/NAME`), so a component swapped for a link after it was checked cannot redirect
 *    what follows. A symlink met on the way is read and resolved by the walk itself, never by the
 *    kernel: one that leaves the root is refused ("outside_workspace"), `..` never climbs above the
 *    root, at most 40 links per path ("invalid_argument").
 * 2. Protected names (`.git`, `.spark`, `.codex`, `.vscode`, protected-paths.ts), reached by name or
 *    through a link, are refused for writes ("protected_path") unless the call says the user approved
 *    it (`allowProtected`: file tools after an approval); bulk restores (undo/redo, Apply) never pass
 *    it. Reads of them stay allowed.
 * 3. Writes never go through a symlink. A write creates a temporary file beside the target
 *    (`O_CREAT|O_EXCL|O_NOFOLLOW`) and renames it over the entry, so a link there is replaced, never
 *    followed. `final: "entry"` (the default for writes, what bulk restores use) does not resolve
 *    the last component at all; `final: "follow"` (the file tools' promise that a link to a file
 *    inside the workspace edits that file) first resolves it beneath the root, then replaces what it
 *    lands on. `chmod`, `utimes` and `remove` never follow; a directory removed recursively is walked
 *    by descriptors too.
 * 4. Reads take regular files only: the last component is opened `O_NOFOLLOW|O_NONBLOCK` and the
 *    descriptor checked with `fstat` (a FIFO, socket or device is refused, "not_a_file", never waited
 *    on), and read up to a byte cap ("too_large").
 * 5. Secrets are refused for reads and writes ("secret_path"): the home directory's secrets
 *    (secrets.ts `HOME_SECRETS`: ~/.ssh, ~/.aws…) wherever they lie beneath the root, and for reads
 *    of contents `.env` and `.env.*` files (not `.env.example`, `.env.sample`, `.env.template`).
 *    `readUserFile` (a file the user named: an attached image, their own skills, Spark's home)
 *    refuses the same secrets by the opened descriptor's real path, wherever the path led.
 * 6. Errors are `ToolError`s (tool-error.ts) with a code and a sentence the model or the user can act
 *    on; errno codes never leak as the only explanation.
 *
 * Which guarantee holds where: on Linux with `/proc` (every supported deployment, and inside the
 * sandbox) rules 1-5 hold against a concurrent process swapping links between and during operations
 * (the property test swaps them from another process). Without `/proc/self/fd` (macOS) the walk
 * falls back to paths: the same checks, but a link swapped in between a check and its use can still
 * redirect one operation. Bulk writes need no sandbox on Linux: the descriptor walk already pins
 * every directory, and bubblewrap's read-only mounts of the protected names (sandbox.ts) only guard
 * commands. Limits: a hard link to a secret made outside Spark is a regular file like any other (the
 * sandbox keeps the agent from making one); a `.git` file's gitdir elsewhere in the workspace is
 * protected by the sandbox's mounts, not by name here.
 *
 * Its parts: resolution (resolver.ts: the walk, rules 1, 2 and 5, which `ConfinedRoot` extends with
 * the operations here: reads, listing, writes, links, removal), the walk's pieces and the errors
 * (pinned.ts), which paths are secrets (secret-paths.ts), files the user named outside any root
 * (user-files.ts).
 */
import { closeSync, fstatSync, openSync, readSync, type BigIntStats, type Stats } from "node:fs";
import {
  lstat,
  mkdir,
  open,
  readlink,
  realpath,
  rename,
  rmdir,
  stat,
  symlink,
  unlink,
  type FileHandle,
} from "node:fs/promises";
import { randomBytes } from "node:crypto";
import os from "node:os";
import path from "node:path";
import { isProtectedName } from "./protected-names.js";
import {
  asToolError,
  checkRegular,
  CREATE_FLAGS,
  DEFAULT_READ_CAP,
  entryStat,
  errnoCode,
  isInside,
  listPinned,
  openError,
  Pinned,
  READ_FLAGS,
  readCapped,
  tooLarge,
  type ConfinedEntry,
  type Spot,
} from "./pinned.js";
import { isEnvSecretName, secretsInside } from "./secret-paths.js";
import { ConfinedResolver, type Location } from "./resolver.js";
import { ToolError } from "./tool-error.js";

export { ToolError } from "./tool-error.js";
export type { Location } from "./resolver.js";
export { asToolError, DEFAULT_READ_CAP, MAX_LINK_HOPS, PINNED_WALK } from "./pinned.js";
export type { ConfinedEntry, EntryKind } from "./pinned.js";
export { isEnvSecretName, protectedPrefix } from "./secret-paths.js";
export { entryKind, readPrefix, readUserDir, readUserFile, withUserFile } from "./user-files.js";

export { isProtectedName } from "./protected-names.js";

export interface ConfinedOptions {
  /** The home directory whose secrets are refused where they lie beneath the root; default `$HOME`. */
  home?: string;
  /** The secrets as another `ConfinedRoot` of the same root found them (the search worker's). */
  secrets?: readonly string[];
  /** How errors name the root to the model: "the workspace" (default), "the skill's folder"… */
  label?: string;
}

export interface ReadOptions {
  /** Bytes read at most (default `DEFAULT_READ_CAP`); a longer file is ToolError "too_large". */
  maxBytes?: number;
  /** "follow" (default): a link at the end is resolved beneath the root; "entry": a link is refused. */
  final?: "follow" | "entry";
  /** `.env` files may be read (Spark's own copies, never for the model); default false. */
  allowEnvFiles?: boolean;
}

export interface WriteOptions {
  /** Permission bits; default: the existing file's, else 0666 less the umask. */
  mode?: number;
  /** "entry" (default): the last component is replaced whatever it is; "follow": resolved first. */
  final?: "follow" | "entry";
  /** The user approved writing protected names. */
  allowProtected?: boolean;
}

/** The confined view of one directory tree; see the module comment for its rules. */
export class ConfinedRoot extends ConfinedResolver {
  /** Opens the tree at `root`, which must be an existing directory. */
  static async open(root: string, options: ConfinedOptions = {}): Promise<ConfinedRoot> {
    const given = path.resolve(root);
    const label = options.label ?? "the workspace";
    let real: string;
    try {
      real = await realpath(given);
    } catch (error) {
      if (errnoCode(error) === "ENOENT") throw new ToolError("not_found", `${given} does not exist.`);
      throw error;
    }
    const info = await stat(real);
    if (!info.isDirectory()) throw new ToolError("not_a_directory", `${given} is not a directory.`);
    const secrets =
      options.secrets ?? secretsInside(real, options.home ?? (process.env.HOME || os.homedir()));
    return new ConfinedRoot(real, given, [...secrets], { dev: info.dev, ino: info.ino }, label);
  }

  /** `lstat` of the entry (`final: "entry"`) or of what it resolves to (default); undefined when absent. */
  async stat(p: string, options: { final?: "follow" | "entry" } = {}): Promise<Stats | undefined> {
    return this.withSpot(p, { final: options.final ?? "follow", lexicalTail: true }, async (spot) => {
      return entryStat(spot);
    });
  }

  /**
   * `lstat` (with nanosecond times) of each named entry of directory `dir`, the directory walked to
   * once: what a scan of many files needs. A name that is missing (or not a plain name) is left out.
   */
  async statEntries(dir: string, names: readonly string[]): Promise<Map<string, BigIntStats>> {
    return this.withSpot(dir === "" ? "." : dir, { final: "follow" }, async (spot) => {
      const out = new Map<string, BigIntStats>();
      let pinned: Pinned;
      try {
        pinned = spot.name === "" ? spot.dir : this.openChild(spot.dir, spot.name);
      } catch {
        return out; // not a directory (any more)
      }
      try {
        await Promise.all(
          names.map(async (name) => {
            if (name === "" || name === "." || name === ".." || name.includes("/")) return;
            const info = await lstat(pinned.at(name), { bigint: true }).catch(() => undefined);
            if (info !== undefined) out.set(name, info);
          }),
        );
      } finally {
        if (pinned !== spot.dir) pinned.close();
      }
      return out;
    });
  }

  /** The target of the symlink at `p` (never followed). */
  async readlink(p: string): Promise<string> {
    return this.withSpot(p, { final: "entry" }, async (spot) => {
      try {
        return await readlink(spot.dir.at(spot.name));
      } catch (error) {
        const code = errnoCode(error);
        if (code === "ENOENT") throw new ToolError("not_found", `${p} does not exist.`);
        throw new ToolError("invalid_argument", `${p} is not a symlink.`);
      }
    });
  }

  /**
   * Opens a regular file for reading (rule 4) and hands the descriptor to `use`, closing it after.
   * `info` is the descriptor's `fstat`.
   */
  async withFile<T>(
    p: string,
    options: ReadOptions,
    use: (file: { handle: FileHandle; info: Stats; rel: string }) => Promise<T>,
  ): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      let spot: Spot;
      try {
        spot = this.walk(p, { final: options.final ?? "follow" });
      } catch (error) {
        throw asToolError(p, error);
      }
      let handle: FileHandle | undefined;
      try {
        this.#refuseRead(p, spot, options);
        try {
          handle = await open(spot.dir.at(spot.name), READ_FLAGS);
        } catch (error) {
          if (errnoCode(error) === "ELOOP" && options.final !== "entry" && attempt < 3) continue;
          throw openError(p, error);
        }
        const info = await handle.stat();
        checkRegular(p, info);
        return await use({ handle, info, rel: spot.rel });
      } catch (error) {
        throw asToolError(p, error);
      } finally {
        await handle?.close().catch(() => undefined);
        this.release(spot);
      }
    }
  }

  /** Refuses reading a secret (rule 5) at the walked spot. */
  #refuseRead(p: string, spot: Spot, options: ReadOptions): void {
    if (spot.name === "") throw new ToolError("not_a_file", `${p} is a directory, not a file.`);
    const secret = this.secretError(p, spot.rel);
    if (secret) throw secret;
    if (!options.allowEnvFiles && isEnvSecretName(spot.name)) {
      throw new ToolError(
        "secret_path",
        `${p} is a .env file (a project's credentials): the agent's tools do not read it.`,
      );
    }
  }

  /**
   * `readFile` for a caller that cannot wait (the app's change record, taken while a patch waits to
   * write): the same walk and checks, synchronously.
   */
  readFileSync(p: string, options: ReadOptions = {}): Buffer {
    const cap = options.maxBytes ?? DEFAULT_READ_CAP;
    let spot: Spot;
    try {
      spot = this.walk(p, { final: options.final ?? "follow" });
    } catch (error) {
      throw asToolError(p, error);
    }
    let fd: number | undefined;
    try {
      this.#refuseRead(p, spot, options);
      try {
        fd = openSync(spot.dir.at(spot.name), READ_FLAGS);
      } catch (error) {
        throw openError(p, error);
      }
      const info = fstatSync(fd);
      checkRegular(p, info);
      if (info.size > cap) throw tooLarge(p, info.size, cap);
      const chunks: Buffer[] = [];
      let total = 0;
      while (total <= cap) {
        const buffer = Buffer.allocUnsafe(Math.min(64 * 1024, cap + 1 - total));
        const read = readSync(fd, buffer, 0, buffer.length, total);
        if (read === 0) break;
        chunks.push(buffer.subarray(0, read));
        total += read;
      }
      if (total > cap) throw tooLarge(p, total, cap);
      return Buffer.concat(chunks, total);
    } catch (error) {
      throw asToolError(p, error);
    } finally {
      if (fd !== undefined) closeSync(fd);
      this.release(spot);
    }
  }

  /** A regular file's bytes, at most `maxBytes` (rules 1, 4, 5). */
  async readFile(p: string, options: ReadOptions = {}): Promise<Buffer> {
    const cap = options.maxBytes ?? DEFAULT_READ_CAP;
    return this.withFile(p, options, async ({ handle, info }) => {
      if (info.size > cap) throw tooLarge(p, info.size, cap);
      const bytes = await readCapped(handle, cap + 1);
      if (bytes.length > cap) throw tooLarge(p, bytes.length, cap);
      return bytes;
    });
  }

  /** The entries of a directory (links not followed), sorted by name. */
  async readdir(p: string): Promise<ConfinedEntry[]> {
    return this.withSpot(p, { final: "follow" }, async (spot) => {
      const secret = this.secretError(p, spot.rel);
      if (secret) throw secret;
      let dir: Pinned;
      try {
        dir = spot.name === "" ? spot.dir : this.openChild(spot.dir, spot.name);
      } catch (error) {
        const code = errnoCode(error);
        if (code === "ENOENT") throw new ToolError("not_found", `${p} does not exist.`);
        if (code === "ENOTDIR" || code === "ELOOP")
          throw new ToolError("not_a_directory", `${p} is not a directory.`);
        throw error;
      }
      try {
        return await listPinned(dir);
      } finally {
        if (dir !== spot.dir) dir.close();
      }
    });
  }

  /**
   * Visits the tree under directory `p` by descriptors (rule 1 at every level), depth first in
   * sorted order; `enter` decides which directories are descended into, `visit` sees every entry
   * (links are entries, never followed), may `lstat` it and open regular files with `open` (undefined for
   * anything else, and for `.env` files unless `allowEnvFiles`: Spark's own copies, never the model's).
   */
  async walkTree(
    p: string,
    visit: (
      entry: ConfinedEntry,
      open: () => Promise<FileHandle | undefined>,
      lstat: () => Promise<Stats | undefined>,
    ) => Promise<void> | void,
    enter: (entry: ConfinedEntry) => boolean = () => true,
    options: { allowEnvFiles?: boolean } = {},
  ): Promise<void> {
    await this.withSpot(p, { final: "follow" }, async (spot) => {
      let top: Pinned | undefined;
      try {
        top = spot.name === "" ? spot.dir : this.openChild(spot.dir, spot.name);
      } catch {
        top = undefined;
      }
      if (top === undefined) throw new ToolError("not_a_directory", `${p} is not a directory.`);
      const descend = async (dir: Pinned): Promise<void> => {
        for (const entry of await listPinned(dir)) {
          if (this.secrets.length > 0 && this.isSecret(this.absolute(entry.rel))) continue;
          const opener = async (): Promise<FileHandle | undefined> => {
            if (entry.kind !== "file") return undefined;
            if (!options.allowEnvFiles && isEnvSecretName(entry.name)) return undefined;
            const handle = await open(dir.at(entry.name), READ_FLAGS).catch(() => undefined);
            if (handle === undefined) return undefined;
            const info = await handle.stat();
            if (!info.isFile()) {
              await handle.close();
              return undefined;
            }
            return handle;
          };
          await visit(entry, opener, () => lstat(dir.at(entry.name)).catch(() => undefined));
          if (entry.kind === "directory" && enter(entry)) {
            let child: Pinned;
            try {
              child = this.openChild(dir, entry.name);
            } catch {
              continue; // swapped for a link or removed meanwhile: not descended into
            }
            try {
              await descend(child);
            } finally {
              child.close();
            }
          }
        }
      };
      try {
        await descend(top);
      } finally {
        if (top !== spot.dir) top.close();
      }
    });
  }

  /**
   * Writes `data` to `p` atomically (rule 3): a temporary file beside it renamed over the entry, so
   * readers never see half a file and a link there is replaced. Missing directories are created.
   * Returns where it landed and whether the file is new.
   */
  async writeFile(
    p: string,
    data: string | Uint8Array,
    options: WriteOptions = {},
  ): Promise<{ rel: string; created: boolean }> {
    const final = options.final ?? "entry";
    return this.withSpot(
      p,
      { final, create: true, write: true, allowProtected: options.allowProtected === true },
      async (spot) => {
        if (spot.name === "") throw new ToolError("not_a_file", `${p} is ${this.label}'s root, a directory.`);
        if (final === "follow") {
          const refused = options.allowProtected ? undefined : this.protectedError(p, spot.rel);
          if (refused) throw refused;
        }
        const existing = await lstat(spot.dir.at(spot.name)).catch(() => undefined);
        if (existing?.isDirectory()) {
          throw new ToolError("not_a_file", `${p} is a directory, not a file.`);
        }
        const mode = options.mode ?? (existing?.isFile() ? existing.mode & 0o7777 : undefined);
        const temp = `.${spot.name.slice(0, 100)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
        const handle = await open(spot.dir.at(temp), CREATE_FLAGS, 0o666);
        try {
          try {
            await handle.writeFile(data);
            if (mode !== undefined) await handle.chmod(mode);
          } finally {
            await handle.close();
          }
          await rename(spot.dir.at(temp), spot.dir.at(spot.name));
        } catch (error) {
          await unlink(spot.dir.at(temp)).catch(() => undefined);
          if (errnoCode(error) === "EISDIR" || errnoCode(error) === "ENOTEMPTY")
            throw new ToolError("not_a_file", `${p} is a directory, not a file.`);
          throw error;
        }
        return { rel: spot.rel, created: existing === undefined };
      },
    );
  }

  /**
   * Makes `p` a symlink to `target` (replacing what is there, rule 3). Refused ("symlink_refused")
   * when the target, resolved from the link's directory beneath the root, leaves the root, enters a
   * protected name or a secret: a link is as dangerous as where it points.
   */
  async symlink(p: string, target: string, options: { allowProtected?: boolean } = {}): Promise<void> {
    await this.withSpot(
      p,
      { final: "entry", create: true, write: true, allowProtected: options.allowProtected === true },
      async (spot) => {
        const reason = await this.linkRefusal(spot.rel, target);
        if (reason !== undefined) throw new ToolError("symlink_refused", `${p} → ${target}: ${reason}.`);
        const temp = `.${spot.name.slice(0, 100)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`;
        await symlink(target, spot.dir.at(temp));
        try {
          await rename(spot.dir.at(temp), spot.dir.at(spot.name));
        } catch (error) {
          await unlink(spot.dir.at(temp)).catch(() => undefined);
          if (errnoCode(error) === "EISDIR" || errnoCode(error) === "ENOTEMPTY")
            throw new ToolError("not_a_file", `${p} is a directory, not a link.`);
          throw error;
        }
      },
    );
  }

  /**
   * Why a link at `rel` (root-relative) to `target` must not exist, or undefined when it may: its
   * target resolved beneath the root (through the links already there) must stay inside, out of
   * protected names and secrets.
   */
  async linkRefusal(rel: string, target: string): Promise<string | undefined> {
    if (target === "" || target.includes("\0")) return "an empty target";
    if (path.isAbsolute(target)) {
      const inside = [this.root, this.givenRoot].some((base) => isInside(base, path.normalize(target)));
      if (!inside) return `it points outside ${this.label}`;
    }
    const dir = rel.includes("/") ? rel.slice(0, rel.lastIndexOf("/")) : "";
    const spelled = path.isAbsolute(target) ? target : dir === "" ? target : `${dir}/${target}`;
    let where: Location;
    try {
      where = await this.locate(path.isAbsolute(target) ? spelled : path.posix.normalize(spelled));
    } catch (error) {
      if (error instanceof ToolError) {
        if (error.code === "outside_workspace") return `it points outside ${this.label}`;
        if (error.code === "secret_path") return "it points at one of the home directory's secrets";
        return error.message;
      }
      throw error;
    }
    if (where.protectedPart !== undefined) return `it points into ${where.protectedPart}, a protected path`;
    if (where.rel === "") return undefined;
    if (isEnvSecretName(where.rel.slice(where.rel.lastIndexOf("/") + 1)))
      return "it points at a .env file (credentials)";
    return undefined;
  }

  /**
   * Removes the entry at `p` (never followed: a link is removed, not its target); a directory only
   * with `recursive` (its tree walked by descriptors) or when empty. Returns whether something was there.
   */
  async remove(p: string, options: { recursive?: boolean; allowProtected?: boolean } = {}): Promise<boolean> {
    return this.withSpot(
      p,
      { final: "entry", write: true, allowProtected: options.allowProtected === true },
      async (spot) => {
        if (spot.name === "") throw new ToolError("invalid_argument", `${p} is ${this.label}'s root.`);
        const info = await lstat(spot.dir.at(spot.name)).catch(() => undefined);
        if (info === undefined) return false;
        if (info.isDirectory()) {
          if (options.recursive)
            await this.#removeTree(spot.dir, spot.name, p, options.allowProtected === true);
          else {
            await rmdir(spot.dir.at(spot.name)).catch((error: unknown) => {
              if (errnoCode(error) === "ENOTEMPTY" || errnoCode(error) === "EEXIST") {
                throw new ToolError("invalid_argument", `${p} is a directory that is not empty.`);
              }
              throw error;
            });
          }
        } else {
          await unlink(spot.dir.at(spot.name)).catch((error: unknown) => {
            if (errnoCode(error) !== "ENOENT") throw error;
          });
        }
        return true;
      },
    );
  }

  /**
   * Removes a directory tree by descriptors (a subdirectory swapped for a link meanwhile is unlinked,
   * never followed). A protected name or a secret anywhere in it refuses the whole removal: a first
   * pass looks, the second deletes (and still never deletes one that appeared meanwhile).
   */
  async #removeTree(dir: Pinned, name: string, p: string, allowProtected: boolean): Promise<void> {
    const guard = (rel: string, entryName: string): ToolError | undefined => {
      if (!allowProtected && isProtectedName(entryName)) return this.protectedError(p, rel);
      return this.secretError(p, rel);
    };
    await this.#visitTree(dir, name, async (parent, entry) => {
      const refused = guard(entry.rel, entry.name);
      if (refused) throw refused;
    });
    await this.#visitTree(
      dir,
      name,
      async (parent, entry) => {
        if (guard(entry.rel, entry.name) !== undefined) return;
        if (entry.kind !== "directory") await unlink(parent.at(entry.name)).catch(() => undefined);
      },
      async (parent, childName) => {
        await rmdir(parent.at(childName)).catch((error: unknown) => {
          if (errnoCode(error) !== "ENOENT") throw error;
        });
      },
    );
  }

  /** Depth first under `dir/name` by descriptors: `visit` each entry, `leave` each directory after its entries. */
  async #visitTree(
    dir: Pinned,
    name: string,
    visit: (parent: Pinned, entry: ConfinedEntry) => Promise<void>,
    leave?: (parent: Pinned, name: string) => Promise<void>,
  ): Promise<void> {
    let child: Pinned;
    try {
      child = this.openChild(dir, name);
    } catch (error) {
      const code = errnoCode(error);
      if (code === "ENOENT") return;
      if (code === "ENOTDIR" || code === "ELOOP") {
        // Swapped for a file or a link meanwhile: that entry goes, never what it points to.
        if (leave) await unlink(dir.at(name)).catch(() => undefined);
        return;
      }
      throw error;
    }
    try {
      for (const entry of await listPinned(child)) {
        await visit(child, entry);
        if (entry.kind === "directory") await this.#visitTree(child, entry.name, visit, leave);
      }
    } finally {
      child.close();
    }
    await leave?.(dir, name);
  }

  /** Creates directory `p` and its missing parents (links on the way resolved beneath the root). */
  async mkdir(p: string, options: { allowProtected?: boolean } = {}): Promise<void> {
    await this.withSpot(
      p,
      { final: "entry", create: true, write: true, allowProtected: options.allowProtected === true },
      async (spot) => {
        if (spot.name === "") return;
        await mkdir(spot.dir.at(spot.name)).catch(async (error: unknown) => {
          if (errnoCode(error) !== "EEXIST") throw error;
          const info = await lstat(spot.dir.at(spot.name));
          if (!info.isDirectory())
            throw new ToolError("not_a_directory", `${p} exists and is not a directory.`);
        });
      },
    );
  }

  /** Sets the permission bits of the entry at `p`, never through a link ("symlink_refused"). */
  async chmod(p: string, mode: number, options: { allowProtected?: boolean } = {}): Promise<void> {
    await this.#withEntryHandle(p, options, (handle) => handle.chmod(mode & 0o7777));
  }

  /** Sets the times of the entry at `p`, never through a link ("symlink_refused"). */
  async utimes(
    p: string,
    atime: Date,
    mtime: Date,
    options: { allowProtected?: boolean } = {},
  ): Promise<void> {
    await this.#withEntryHandle(p, options, (handle) => handle.utimes(atime, mtime));
  }

  async #withEntryHandle(
    p: string,
    options: { allowProtected?: boolean },
    fn: (handle: FileHandle) => Promise<void>,
  ): Promise<void> {
    await this.withSpot(
      p,
      { final: "entry", write: true, allowProtected: options.allowProtected === true },
      async (spot) => {
        if (spot.name === "") throw new ToolError("invalid_argument", `${p} is ${this.label}'s root.`);
        let handle: FileHandle;
        try {
          handle = await open(spot.dir.at(spot.name), READ_FLAGS);
        } catch (error) {
          const code = errnoCode(error);
          if (code === "ELOOP")
            throw new ToolError("symlink_refused", `${p} is a symlink; it is not followed.`);
          if (code === "ENOENT") throw new ToolError("not_found", `${p} does not exist.`);
          throw error;
        }
        try {
          await fn(handle);
        } finally {
          await handle.close();
        }
      },
    );
  }
}
