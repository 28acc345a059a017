/**
 * Which paths are secrets (rule 5 of confined.ts): `.env` files by name, and the home directory's
 * secrets (secrets.ts `HOME_SECRETS`) by the real path they land on; and the protected part of a
 * root-relative path (rule 2).
 */
import { lstat, readlink, realpath } from "node:fs/promises";
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

/** Where the home directory's secrets land (real paths, existing or not), those strictly inside `root`. */
export async function secretsInside(root: string, home: string): Promise<string[]> {
  if (home === "") return [];
  const found: string[] = [];
  for (const rel of HOME_SECRETS) {
    const landing = await landingPath(path.resolve(home, rel)).catch(() => undefined);
    if (landing !== undefined && landing !== root && isInside(root, landing)) found.push(landing);
  }
  return found;
}

/** The real path a path lands on (the deepest existing ancestor's real path joined with the rest). */
export async function landingPath(abs: string, hops = 0): Promise<string> {
  try {
    return await realpath(abs);
  } catch (error) {
    const code = errnoCode(error);
    if (code !== "ENOENT" && code !== "ENOTDIR") throw error;
  }
  const info = await lstat(abs).catch(() => undefined);
  if (info?.isSymbolicLink()) {
    if (hops >= MAX_LINK_HOPS) throw new Error("too many links");
    return landingPath(path.resolve(path.dirname(abs), await readlink(abs)), hops + 1);
  }
  const parent = path.dirname(abs);
  if (parent === abs) return abs;
  return path.join(await landingPath(parent, hops), path.basename(abs));
}

/** Whether a real path is or lies in one of the home directory's secrets (their real paths). */
export async function isHomeSecret(real: string, home = process.env.HOME || os.homedir()): Promise<boolean> {
  if (home === "") return false;
  for (const rel of HOME_SECRETS) {
    const secret = await landingPath(path.resolve(home, rel)).catch(() => path.resolve(home, rel));
    if (isInside(secret, real)) return true;
  }
  return false;
}
