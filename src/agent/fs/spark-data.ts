/**
 * Writes to Spark's own data (SPARK_HOME, the data directory, scratch folders Spark made for itself):
 * paths no model, repository or task names. Anything else goes through the confined layer
 * (confined.ts), never through these.
 */
import { randomBytes } from "node:crypto";
import { chmod, mkdir, rename, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { ConfinedRoot } from "./confined.js";

/**
 * Writes `content` to `absPath` atomically: into a temporary file in the same directory, then renamed
 * over the target, so readers never see a half-written file. Parent directories are created as needed;
 * an existing file keeps its permission bits.
 */
export async function writeFileAtomic(absPath: string, content: string | Uint8Array): Promise<void> {
  const dir = path.dirname(absPath);
  await mkdir(dir, { recursive: true });
  let mode: number | undefined;
  try {
    mode = (await stat(absPath)).mode & 0o7777;
  } catch {
    mode = undefined;
  }
  const temp = path.join(
    dir,
    `.${path.basename(absPath)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`,
  );
  try {
    await writeFile(temp, content, { flag: "wx" });
    if (mode !== undefined) await chmod(temp, mode);
    await rename(temp, absPath);
  } catch (error) {
    await rm(temp, { force: true }).catch(() => undefined);
    throw error;
  }
}

/**
 * Removes a tree of Spark's own that a task worked in (a worktree, a copy): by descriptors through
 * the confined layer, so a link a command left (or swaps in while this runs) is removed, never
 * followed out of the tree. Protected names inside it (the worktree's own `.git` file) go too: it is
 * Spark's. Nothing there: nothing to do.
 */
export async function removeOwnTree(abs: string): Promise<void> {
  const parent = path.dirname(abs);
  let root: ConfinedRoot;
  try {
    root = await ConfinedRoot.open(parent, { home: "" });
  } catch {
    return; // its folder is gone already
  }
  await root.remove(path.basename(abs), { recursive: true, allowProtected: true });
}

/** Runs `fn` in a fresh private directory under `parent` (created as needed), removed afterwards. */
export async function withScratchDir<T>(parent: string, fn: (dir: string) => Promise<T>): Promise<T> {
  await mkdir(parent, { recursive: true, mode: 0o700 });
  const dir = path.join(parent, `.scratch-${process.pid}-${randomBytes(6).toString("hex")}`);
  await mkdir(dir, { mode: 0o700 });
  try {
    return await fn(dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** `$TMPDIR/spark-server-XXXXXX`: the folders of Spark's own Unix sockets (one each). */
const SOCKET_DIR = /^spark-server-[A-Za-z0-9]{6}$/;
const SOCKET_NAME = "server.sock";

/**
 * A fresh private folder (0700) in the system's temporary folder for a Unix socket of Spark's own
 * (the in-process model server's, `server.sock`): its path stays short (a socket's path has ~100
 * bytes at most), and only this user can reach the socket. `remove()` takes the folder and what is
 * in it away; so does the process's exit when nothing did (an exit code's `process.exit`). A
 * process killed outright leaves its folder: each start sweeps those of this user away in the
 * background (nothing answers on their socket).
 */
export async function privateSocketDir(): Promise<{ path: string; socket: string; remove(): Promise<void> }> {
  const [{ mkdtemp }, { rmSync }, { tmpdir }] = await Promise.all([
    import("node:fs/promises"),
    import("node:fs"),
    import("node:os"),
  ]);
  const parent = tmpdir();
  const dir = await mkdtemp(path.join(parent, "spark-server-"));
  await chmod(dir, 0o700);
  const onExit = (): void => rmSync(dir, { recursive: true, force: true });
  process.once("exit", onExit);
  void sweepDeadSocketDirs(parent, dir).catch(() => {});
  return {
    path: dir,
    socket: path.join(dir, SOCKET_NAME),
    remove: async () => {
      process.off("exit", onExit);
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Removes this user's socket folders in `parent` whose process is gone: the socket refuses a
 * connection, and the folder is older than a minute (a process that is only starting is left be).
 */
async function sweepDeadSocketDirs(parent: string, own: string): Promise<void> {
  const [{ lstat, readdir }, { connect }] = await Promise.all([
    import("node:fs/promises"),
    import("node:net"),
  ]);
  const uid = process.getuid?.();
  for (const name of await readdir(parent)) {
    const dir = path.join(parent, name);
    if (!SOCKET_DIR.test(name) || dir === own) continue;
    const info = await lstat(dir).catch(() => undefined);
    if (!info?.isDirectory() || (uid !== undefined && info.uid !== uid)) continue;
    if (Date.now() - info.mtimeMs < 60_000) continue;
    const entries = await readdir(dir).catch(() => undefined);
    if (entries?.length !== 1 || entries[0] !== SOCKET_NAME) continue;
    const dead = await new Promise<boolean>((resolve) => {
      const probe = connect(path.join(dir, SOCKET_NAME));
      probe.once("connect", () => {
        probe.destroy();
        resolve(false);
      });
      probe.once("error", (error: NodeJS.ErrnoException) => resolve(error.code === "ECONNREFUSED"));
    });
    if (dead) await rm(dir, { recursive: true, force: true });
  }
}
