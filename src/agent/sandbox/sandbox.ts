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
 *   writable), a private `/tmp` (a fresh tmpfs, discarded afterwards), fresh `/dev` and `/proc`.
 *   All namespaces are unshared (network too unless `network` is set), the command gets its own
 *   session (no TIOCSTI on the caller's terminal) and dies with the parent.
 * - The workspace's protected paths (`.git` and the others of protected-paths.ts) that exist when
 *   the command starts are re-bound read-only over it, so a command cannot plant git hooks or config
 *   that would run outside the sandbox later. Those missing at the workspace root are covered by an
 *   empty read-only directory for the command's lifetime (`placeholders`), so a command cannot
 *   create them either (`git init` then `git config core.fsmonitor …`): bwrap makes the mount point,
 *   an empty directory git ignores, and `releasePlaceholders` removes it once no command needs it.
 * - A workspace that is a git worktree (an app task's, src/agent/worktree) gets its repository's
 *   git directory re-bound read-only too (`linkedGitDir`), so git works in it and cannot write there.
 * - Unless `allowSecrets` (`--sandbox-allow-secrets`): the home directory's secrets (secrets.ts
 *   `HOME_SECRETS`) and the `hide` paths (the data directory) are covered, directories by an empty
 *   tmpfs and files by an empty read-only file (not /dev/null: bwrap mounts binds `nodev`, so it
 *   could not be opened, and programs treat an empty config file better than an unreadable one);
 *   so are the sockets the environment names (SSH agent, D-Bus,
 *   Docker). `/run` (and `/var/run`, and `XDG_RUNTIME_DIR` wherever it is) become an empty tmpfs,
 *   because unsharing namespaces does not stop `connect()` to a Unix socket in the file system
 *   (docker.sock, the D-Bus buses, agents under /run/user): only what /run needs to keep working is
 *   put back (its top-level symlinks, a resolv.conf that lives there, `PATH` directories under it).
 *   A path that contains the workspace is never hidden; one inside it is, wherever the workspace
 *   lies (HOME inside a workspace under /tmp). Abstract Unix sockets belong to the network
 *   namespace: unreachable without `network`; with it, the seccomp filter of socket-filter.ts
 *   (`--seccomp`, read from the command's fd `SECCOMP_FD`) refuses to create Unix sockets at all.
 * - The environment is the caller's business (shell.ts passes secrets.ts `commandEnvironment`).
 */
import { spawn } from "node:child_process";
import {
  accessSync,
  closeSync,
  constants as fsConstants,
  lstatSync,
  openSync,
  rmdirSync,
  rmSync,
} from "node:fs";
import {
  access,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  readlink,
  realpath,
  stat,
  writeFile,
} from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { PROTECTED_NAMES, findProtectedPaths } from "./protected-paths.js";
import { HOME_SECRETS, socketPathsFromEnv } from "./secrets.js";
import { unixSocketFilter } from "./socket-filter.js";

export type Sandbox =
  | {
      kind: "bubblewrap";
      path: string;
      network: boolean;
      /** Commands see the home directory's secrets and the host's sockets (default false). */
      allowSecrets?: boolean;
      /** More absolute paths to hide unless `allowSecrets` (the data directory). */
      hide?: readonly string[];
    }
  | { kind: "none"; reason: string };

export interface DetectSandboxOptions {
  /** `--sandbox off`: never sandbox. */
  disabled?: boolean;
  /** Let sandboxed commands use the network (default false). */
  network?: boolean;
  /** `--sandbox-allow-secrets`: do not hide secrets and host sockets (default false). */
  allowSecrets?: boolean;
  /** More absolute paths to hide (the data directory). */
  hide?: readonly string[];
}

export const SANDBOX_PROBE_TIMEOUT_MS = 5_000;

/** The file descriptor of the sandboxed process from which bwrap reads the seccomp filter. */
export const SECCOMP_FD = 3;

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

/** Runs `true` under the base flags (and the seccomp filter at `seccomp`, unless ""); a failure's text. */
function probe(bwrap: string, network: boolean, seccomp: string): Promise<string | undefined> {
  const { mounts, namespaces } = baseFlags(network);
  const filter = seccomp === "" ? [] : ["--seccomp", String(SECCOMP_FD)];
  return new Promise((resolve) => {
    let fd: number | undefined;
    let child;
    try {
      if (seccomp !== "") fd = openSync(seccomp, "r");
      child = spawn(bwrap, [...mounts, ...namespaces, ...filter, "--", "true"], {
        stdio: ["ignore", "ignore", "pipe", ...(fd === undefined ? [] : [fd])],
      });
    } catch (error) {
      resolve((error as Error).message);
      return;
    } finally {
      if (fd !== undefined) closeSync(fd);
    }
    let stderr = "";
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill("SIGKILL");
    }, SANDBOX_PROBE_TIMEOUT_MS);
    child.stderr?.on("data", (chunk: Buffer) => (stderr += chunk.toString("utf8")));
    child.on("error", (error) => {
      clearTimeout(timer);
      resolve(error.message);
    });
    child.on("close", (code, signal) => {
      clearTimeout(timer);
      if (code === 0) return resolve(undefined);
      if (timedOut) return resolve(`the probe timed out after ${SANDBOX_PROBE_TIMEOUT_MS / 1000} s`);
      const detail = stderr.trim().split("\n").filter(Boolean).join("; ");
      resolve(detail || `bwrap exited with ${code ?? signal}`);
    });
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
  let filter = "";
  try {
    if (network && !options.allowSecrets) filter = (await privateEmpties()).filter;
  } catch (error) {
    return {
      kind: "none",
      reason: `cannot write the sandbox's files in ${os.tmpdir()} (${(error as Error).message}): commands run without a sandbox`,
    };
  }
  const failure = await probe(bwrap, network, filter);
  if (failure !== undefined) {
    return {
      kind: "none",
      reason:
        `bwrap cannot create namespaces here (${failure}): commands run without a sandbox; ` +
        "enable unprivileged user namespaces or run with --sandbox off to silence this",
    };
  }
  return {
    kind: "bubblewrap",
    path: bwrap,
    network,
    ...(options.allowSecrets ? { allowSecrets: true } : {}),
    ...(options.hide && options.hide.length > 0 ? { hide: options.hide.map((p) => path.resolve(p)) } : {}),
  };
}

/** The per-command mounts of `sandboxMounts`, in the order they are applied. */
export interface SandboxMounts {
  /** Empty tmpfs over /run (and /var/run when it is a directory of its own), before the workspace. */
  hideRun: string[];
  /** [target, link]: /run's top-level symlinks, recreated inside the empty /run. */
  runSymlinks: [string, string][];
  /** Paths under /run put back read-only (resolv.conf, PATH directories). */
  runKept: string[];
  /** After the workspace: directories covered by an empty tmpfs. */
  hiddenDirs: string[];
  /** After the workspace: files and sockets covered by `emptyFile`. */
  hiddenFiles: string[];
  /** An empty read-only file of this process, bound over `hiddenFiles`. */
  emptyFile: string;
  /** Last: protected paths in the workspace, re-bound read-only. */
  readOnly: string[];
  /**
   * Protected names missing at the workspace root, covered by `emptyDir` so that the command cannot
   * create them; held until `releasePlaceholders` is called with them.
   */
  placeholders: string[];
  /** An empty read-only directory of this process, bound over `placeholders`. */
  emptyDir: string;
  /** The seccomp filter (socket-filter.ts) to pass as fd `SECCOMP_FD`, or "" for none. */
  seccomp: string;
}

export const NO_MOUNTS: SandboxMounts = {
  hideRun: [],
  runSymlinks: [],
  runKept: [],
  hiddenDirs: [],
  hiddenFiles: [],
  emptyFile: "",
  readOnly: [],
  placeholders: [],
  emptyDir: "",
  seccomp: "",
};

interface Empties {
  file: string;
  dir: string;
  /** The seccomp filter of socket-filter.ts, or "" where there is none for this CPU. */
  filter: string;
}

let empties: Promise<Empties> | undefined;

/**
 * An empty, read-only file and directory, and the seccomp filter, in a private temporary directory,
 * made once and removed at exit.
 */
function privateEmpties(): Promise<Empties> {
  empties ??= (async () => {
    const top = await mkdtemp(path.join(os.tmpdir(), "spark-empty-"));
    process.once("exit", () => rmSync(top, { recursive: true, force: true }));
    const file = path.join(top, "empty");
    await writeFile(file, "", { mode: 0o444 });
    const dir = path.join(top, "empty-dir");
    await mkdir(dir, { mode: 0o555 });
    const program = unixSocketFilter();
    let filter = "";
    if (program !== undefined) {
      filter = path.join(top, "unix-socket-filter.bpf");
      await writeFile(filter, program, { mode: 0o444 });
    }
    return { file, dir, filter };
  })().catch((error: unknown) => {
    empties = undefined; // tried again by the next command
    throw error;
  });
  return empties;
}

/** Placeholders in use, by path: how many running commands hold each. */
const heldPlaceholders = new Map<string, number>();

/**
 * The protected names missing at `workspaceRoot` (or already placeholders of a running command),
 * counted as held. Synchronous, so no other command can see the path between the check and the hold.
 * Nothing when the root is not writable: the command could not create them either, and bwrap could
 * not make the mount points.
 */
function holdPlaceholders(workspaceRoot: string): string[] {
  try {
    accessSync(workspaceRoot, fsConstants.W_OK);
  } catch {
    return [];
  }
  const held: string[] = [];
  for (const name of PROTECTED_NAMES) {
    const target = path.join(workspaceRoot, name);
    if (!heldPlaceholders.has(target)) {
      try {
        lstatSync(target);
        continue; // it exists: `readOnly` covers it (a symlink: see protected-paths.ts)
      } catch {
        // missing: hold it
      }
    }
    heldPlaceholders.set(target, (heldPlaceholders.get(target) ?? 0) + 1);
    held.push(target);
  }
  return held;
}

/**
 * Gives back the placeholders of a command that has ended (`SandboxMounts.placeholders`): the last
 * one out removes the mount point bwrap left, when it is still an empty directory.
 */
export function releasePlaceholders(placeholders: readonly string[]): void {
  for (const target of placeholders) {
    const count = (heldPlaceholders.get(target) ?? 1) - 1;
    if (count > 0) {
      heldPlaceholders.set(target, count);
      continue;
    }
    heldPlaceholders.delete(target);
    try {
      rmdirSync(target);
    } catch {
      // Gone already, or not empty: someone outside the sandbox made it theirs.
    }
  }
}

function isWithin(root: string, candidate: string): boolean {
  const rel = path.relative(root, candidate);
  return rel === "" || (rel !== ".." && !rel.startsWith(`..${path.sep}`) && !path.isAbsolute(rel));
}

async function kindOf(p: string): Promise<{ real: string; dir: boolean } | undefined> {
  try {
    const real = await realpath(p);
    return { real, dir: (await stat(real)).isDirectory() };
  } catch {
    return undefined;
  }
}

/**
 * The repository a worktree workspace belongs to (a task's worktree, src/agent/worktree): its `.git`
 * is a file pointing at `<repo>/.git/worktrees/ID`, which needs the repository's git directory (the
 * objects, refs, config). Re-bound read-only, so `git status` and `git diff` work inside the
 * worktree even where the repository lies in a path the sandbox empties (/tmp), and nothing there
 * can be written. Empty for a workspace that holds its own `.git` directory, or none.
 */
async function linkedGitDir(workspaceRoot: string): Promise<string[]> {
  for (let dir = workspaceRoot; ; dir = path.dirname(dir)) {
    const dotGit = path.join(dir, ".git");
    let text: string;
    try {
      const info = lstatSync(dotGit);
      if (!info.isFile()) return [];
      text = await readFile(dotGit, "utf8");
    } catch {
      if (path.dirname(dir) === dir) return [];
      continue;
    }
    const match = /^gitdir:\s*(.+?)\s*$/m.exec(text);
    if (!match) return [];
    try {
      const gitdir = path.resolve(dir, match[1]!);
      let common = gitdir;
      try {
        common = path.resolve(gitdir, (await readFile(path.join(gitdir, "commondir"), "utf8")).trim());
      } catch {
        // A submodule's gitdir: no common directory beside it.
      }
      const real = await realpath(common);
      return isWithin(workspaceRoot, real) ? [] : [real];
    } catch {
      return [];
    }
  }
}

/**
 * What to mount for one command in `workspaceRoot` (a real path) under `sandbox`, from the file
 * system as it is now and the host environment `env` (HOME, PATH, XDG_RUNTIME_DIR, socket
 * variables). What cannot be examined is left as it is; throws only when the private files it binds
 * (an empty file and directory, the seccomp filter) cannot be written in TMPDIR. The caller must pass the
 * result's `placeholders` to `releasePlaceholders` once the command has ended.
 */
export async function sandboxMounts(
  sandbox: Sandbox,
  workspaceRoot: string,
  env: NodeJS.ProcessEnv = process.env,
): Promise<SandboxMounts> {
  if (sandbox.kind === "none") return NO_MOUNTS;
  const readOnly = [...(await findProtectedPaths(workspaceRoot)), ...(await linkedGitDir(workspaceRoot))];
  const { file: emptyFile, dir: emptyDir, filter } = await privateEmpties();
  if (sandbox.allowSecrets) {
    return { ...NO_MOUNTS, readOnly, emptyDir, placeholders: holdPlaceholders(workspaceRoot) };
  }

  const hideRun: string[] = [];
  const runSymlinks: [string, string][] = [];
  const runKept: string[] = [];
  const runInfo = await kindOf("/run");
  const runHidden = runInfo?.real === "/run" && runInfo.dir;
  if (runHidden) {
    hideRun.push("/run");
    const varRun = await kindOf("/var/run");
    if (varRun?.dir && varRun.real !== "/run" && !isWithin(varRun.real, workspaceRoot)) {
      hideRun.push(varRun.real);
    }
    try {
      for (const entry of await readdir("/run", { withFileTypes: true })) {
        if (!entry.isSymbolicLink()) continue;
        const link = path.join("/run", entry.name);
        runSymlinks.push([await readlink(link), link]);
      }
    } catch {
      // Nothing to recreate.
    }
    const resolv = await kindOf("/etc/resolv.conf");
    if (resolv && !resolv.dir && isWithin("/run", resolv.real)) runKept.push(resolv.real);
    for (const dir of (env.PATH ?? "").split(path.delimiter)) {
      if (!path.isAbsolute(dir) || !isWithin("/run", path.resolve(dir))) continue;
      if ((await kindOf(dir))?.dir && !runKept.includes(path.resolve(dir))) runKept.push(path.resolve(dir));
    }
  }

  const home = env.HOME || os.homedir();
  const candidates = [
    ...HOME_SECRETS.map((rel) => path.join(home, rel)),
    ...socketPathsFromEnv(env),
    ...(env.XDG_RUNTIME_DIR && path.isAbsolute(env.XDG_RUNTIME_DIR) ? [env.XDG_RUNTIME_DIR] : []),
    ...(sandbox.hide ?? []),
  ];
  const hiddenDirs: string[] = [];
  const hiddenFiles: string[] = [];
  for (const candidate of candidates) {
    const info = await kindOf(candidate);
    if (info === undefined) continue;
    // The private /tmp and the emptied /run hide what lies in them, except inside the workspace:
    // its bind comes after them and shows it again (a workspace under /tmp holding HOME).
    const emptied =
      !isWithin(workspaceRoot, info.real) &&
      (isWithin("/tmp", info.real) ||
        (runHidden && isWithin("/run", info.real)) ||
        hideRun.some((dir) => isWithin(dir, info.real)));
    const covered =
      isWithin(info.real, workspaceRoot) || emptied || hiddenDirs.some((dir) => isWithin(dir, info.real));
    if (covered) continue;
    if (info.dir) hiddenDirs.push(info.real);
    else if (!hiddenFiles.includes(info.real)) hiddenFiles.push(info.real);
  }
  return {
    hideRun,
    runSymlinks,
    runKept,
    hiddenDirs,
    hiddenFiles,
    emptyFile,
    readOnly,
    placeholders: holdPlaceholders(workspaceRoot),
    emptyDir,
    seccomp: sandbox.network ? filter : "",
  };
}

/**
 * The program and arguments that run `argv` in `cwd` under `sandbox`, with the per-command `mounts`
 * of `sandboxMounts`. The workspace bind comes after `--tmpfs /tmp` and the emptied /run, so a
 * workspace under either is not hidden; the hidden secrets and the read-only protected paths come
 * after the workspace, so they apply inside it too.
 */
export function sandboxedArgv(
  sandbox: Sandbox,
  workspaceRoot: string,
  argv: string[],
  cwd: string,
  mounts: SandboxMounts = NO_MOUNTS,
): { file: string; args: string[] } {
  if (sandbox.kind === "none") {
    const [file = "", ...args] = argv;
    return { file, args };
  }
  const base = baseFlags(sandbox.network);
  return {
    file: sandbox.path,
    args: [
      ...base.mounts,
      ...mounts.hideRun.flatMap((dir) => ["--tmpfs", dir]),
      ...mounts.runSymlinks.flatMap(([target, link]) => ["--symlink", target, link]),
      ...mounts.runKept.flatMap((p) => ["--ro-bind", p, p]),
      "--bind",
      workspaceRoot,
      workspaceRoot,
      ...mounts.hiddenDirs.flatMap((dir) => ["--tmpfs", dir]),
      ...mounts.hiddenFiles.flatMap((file) => ["--ro-bind", mounts.emptyFile, file]),
      ...mounts.readOnly.flatMap((p) => ["--ro-bind", p, p]),
      ...mounts.placeholders.flatMap((p) => ["--ro-bind", mounts.emptyDir, p]),
      ...base.namespaces,
      ...(mounts.seccomp === "" ? [] : ["--seccomp", String(SECCOMP_FD)]),
      "--chdir",
      cwd,
      "--",
      ...argv,
    ],
  };
}

export function describeSandbox(sandbox: Sandbox): string {
  if (sandbox.kind === "none") return `no sandbox: ${sandbox.reason}`;
  const network = !sandbox.network
    ? "no network"
    : sandbox.allowSecrets || unixSocketFilter() === undefined
      ? "network allowed"
      : "network allowed, no Unix sockets";
  const secrets = sandbox.allowSecrets ? "secrets visible" : "secrets hidden";
  return `sandbox: bubblewrap (writes confined to the workspace, .git read-only, ${secrets}, ${network})`;
}
