/**
 * Which paths are secrets (rule 5 of confined.ts): `.env` files by name, and the home directory's
 * secrets (secrets.ts `HOME_SECRETS`) by the real path they land on; and the protected part of a
 * root-relative path (rule 2).
 */
import { lstatSync, readlinkSync, type Stats } from "node:fs";
import os from "node:os";
import path from "node:path";
import { HOME_SECRETS } from "../sandbox/secrets.js";
import { errnoCode, isInside, MAX_LINK_HOPS } from "./pinned.js";
import { isProtectedName } from "./protected-names.js";

/** `.env` and `.env.*` files hold a project's credentials; their templates do not. */
export function isEnvSecretName(name: string): boolean {
  const lower = name.toLowerCase();
  if (lower !== ".env" && !lower.startsWith(".env.")) return false;
  return !/\.(example|sample|template)$/.test(lower);
}

/** The protected part ("." joined, e.g. ".git") of a root-relative posix path, or undefined. */
export function protectedPrefix(rel: string): string | undefined {
  const parts = rel.split("/");
  const index = parts.findIndex(isProtectedName);
  return index < 0 ? undefined : parts.slice(0, index + 1).join("/");
}

/**
 * Where the home directory's secrets land (real paths, existing or not), those strictly inside `root`.
 * Synchronous on purpose: it runs once as a workspace opens, on every start of `spark`, `spark exec`
 * and `spark app`, and ~50 entries resolved with promises cost ~150 thread-pool round trips (18 ms
 * of a 240 ms `spark exec` start, figure 34); `lstat`s in one walk, their common parents resolved
 * once, cost well under a millisecond.
 */
export function secretsInside(root: string, home: string): string[] {
  if (home === "") return [];
  const found: string[] = [];
  const known = new Map<string, string>();
  for (const rel of HOME_SECRETS) {
    let landing: string;
    try {
      landing = landingPath(path.resolve(home, rel), known);
    } catch {
      continue; // unreadable or a link loop: not a path this root can hold
    }
    if (landing !== root && isInside(root, landing)) found.push(landing);
  }
  return found;
}

/**
 * The real path a path lands on (the deepest existing ancestor's real path joined with the rest):
 * `realpath` for an existing path, and for a missing one where it would be created. `known`
 * remembers what earlier calls resolved (paths under one parent share it).
 */
export function landingPath(abs: string, known = new Map<string, string>(), hops = 0): string {
  const remembered = known.get(abs);
  if (remembered !== undefined) return remembered;
  let info: Stats | undefined;
  try {
    info = lstatSync(abs, { throwIfNoEntry: false });
  } catch (error) {
    if (errnoCode(error) !== "ENOTDIR") throw error; // below a file: as missing
  }
  let landing: string;
  if (info?.isSymbolicLink()) {
    if (hops >= MAX_LINK_HOPS) throw new Error("too many links");
    landing = landingPath(path.resolve(path.dirname(abs), readlinkSync(abs)), known, hops + 1);
  } else {
    const parent = path.dirname(abs);
    landing = parent === abs ? abs : path.join(landingPath(parent, known, hops), path.basename(abs));
  }
  known.set(abs, landing);
  return landing;
}

/** Whether a real path is or lies in one of the home directory's secrets (their real paths). */
export function isHomeSecret(real: string, home = process.env.HOME || os.homedir()): boolean {
  if (home === "") return false;
  const known = new Map<string, string>();
  for (const rel of HOME_SECRETS) {
    let secret: string;
    try {
      secret = landingPath(path.resolve(home, rel), known);
    } catch {
      secret = path.resolve(home, rel);
    }
    if (isInside(secret, real)) return true;
  }
  return false;
}
