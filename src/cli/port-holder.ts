/**
 * Which process listens on a TCP port, for the "port in use" message of `spark serve`. Linux only,
 * and best effort: the listening socket's inode comes from /proc/net/tcp{,6}, its owner from the
 * /proc/PID/fd links that point at it. Only this user's processes are readable, so another user's
 * (or another network namespace's) listener gives undefined and the message just says "in use".
 * Cost: one read of each table and a readlink per open descriptor of this user's processes.
 */
import { readdirSync, readFileSync, readlinkSync } from "node:fs";

export interface PortHolder {
  pid: number;
  /** The command line, its arguments joined by spaces (cut to 120 characters). */
  command: string;
}

/** Inodes of the sockets listening (state 0A) on `port`, from the kernel's tables. */
function listeningInodes(port: number): Set<string> {
  const inodes = new Set<string>();
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    let text: string;
    try {
      text = readFileSync(table, "utf8");
    } catch {
      continue;
    }
    // "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"
    for (const line of text.split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      const local = fields[1];
      if (!local || fields[3] !== "0A") continue;
      const hexPort = local.slice(local.lastIndexOf(":") + 1);
      if (Number.parseInt(hexPort, 16) === port && fields[9] && fields[9] !== "0") inodes.add(fields[9]);
    }
  }
  return inodes;
}

export function findPortHolder(port: number): PortHolder | undefined {
  if (process.platform !== "linux" || !Number.isInteger(port) || port <= 0) return undefined;
  const inodes = listeningInodes(port);
  if (inodes.size === 0) return undefined;
  const wanted = new Set([...inodes].map((inode) => `socket:[${inode}]`));
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((name) => /^\d+$/.test(name));
  } catch {
    return undefined;
  }
  for (const pid of pids) {
    let fds: string[];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue; // another user's process, or one that has exited
    }
    for (const fd of fds) {
      let target: string;
      try {
        target = readlinkSync(`/proc/${pid}/fd/${fd}`);
      } catch {
        continue;
      }
      if (!wanted.has(target)) continue;
      let command = "";
      try {
        command = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0").filter(Boolean).join(" ");
      } catch {
        // exited meanwhile: the pid alone still says who it was
      }
      return { pid: Number(pid), command: command.length > 120 ? `${command.slice(0, 117)}...` : command };
    }
  }
  return undefined;
}

/** "pid 123 (node server.js)" or "" when the holder cannot be found. */
export function describePortHolder(port: number): string {
  const holder = findPortHolder(port);
  if (!holder) return "";
  return holder.command ? `pid ${holder.pid} (${holder.command})` : `pid ${holder.pid}`;
}
