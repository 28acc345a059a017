/**
 * The command sandbox: bubblewrap (`bwrap`) on Linux, or none.
 *
 * Contracts:
 * - `detectSandbox` looks for `bwrap` (env `SPARK_BWRAP`, else `PATH`) and probes it once by running
 *   `true` under the same mount and namespace flags the real commands use, because bwrap is often
 *   installed but unusable (containers without user namespaces, no permission to mount /proc). Any
 *   failure gives `{ kind: "none" }` with a reason that tells the user what to do. Nothing is cached:
 *   the caller keeps the result for the session.
 * - Inside the sandbox the whole filesystem is read-only except the workspace (bind-mounted
 *   writable, `.git` included since it lies inside it), a private `/tmp` (a fresh tmpfs, discarded
 *   afterwards), fresh `/dev` and `/proc`. All namespaces are unshared (network too unless
 *   `network` is set), the command gets its own session (no TIOCSTI on the caller's terminal) and
 *   dies with the parent. The environment, HOME included, passes through unchanged; HOME itself is
 *   read-only unless it lies inside the workspace.
 */
import { execFile } from "node:child_process";
import { constants as fsConstants } from "node:fs";
import { access, stat } from "node:fs/promises";
import path from "node:path";

export type Sandbox =
  { kind: "bubblewrap"; path: string; network: boolean } | { kind: "none"; reason: string };

export interface DetectSandboxOptions {
  /** `--sandbox off`: never sandbox. */
  disabled?: boolean;
  /** Let sandboxed commands use the network (default false). */
  network?: boolean;
}

export const SANDBOX_PROBE_TIMEOUT_MS = 5_000;

const INSTALL_HINT = "install it with `apt-get install bubblewrap`";

/** Mount and namespace flags shared by the probe and real commands; the probe binds no workspace. */
function baseFlags(network: boolean): { mounts: string[]; namespaces: string[] } {
  return {
    mounts: ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"],
    namespaces: ["--unshare-all", ...(network ? ["--share-net"] : []), "--die-with-parent", "--new-session"],
  };
}

async function isExecutableFile(file: string): Promise<boolean> {
  try {
    const info = await stat(file);
    if (!info.isFile()) return false;
    await access(file, fsConstants.X_OK);
    return true;
  } catch {
    return false;
  }
}

async function findOnPath(name: string): Promise<string | undefined> {
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) {
    if (dir === "") continue;
    const candidate = path.join(dir, name);
    if (await isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

function probe(bwrap: string, network: boolean): Promise<string | undefined> {
  const { mounts, namespaces } = baseFlags(network);
  return new Promise((resolve) => {
    execFile(
      bwrap,
      [...mounts, ...namespaces, "--", "true"],
      { timeout: SANDBOX_PROBE_TIMEOUT_MS, killSignal: "SIGKILL", encoding: "utf8" },
      (error, _stdout, stderr) => {
        if (!error) return resolve(undefined);
        if (error.killed) return resolve(`the probe timed out after ${SANDBOX_PROBE_TIMEOUT_MS / 1000} s`);
        const detail = stderr.trim().split("\n").filter(Boolean).join("; ");
        resolve(detail || error.message);
      },
    );
  });
}

export async function detectSandbox(options: DetectSandboxOptions = {}): Promise<Sandbox> {
  if (options.disabled) return { kind: "none", reason: "sandbox disabled by --sandbox off" };
  const network = options.network ?? false;
  const override = process.env.SPARK_BWRAP;
  let bwrap: string | undefined;
  if (override !== undefined && override !== "") {
    const resolved = override.includes("/") ? path.resolve(override) : await findOnPath(override);
    if (resolved === undefined || !(await isExecutableFile(resolved))) {
      return {
        kind: "none",
        reason:
          `bubblewrap (bwrap) not found at SPARK_BWRAP=${override}: commands run without a sandbox; ` +
          `${INSTALL_HINT} or fix SPARK_BWRAP`,
      };
    }
    bwrap = resolved;
  } else {
    bwrap = await findOnPath("bwrap");
    if (bwrap === undefined) {
      return {
        kind: "none",
        reason: `bubblewrap (bwrap) is not installed: commands run without a sandbox; ${INSTALL_HINT}`,
      };
    }
  }
  const failure = await probe(bwrap, network);
  if (failure !== undefined) {
    return {
      kind: "none",
      reason:
        `bwrap cannot create namespaces here (${failure}): commands run without a sandbox; ` +
        "enable unprivileged user namespaces or run with --sandbox off to silence this",
    };
  }
  return { kind: "bubblewrap", path: bwrap, network };
}

/**
 * The program and arguments that run `argv` in `cwd` under `sandbox`. The workspace bind comes
 * after `--tmpfs /tmp` so a workspace under /tmp is not hidden by the private /tmp.
 */
export function sandboxedArgv(
  sandbox: Sandbox,
  workspaceRoot: string,
  argv: string[],
  cwd: string,
): { file: string; args: string[] } {
  if (sandbox.kind === "none") {
    const [file = "", ...args] = argv;
    return { file, args };
  }
  const { mounts, namespaces } = baseFlags(sandbox.network);
  return {
    file: sandbox.path,
    args: [...mounts, "--bind", workspaceRoot, workspaceRoot, ...namespaces, "--chdir", cwd, "--", ...argv],
  };
}

export function describeSandbox(sandbox: Sandbox): string {
  if (sandbox.kind === "none") return `no sandbox: ${sandbox.reason}`;
  const network = sandbox.network ? "network allowed" : "no network";
  return `sandbox: bubblewrap (writes confined to the workspace, ${network})`;
}
