/**
 * Git as Spark runs it itself, on the host, in a workspace where sandboxed commands write: with its
 * configuration neutralised. The repository's config may have been written by such a command (a
 * `.git` it created, a nested repository), and HOME may lie in the workspace (~/.gitconfig), so every
 * git command Spark issues goes through `neutralGit`.
 */
import { execFile, spawn } from "node:child_process";
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

/** Options of `neutralGit`: extra GIT_* variables (GIT_INDEX_FILE, author) and what to send on stdin. */
export interface NeutralGitOptions {
  /** Set after the neutral environment is built, so these are the only GIT_* variables git sees. */
  env?: Record<string, string>;
  /** Written to git's stdin (`update-index --index-info`, `cat-file --batch`); otherwise stdin is empty. */
  input?: string | Buffer;
}

/** The environment every Spark git command runs in: none of this process's GIT_* variables. */
function neutralEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
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
  return Object.assign(env, extra);
}

/** Whether `root` is inside a git work tree, asked with the neutral configuration (false when git says no or fails). */
export async function isGitWorkTree(root: string): Promise<boolean> {
  try {
    return (
      (await neutralGit(root, ["rev-parse", "--is-inside-work-tree"])).toString("utf8").trim() === "true"
    );
  } catch {
    return false;
  }
}

/**
 * `git -C root ARGS`'s stdout, with no system or global configuration, the overrides of
 * `NEUTRAL_CONFIG`, none of this process's GIT_* variables (GIT_DIR, GIT_EXTERNAL_DIFF…) and no
 * optional locks (nothing written to the index). Only for plumbing that reads objects (`rev-parse`,
 * `cat-file blob`): porcelain that looks at the work tree (`status`, `diff`) would still run clean
 * filters and textconv drivers that the repository's config defines under names no override can know
 * in advance; read the work tree directly instead (change-record.ts). Rejects as execFile does
 * (the error carries `code`, the exit status, and `stderr`).
 */
export async function neutralGit(
  root: string,
  args: readonly string[],
  maxBuffer = 1024 * 1024,
  options: NeutralGitOptions = {},
): Promise<Buffer> {
  const env = neutralEnv(options.env);
  const config = NEUTRAL_CONFIG.flatMap((setting) => ["-c", setting]);
  const argv = [...config, "-C", root, ...args];
  if (options.input === undefined) {
    const { stdout } = await run("git", argv, { env, encoding: "buffer", maxBuffer });
    return stdout;
  }
  const input = options.input;
  return new Promise<Buffer>((resolve, reject) => {
    const child = spawn("git", argv, { env, stdio: ["pipe", "pipe", "pipe"] });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    let size = 0;
    let failed = false;
    child.stdout.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > maxBuffer && !failed) {
        failed = true;
        child.kill();
        reject(
          Object.assign(new Error(`git ${args.join(" ")}: output over ${maxBuffer} bytes`), {
            code: "ERR_CHILD_PROCESS_STDIO_MAXBUFFER",
          }),
        );
      }
      out.push(chunk);
    });
    child.stderr.on("data", (chunk: Buffer) => err.push(chunk));
    child.on("error", (error) => {
      if (!failed) reject(error);
      failed = true;
    });
    // git may exit before reading all its input (a usage error): EPIPE is reported by `close`.
    child.stdin.on("error", () => undefined);
    child.on("close", (code) => {
      if (failed) return;
      const stderr = Buffer.concat(err).toString("utf8");
      if (code === 0) resolve(Buffer.concat(out));
      else
        reject(
          Object.assign(new Error(`git ${args.join(" ")} exited with ${code}: ${stderr.trim()}`), {
            code,
            stderr,
            stdout: Buffer.concat(out),
          }),
        );
    });
    child.stdin.end(input);
  });
}
