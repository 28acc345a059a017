/**
 * Project instructions (`AGENTS.md`), discovered as Codex documents it, so that a repository set up
 * for Codex works unchanged:
 * - global: `AGENTS.override.md`, else `AGENTS.md`, in Spark's home (`SPARK_HOME` or `~/.spark`);
 *   the first non-empty one;
 * - project: from the project root (the nearest directory above the working directory holding
 *   `.git`; without one, the working directory alone) down to the working directory; in each
 *   directory the first non-empty of `AGENTS.override.md`, `AGENTS.md`, then the configured
 *   fallback names (e.g. `CLAUDE.md`); at most one file per directory;
 * - concatenated root first (closer files come later, so they take precedence), empty files
 *   skipped, and cut at a byte cap (32 KiB by default; 0 turns project files off) with a warning
 *   that says what was cut.
 * Loaded once per session; the agent sends them as the conversation's developer instructions.
 * The project's files are read through the confined layer beneath the project root (context-reads.ts):
 * an `AGENTS.md` that links out of the project (to `~/.ssh/id_ed25519`) or to a secret is refused
 * with a warning, and a FIFO is refused at once instead of blocking start-up.
 */
import { dirname, join, relative, resolve, sep } from "node:path";
import { entryKind } from "../fs/confined.js";
import { openProject, readContextFile, type ContextDir } from "./context-reads.js";
import { sparkHome } from "./spark-home.js";

export const DEFAULT_PROJECT_DOC_MAX_BYTES = 32 * 1024;
const GLOBAL_NAMES = ["AGENTS.override.md", "AGENTS.md"];
const PROJECT_NAMES = ["AGENTS.override.md", "AGENTS.md"];

export interface InstructionFile {
  /** Absolute path. */
  path: string;
  /** As shown to the user and the model: `~/.spark/AGENTS.md`-style for the global one, else relative to the project root. */
  label: string;
  scope: "global" | "project";
  /** Bytes of the file included (after a cut, fewer than `size`). */
  bytes: number;
  size: number;
  truncated: boolean;
}

export interface ProjectInstructions {
  /** The files' text, joined root first, with a heading per file; "" when there are none. */
  text: string;
  files: InstructionFile[];
  /** The project root the walk started from (the working directory when there is no git root). */
  root: string;
  /** What the user should know (the cap cut a file, a file could not be read). */
  warnings: string[];
}

export interface InstructionOptions {
  /** The working directory (the workspace). */
  cwd: string;
  /** Spark's home; default `sparkHome()`. */
  home?: string;
  /** Names tried after `AGENTS.override.md` and `AGENTS.md` in each directory. */
  fallbackFilenames?: readonly string[];
  /** Byte cap of all files together (default 32 KiB); 0 loads none. */
  maxBytes?: number;
}

/** The nearest directory from `cwd` up that holds `.git` (a directory, or a worktree's file). */
export async function findProjectRoot(cwd: string): Promise<string | undefined> {
  for (let dir = resolve(cwd); ;) {
    if (await exists(join(dir, ".git"))) return dir;
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

export async function loadInstructions(options: InstructionOptions): Promise<ProjectInstructions> {
  const cwd = resolve(options.cwd);
  const home = options.home ?? sparkHome();
  const maxBytes = options.maxBytes ?? DEFAULT_PROJECT_DOC_MAX_BYTES;
  const root = (await findProjectRoot(cwd)) ?? cwd;
  const warnings: string[] = [];
  const files: InstructionFile[] = [];
  const sections: string[] = [];
  if (maxBytes <= 0) return { text: "", files, root, warnings };

  const candidates: { where: ContextDir; names: readonly string[]; scope: "global" | "project" }[] = [
    { where: { dir: home }, names: GLOBAL_NAMES, scope: "global" },
  ];
  const names = [...PROJECT_NAMES, ...(options.fallbackFilenames ?? [])];
  const down = pathDown(root, cwd);
  const project = await openProject(down[0] ?? cwd);
  if (project !== undefined) {
    for (const dir of down) candidates.push({ where: { dir, project }, names, scope: "project" });
  }

  let remaining = maxBytes;
  const skipped: string[] = [];
  for (const { where, names: tried, scope } of candidates) {
    for (const name of tried) {
      const path = join(where.dir, name);
      const label = scope === "global" ? join(displayHome(home), name) : relative(root, path) || name;
      if (remaining <= 0) {
        // Only whether it would have counted matters for the warning.
        const size = await nonEmptySize(where, name);
        if (size > 0) {
          skipped.push(label);
          break;
        }
        continue;
      }
      let read: { text: string; size: number; bytes: number } | undefined;
      try {
        read = await readCapped(where, name, remaining);
      } catch (error) {
        warnings.push(`${label}: not read (${(error as Error).message})`);
        continue;
      }
      if (read === undefined || read.text.trim() === "") continue;
      const truncated = read.bytes < read.size;
      files.push({ path, label, scope, bytes: read.bytes, size: read.size, truncated });
      sections.push(`### ${label}\n\n${read.text.trim()}`);
      remaining -= read.bytes;
      if (truncated) remaining = 0;
      break;
    }
  }
  const cut = files.find((f) => f.truncated);
  if (cut || skipped.length > 0) {
    warnings.push(
      `AGENTS.md instructions cut at ${maxBytes} bytes` +
        (cut ? `: ${cut.label} truncated (${cut.bytes} of ${cut.size} bytes)` : "") +
        (skipped.length > 0 ? `; not loaded: ${skipped.join(", ")}` : "") +
        " (raise client.projectDocMaxBytes in the config to load more)",
    );
  }
  const text =
    sections.length === 0
      ? ""
      : "## Instructions from AGENTS.md files\n\n" +
        "The user's and the project's standing instructions, the project root's first; where they " +
        "disagree, a later file (closer to the working directory) takes precedence.\n\n" +
        sections.join("\n\n");
  return { text, files, root, warnings };
}

/** `root`, then each directory below it down to `cwd` (only `cwd` when it is not under `root`). */
function pathDown(root: string, cwd: string): string[] {
  const rel = relative(root, cwd);
  if (rel === "") return [root];
  if (rel.startsWith("..") || rel.startsWith(sep)) return [cwd];
  const dirs = [root];
  let dir = root;
  for (const part of rel.split(sep)) {
    dir = join(dir, part);
    dirs.push(dir);
  }
  return dirs;
}

function displayHome(home: string): string {
  const userHome = process.env.HOME;
  if (userHome && (home === userHome || home.startsWith(userHome + sep)))
    return `~${home.slice(userHome.length)}`;
  return home;
}

async function exists(path: string): Promise<boolean> {
  return (await entryKind(path)) !== "absent";
}

async function nonEmptySize(where: ContextDir, name: string): Promise<number> {
  try {
    return (await readContextFile(where, name, 0)).size;
  } catch {
    return 0;
  }
}

/**
 * At most `limit` bytes of `name` in `where` (cut at a UTF-8 character boundary), its size, and
 * how many bytes were taken; undefined when there is no such file. Throws ToolError for one that
 * may not be read (a link out, a secret, a FIFO).
 */
async function readCapped(
  where: ContextDir,
  name: string,
  limit: number,
): Promise<{ text: string; size: number; bytes: number } | undefined> {
  let read: { bytes: Buffer; size: number };
  try {
    read = await readContextFile(where, name, limit);
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === "not_found" || code === "not_a_directory") return undefined;
    throw error;
  }
  const buffer = read.bytes;
  const got = buffer.length;
  let end = got;
  if (got < read.size && got > 0) {
    // Do not split a multi-byte character: drop the last one when it is incomplete.
    let start = end - 1;
    while (start > 0 && (buffer[start]! & 0xc0) === 0x80) start--;
    const lead = buffer[start]!;
    const length = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (start + length > end) end = start;
  }
  return { text: buffer.subarray(0, end).toString("utf8"), size: read.size, bytes: end };
}
