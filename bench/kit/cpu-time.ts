/**
 * CPU time, which a loaded machine blurs far less than wall time: the calling thread's (Linux
 * `/proc/thread-self/schedstat`, nanosecond run time) and the whole process's (`process.cpuUsage`,
 * every thread: the event loop, llama.cpp's, libuv's pool, V8's helpers, and worker threads).
 * Off Linux the thread's time falls back to the process's (the figures then say so).
 *
 * Granularity: the kernel brings a running thread's schedstat up to date only at scheduler events
 * (a tick, a switch), so a thread reading measures intervals of tens of milliseconds or more (a
 * round of tokens, a whole loop), never one request. `process.cpuUsage` is exact at any interval
 * (getrusage updates the caller's own time), so short intervals use it.
 */
import { readFileSync } from "node:fs";

let threadClock: boolean | undefined;

/** Whether per-thread CPU time is available here (else `threadCpuMicros` is the process's). */
export function hasThreadClock(): boolean {
  if (threadClock === undefined) {
    try {
      readFileSync("/proc/thread-self/schedstat", "utf8");
      threadClock = true;
    } catch {
      threadClock = false;
    }
  }
  return threadClock;
}

/** CPU time of the calling thread, in microseconds (for intervals of tens of milliseconds or more). */
export function threadCpuMicros(): number {
  if (!hasThreadClock()) return processCpuMicros();
  const text = readFileSync("/proc/thread-self/schedstat", "utf8");
  return Number(text.slice(0, text.indexOf(" "))) / 1000;
}

/** CPU time of the whole process (all threads), in microseconds. */
export function processCpuMicros(): number {
  const usage = process.cpuUsage();
  return usage.user + usage.system;
}
