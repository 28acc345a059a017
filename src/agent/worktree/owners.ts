/**
 * Which running Spark owns a task workspace, so that one instance's start-up prune never removes
 * another's live worktree: a second `spark app` with another data dir (its saved tasks are not this
 * one's), the VS Code pane's app beside a browser `spark app` on the same folder, or, with the same
 * data dir, a variant that is running now (`variant-…` ids are never saved).
 *
 * Beside each workspace `<folder>/<id>` lies `<folder>/<id>.owner`: the pid of the process that made
 * (or re-opened) it, that process's start time (from /proc, so a pid the kernel re-used later does
 * not count as the owner) and the host's name. It is written before the worktree is made, so a
 * workspace another prune can see always has its owner; it goes with the workspace.
 *
 * An owner is alive when its host is this host, its pid runs, and (where /proc says) that process
 * started when the mark says. A mark from another host (a SPARK_HOME shared over the network) is
 * taken as alive: nothing here can tell. A workspace of a dead owner, or one without a mark (left by
 * a Spark before marks), is for the prune's own rule (the ids its instance keeps) to decide. These
 * files are Spark's own data under SPARK_HOME; no model, repository or task names them.
 */
import { readFileSync } from "node:fs";
import { readFile, rm } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { writeFileAtomic } from "../fs/spark-data.js";

/** Beside a workspace `<id>`, the mark of the process that owns it. */
export const OWNER_SUFFIX = ".owner";

interface OwnerMark {
  pid: number;
  /** The process's start time in clock ticks after boot (/proc/PID/stat field 22); null off Linux. */
  started: string | null;
  host: string;
}

/** A process's start time as /proc tells it (undefined where there is no /proc, or no such pid). */
function startedAt(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // "PID (COMM) STATE PPID …": COMM may hold spaces and parentheses; the fields after the last
    // ")" start at field 3, so field 22 (starttime) is the 20th of them.
    return stat.slice(stat.lastIndexOf(")") + 2).split(" ")[19];
  } catch {
    return undefined;
  }
}

const ownMark = (): OwnerMark => ({
  pid: process.pid,
  started: startedAt(process.pid) ?? null,
  host: hostname(),
});

/** Marks the workspace `<folder>/<id>` as this process's. */
export async function claimWorkspace(folder: string, id: string): Promise<void> {
  await writeFileAtomic(join(folder, id + OWNER_SUFFIX), JSON.stringify(ownMark()) + "\n");
}

/** Forgets the mark of a workspace that is gone. */
export async function releaseWorkspace(folder: string, id: string): Promise<void> {
  await rm(join(folder, id + OWNER_SUFFIX), { force: true });
}

/** Who owns `<folder>/<id>`: "self", "other" (another live process), or "none" (no mark, or its owner is dead). */
export async function workspaceOwner(folder: string, id: string): Promise<"self" | "other" | "none"> {
  let mark: Partial<OwnerMark>;
  try {
    mark = JSON.parse(await readFile(join(folder, id + OWNER_SUFFIX), "utf8")) as Partial<OwnerMark>;
  } catch {
    return "none"; // no mark, or one cut short by a crash mid-write (written atomically: rare)
  }
  if (typeof mark.pid !== "number" || !Number.isSafeInteger(mark.pid) || mark.pid <= 0) return "none";
  if (mark.host !== hostname()) return "other";
  const self = ownMark();
  if (mark.pid === self.pid && (mark.started ?? null) === self.started) return "self";
  return processAlive(mark.pid, mark.started ?? null) ? "other" : "none";
}

function processAlive(pid: number, started: string | null): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    // EPERM: it runs, as another user.
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false;
  }
  if (started === null) return true;
  const now = startedAt(pid);
  // Without /proc the pid is all there is; with it, a pid re-used by a newer process is not the owner.
  return now === undefined || now === started;
}
