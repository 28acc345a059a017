/**
 * How a `ConfinedRoot` (confined.ts) resolves a path: rules 1, 2 and 5 of its contract. The walk
 * beneath the root, directory by directory (`O_NOFOLLOW|O_DIRECTORY`, continued beneath the open
 * descriptor through `/proc/self/fd/N`), links met on the way resolved by the walk itself and refused
 * when they leave the root, protected names refused for writes, the home directory's secrets for
 * everything. `ConfinedRoot` adds the operations (reads, listing, writes, removal) on what it finds.
 */
import { closeSync, fstatSync, lstatSync, mkdirSync, openSync, readlinkSync } from "node:fs";
import path from "node:path";
import {
  asToolError,
  describeKind,
  DIR_FLAGS,
  entryStat,
  errnoCode,
  isInside,
  kindOf,
  lstatOrUndefined,
  MAX_LINK_HOPS,
  Pinned,
  PINNED_WALK,
  toPosix,
  type EntryKind,
  type Spot,
  type WalkOptions,
} from "./pinned.js";
import { protectedPrefix } from "./secret-paths.js";
import { ToolError } from "./tool-error.js";

/** What `locate` found at a path. */
export interface Location {
  /** Root-relative posix path where it lands ("" for the root). */
  rel: string;
  /** The same, absolute (for display and for git, which takes paths). */
  abs: string;
  kind: EntryKind;
  /** The protected part of `rel` (e.g. ".git"), or undefined. */
  protectedPart: string | undefined;
}

/** The root, the secrets beneath it and the walk; `ConfinedRoot` extends it with the operations. */
export class ConfinedResolver {
  protected readonly label: string;
  protected rootId: { dev: number; ino: number };

  protected constructor(
    /** The real path of the root. */
    readonly root: string,
    /** The root as it was given (absolute), so absolute paths spelled through it are accepted too. */
    protected readonly givenRoot: string,
    /** The home directory's secrets beneath the root (real paths, existing or not): refused. */
    readonly secrets: readonly string[],
    rootId: { dev: number; ino: number },
    label: string,
  ) {
    this.rootId = rootId;
    this.label = label;
  }

  /** Whether `abs` (a real path) is or lies in one of the home directory's secrets. */
  isSecret(abs: string): boolean {
    return this.secrets.some((secret) => isInside(secret, abs));
  }

  /** `abs` relative to the root, posix-style, for display; "." for the root itself. */
  relative(abs: string): string {
    const rel = path.relative(this.root, abs);
    return rel === "" ? "." : toPosix(rel);
  }

  /** The absolute path of a root-relative posix path. */
  absolute(rel: string): string {
    return rel === "" || rel === "." ? this.root : path.join(this.root, ...rel.split("/"));
  }

  /** The root-relative posix path of `p` as spelled (no link resolved); throws outside the root. */
  spelled(p: string): string {
    if (typeof p !== "string" || p.trim() === "" || p.includes("\0")) {
      throw new ToolError(
        "invalid_argument",
        `Invalid path ${JSON.stringify(p)}: expected a non-empty path.`,
      );
    }
    const abs = path.isAbsolute(p) ? path.normalize(p) : path.resolve(this.root, p);
    for (const base of [this.root, this.givenRoot]) {
      if (isInside(base, abs)) return toPosix(path.relative(base, abs));
    }
    throw this.outsideError(p);
  }

  protected outsideError(p: string, via?: string): ToolError {
    const through = via === undefined ? "" : ` (it resolves through a symlink to ${via})`;
    return new ToolError(
      "outside_workspace",
      `${p} is outside ${this.label}${through}: file tools only work inside ${this.label} ${this.root}.`,
    );
  }

  protected secretError(p: string, rel: string): ToolError | undefined {
    const abs = this.absolute(rel);
    const secret = this.secrets.find((s) => isInside(s, abs));
    if (secret === undefined) return undefined;
    return new ToolError(
      "secret_path",
      `${p} is in ${this.relative(secret)}, one of the home directory's secrets (keys, credentials, ` +
        "histories): the agent's tools neither read nor write them.",
    );
  }

  protected protectedError(p: string, rel: string): ToolError | undefined {
    const part = protectedPrefix(rel);
    if (part === undefined) return undefined;
    return new ToolError(
      "protected_path",
      `${p} is in ${part}, a protected path (its contents run outside the sandbox later), and the user ` +
        "has not approved changing it.",
    );
  }

  /** Opens the root, checking it is still the directory that was opened. */
  protected openRoot(): Pinned {
    if (!PINNED_WALK) return new Pinned("", this.root, undefined);
    let fd: number;
    try {
      fd = openSync(this.root, DIR_FLAGS);
    } catch (error) {
      throw new ToolError(
        "not_found",
        `${this.root} cannot be opened any more (${errnoCode(error) ?? String(error)}).`,
      );
    }
    const info = fstatSync(fd);
    if (info.dev !== this.rootId.dev || info.ino !== this.rootId.ino) {
      closeSync(fd);
      throw new ToolError("not_found", `${this.root} was replaced since it was opened.`);
    }
    return new Pinned("", `/proc/self/fd/${fd}`, fd);
  }

  /** Opens a directory beneath `dir` without following a link (ENOTDIR for a link or a file). */
  protected openChild(dir: Pinned, name: string): Pinned {
    const rel = dir.child(name);
    if (!PINNED_WALK) {
      const info = lstatSync(dir.at(name));
      if (!info.isDirectory()) throw Object.assign(new Error("not a directory"), { code: "ENOTDIR" });
      return new Pinned(rel, dir.at(name), undefined);
    }
    const fd = openSync(dir.at(name), DIR_FLAGS);
    return new Pinned(rel, `/proc/self/fd/${fd}`, fd);
  }

  /**
   * Walks `p` beneath the root (rule 1). The caller must close `held`. Throws ToolError
   * "outside_workspace", "not_found" (a missing directory on the way, unless `create` or
   * `lexicalTail`), "not_a_directory", "invalid_argument" (too many links), "protected_path" and
   * "secret_path" (writes).
   */
  protected walk(p: string, options: WalkOptions): Spot {
    let pending = this.spelled(p)
      .split("/")
      .filter((c) => c !== "" && c !== ".");
    const stack: Pinned[] = [this.openRoot()];
    const release = (): void => {
      for (const dir of stack) dir.close();
    };
    let hops = 0;
    try {
      while (pending.length > 0) {
        const name = pending[0]!;
        pending = pending.slice(1);
        if (name === ".") continue;
        if (name === "..") {
          if (stack.length === 1) throw this.outsideError(p);
          stack.pop()!.close();
          continue;
        }
        const top = stack.at(-1)!;
        const rel = top.child(name);
        const last = pending.length === 0;
        if (options.write) {
          if (!options.allowProtected) {
            const refused = this.protectedError(p, rel);
            if (refused) throw refused;
          }
          const secret = this.secretError(p, rel);
          if (secret) throw secret;
        }
        if (last && options.final === "entry") return { dir: top, name, rel, held: stack };
        if (!last) {
          try {
            stack.push(this.openChild(top, name));
            continue;
          } catch (error) {
            const code = errnoCode(error);
            if (code === "ENOENT") {
              if (options.lexicalTail) {
                // Nothing there yet: the rest is spelled as it would be created.
                const rest = [name, ...pending];
                const parts = top.rel === "" ? [] : top.rel.split("/");
                for (const part of rest) {
                  if (part === "..") {
                    if (parts.length === 0) throw this.outsideError(p);
                    parts.pop();
                  } else if (part !== "." && part !== "") parts.push(part);
                }
                const tailName = parts.pop() ?? "";
                return {
                  dir: new Pinned(parts.join("/"), "", undefined),
                  name: tailName,
                  rel: [...parts, tailName].join("/"),
                  held: stack,
                };
              }
              if (!options.create) {
                throw new ToolError(
                  "not_found",
                  `${p} does not exist (${rel} is missing, in ${this.label}).`,
                );
              }
              try {
                mkdirSync(top.at(name));
              } catch (e) {
                if (errnoCode(e) !== "EEXIST") throw e;
              }
              pending = [name, ...pending];
              continue;
            }
            if (code !== "ENOTDIR" && code !== "ELOOP") throw error;
          }
        }
        const info = lstatOrUndefined(top.at(name));
        if (info?.isSymbolicLink()) {
          if (++hops > MAX_LINK_HOPS) {
            throw new ToolError("invalid_argument", `${p}: too many levels of symlinks.`);
          }
          const target = readlinkSync(top.at(name));
          if (path.isAbsolute(target)) {
            let inside: string | undefined;
            for (const base of [this.root, this.givenRoot]) {
              if (isInside(base, path.normalize(target))) inside = toPosix(path.relative(base, target));
            }
            if (inside === undefined) throw this.outsideError(p, target);
            while (stack.length > 1) stack.pop()!.close();
            pending = [...inside.split("/").filter((c) => c !== ""), ...pending];
          } else {
            pending = [...target.split("/").filter((c) => c !== ""), ...pending];
          }
          continue;
        }
        if (!last) {
          if (info === undefined) {
            // Vanished between the open and the lstat: walk this component again.
            pending = [name, ...pending];
            continue;
          }
          const what = info.isFile() ? "a file" : describeKind(info);
          throw new ToolError("not_a_directory", `${p}: ${rel} is ${what}, not a directory.`);
        }
        return { dir: top, name, rel, held: stack };
      }
      // The root itself (or a path that resolved to it).
      const top = stack.at(-1)!;
      if (top.rel === "") return { dir: top, name: "", rel: "", held: stack };
      // A directory reached as the last step of a link chain: name it from its parent.
      const parent = stack.at(-2)!;
      stack.pop()!.close();
      const name = top.rel.slice(top.rel.lastIndexOf("/") + 1);
      return { dir: parent, name, rel: top.rel, held: stack };
    } catch (error) {
      release();
      throw error;
    }
  }

  protected release(spot: Spot): void {
    for (const dir of spot.held) dir.close();
  }

  /** Runs `fn` on the walked spot and closes what the walk holds; every failure a ToolError (rule 6). */
  protected async withSpot<T>(p: string, options: WalkOptions, fn: (spot: Spot) => Promise<T>): Promise<T> {
    let spot: Spot;
    try {
      spot = this.walk(p, options);
    } catch (error) {
      throw asToolError(p, error);
    }
    try {
      return await fn(spot);
    } catch (error) {
      throw asToolError(p, error);
    } finally {
      this.release(spot);
    }
  }

  /**
   * Where `p` lands beneath the root (links resolved by the walk, the last one too unless `final`
   * is "entry"), what is there, and whether it is protected. Missing directories on the way are
   * spelled as they would be created. Throws as the walk does; secrets are "secret_path".
   */
  async locate(p: string, options: { final?: "follow" | "entry" } = {}): Promise<Location> {
    return this.withSpot(p, { final: options.final ?? "follow", lexicalTail: true }, async (spot) => {
      const secret = this.secretError(p, spot.rel);
      if (secret) throw secret;
      const info = await entryStat(spot);
      return {
        rel: spot.rel,
        abs: this.absolute(spot.rel),
        kind: kindOf(info),
        protectedPart: protectedPrefix(spot.rel),
      };
    });
  }

  /**
   * The absolute path `p` lands on (compatibility with path-taking callers: display, git). For
   * "read" it must exist (ToolError "not_found"). Never use the result to open a file: use the
   * layer's own operations.
   */
  async resolve(p: string, purpose: "read" | "write"): Promise<string> {
    const where = await this.locate(p);
    if (purpose === "read" && where.kind === "absent") {
      throw new ToolError("not_found", `${p} does not exist (in ${this.label} ${this.root}).`);
    }
    return where.abs;
  }
}
