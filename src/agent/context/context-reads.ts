/**
 * How the files that give a session its context are read: skills, custom prompts and AGENTS.md.
 * Those of the project (a clone's, or written by the agent itself) go through the confined file
 * layer beneath the project root, and a file must also stay inside its own folder (a skill's file in
 * the skill's folder): a link out is refused, a FIFO never waited on, a secret never read. The
 * user's own (`~/.agents/skills`, Spark's home) may link where the user put them, but are read as
 * regular files only and never a secret (confined.ts `withUserFile`).
 */
import path from "node:path";
import { ConfinedRoot, ToolError, readPrefix, readUserDir, withUserFile } from "../fs/confined.js";

/** A folder of context files: `project` is the project root confining it; undefined for the user's own. */
export interface ContextDir {
  dir: string;
  project?: ConfinedRoot;
}

/** The project root as a root of the confined layer; undefined when it cannot be opened. */
export async function openProject(root: string): Promise<ConfinedRoot | undefined> {
  return ConfinedRoot.open(root, { label: "the project" }).catch(() => undefined);
}

const isUnder = (dir: string, rel: string): boolean => dir === "" || rel === dir || rel.startsWith(`${dir}/`);

/** The entries' names of a context folder, sorted; [] when it is missing or cannot be read. */
export async function listContextDir(where: ContextDir): Promise<string[]> {
  const project = where.project;
  if (project === undefined) return readUserDir(where.dir);
  try {
    return (await project.readdir(project.spelled(where.dir) || ".")).map((entry) => entry.name);
  } catch {
    return [];
  }
}

/**
 * At most `limit` bytes of `file` (relative to the folder) and the file's size. Throws ToolError
 * "not_found", "not_a_file" (a directory, a FIFO…), "outside_workspace" (a link out of the folder),
 * "secret_path".
 */
export async function readContextFile(
  where: ContextDir,
  file: string,
  limit: number,
): Promise<{ bytes: Buffer; size: number }> {
  if (file === "" || path.isAbsolute(file) || file.split(/[\\/]/).includes("..")) {
    throw new ToolError("invalid_argument", `${file}: not a file inside ${where.dir}.`);
  }
  const project = where.project;
  if (project === undefined) {
    return withUserFile(path.join(where.dir, file), {}, async ({ handle, info }) => ({
      bytes: await readPrefix(handle, Math.min(limit, info.size)),
      size: info.size,
    }));
  }
  const folder = await project.locate(project.spelled(where.dir) || ".");
  if (folder.kind !== "directory") throw new ToolError("not_found", `${where.dir} is not a directory.`);
  const target = await project.locate(`${folder.rel === "" ? "" : `${folder.rel}/`}${file}`);
  if (!isUnder(folder.rel, target.rel)) {
    throw new ToolError(
      "outside_workspace",
      `${file} leads out of ${where.dir} (to ${target.rel}): only the folder's own files are read.`,
    );
  }
  return project.withFile(target.rel, { final: "entry" }, async ({ handle, info }) => ({
    bytes: await readPrefix(handle, Math.min(limit, info.size)),
    size: info.size,
  }));
}
