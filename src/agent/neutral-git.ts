/**
 * Git as Spark runs it itself, on the host, in a workspace where sandboxed commands write: with its
 * configuration neutralised. The repository's config may have been written by such a command (a
 * `.git` it created, a nested repository), and HOME may lie in the workspace (~/.gitconfig), so every
 * git command Spark issues goes through `neutralGit`.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";

const run = promisify(execFile);

/** Settings that make git start a program, overridden on the command line (which wins over every file). */
const NEUTRAL_CONFIG = [
  "core.fsmonitor=false",
  "core.hooksPath=/dev/null",
  "core.pager=cat",
  "core.untrackedCache=false",
  "core.sshCommand=false",
  "diff.external=",
  "protocol.allow=never",
];

/**
 * `git -C root ARGS`'s stdout, with no system or global configuration, the overrides of
 * `NEUTRAL_CONFIG`, none of this process's GIT_* variables (GIT_DIR, GIT_EXTERNAL_DIFF…) and no
 * optional locks (nothing written to the index). Only for plumbing that reads objects (`rev-parse`,
 * `cat-file blob`): porcelain that looks at the work tree (`status`, `diff`) would still run clean
 * filters and textconv drivers that the repository's config defines under names no override can know
 * in advance; read the work tree directly instead (change-record.ts). Rejects as execFile does.
 */
export async function neutralGit(
  root: string,
  args: readonly string[],
  maxBuffer = 1024 * 1024,
): Promise<Buffer> {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!name.toUpperCase().startsWith("GIT_")) env[name] = value;
  }
  Object.assign(env, {
    GIT_CONFIG_NOSYSTEM: "1",
    GIT_CONFIG_GLOBAL: "/dev/null",
    GIT_ATTR_NOSYSTEM: "1",
    GIT_OPTIONAL_LOCKS: "0",
    GIT_TERMINAL_PROMPT: "0",
    GIT_NO_REPLACE_OBJECTS: "1",
  });
  const config = NEUTRAL_CONFIG.flatMap((setting) => ["-c", setting]);
  const { stdout } = await run("git", [...config, "-C", root, ...args], {
    env,
    encoding: "buffer",
    maxBuffer,
  });
  return stdout;
}
