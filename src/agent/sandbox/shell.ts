/**
 * Running one shell command for the agent.
 *
 * Contracts:
 * - A string command runs as `bash -c COMMAND` (the environment is already the user's; a login shell
 *   would re-run profile scripts whose noise ends up in the model's context); an array runs exactly as given. Either way it runs
 *   under `sandbox` (see sandbox.ts, with the mounts it computes for this command) in its own
 *   process group with stdin closed.
 * - The command's environment is `env`, by default the process's without its secrets (secrets.ts
 *   `commandEnvironment`), with or without a sandbox; and before the first command this process
 *   wipes them from its own original environment block (`scrubProcessEnviron`), which an unsandboxed
 *   command could otherwise read from `/proc/$PPID/environ`.
 * - `runCommand` never throws for anything the command does: a missing program is exit code 127
 *   with the shell's message (126 for one that cannot be executed), and a failure to start at all
 *   (a vanished sandbox binary, a missing working directory) is `exitCode: null` with the error in
 *   `output`.
 * - stdout and stderr are interleaved in `output` in arrival order. At most `maxOutputBytes` are
 *   kept: the first half and the last half, joined by a marker line naming how many bytes were
 *   omitted, so memory stays bounded whatever the command prints. `onOutput` sees everything as it
 *   arrives (decoded per stream; errors it throws are ignored).
 * - On timeout or abort the whole process group gets SIGTERM, then SIGKILL 2 s later; `output` then
 *   ends with a line saying why the command was killed. Background processes a command leaves
 *   behind after exiting normally are not killed; their hold on the pipes is cut shortly after the
 *   command exits, so they cannot keep the call waiting.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { closeSync, openSync } from "node:fs";
import { stat } from "node:fs/promises";
import { StringDecoder } from "node:string_decoder";
import { SECCOMP_FD, releasePlaceholders, sandboxMounts, sandboxedArgv, type Sandbox } from "./sandbox.js";
import { commandEnvironment, scrubProcessEnviron } from "./secrets.js";

export interface CommandResult {
  /** Null when the command was killed by a signal or never started. */
  exitCode: number | null;
  signal: string | null;
  /** stdout and stderr interleaved as they arrived, possibly truncated in the middle. */
  output: string;
  truncated: boolean;
  timedOut: boolean;
  durationMs: number;
  cancelled: boolean;
}

export interface RunCommandOptions {
  workspaceRoot: string;
  cwd: string;
  sandbox: Sandbox;
  /** Default 120 000. */
  timeoutMs?: number;
  /** Default 64 KiB. */
  maxOutputBytes?: number;
  signal?: AbortSignal;
  onOutput?: (chunk: string) => void;
  /** The command's environment; default `commandEnvironment(process.env)` (secrets removed). */
  env?: NodeJS.ProcessEnv;
  /** Where the sandbox reads HOME, PATH and the socket variables from; default `process.env`. */
  hostEnv?: NodeJS.ProcessEnv;
}

export const DEFAULT_TIMEOUT_MS = 120_000;
export const DEFAULT_MAX_OUTPUT_BYTES = 64 * 1024;
/** Between SIGTERM and SIGKILL. */
export const KILL_GRACE_MS = 2_000;
/** How long after the command exits its leftover background processes may hold the pipes. */
const PIPE_DRAIN_MS = 250;

/** Keeps the first `headBudget` and the last `tailBudget` bytes of a stream of chunks. */
class HeadTailBuffer {
  private readonly head: Buffer[] = [];
  private headBytes = 0;
  private tail: Buffer[] = [];
  private tailBytes = 0;
  total = 0;

  constructor(
    private readonly headBudget: number,
    private readonly tailBudget: number,
  ) {}

  push(chunk: Buffer): void {
    this.total += chunk.length;
    let rest = chunk;
    if (this.headBytes < this.headBudget) {
      const take = Math.min(this.headBudget - this.headBytes, rest.length);
      this.head.push(rest.subarray(0, take));
      this.headBytes += take;
      rest = rest.subarray(take);
    }
    if (rest.length === 0 || this.tailBudget === 0) return;
    this.tail.push(rest);
    this.tailBytes += rest.length;
    while (this.tail.length > 1 && this.tailBytes - this.tail[0]!.length >= this.tailBudget) {
      this.tailBytes -= this.tail.shift()!.length;
    }
    if (this.tailBytes > 2 * this.tailBudget) {
      this.tail = [Buffer.from(Buffer.concat(this.tail).subarray(this.tailBytes - this.tailBudget))];
      this.tailBytes = this.tailBudget;
    }
  }

  get truncated(): boolean {
    return this.total > this.headBudget + this.tailBudget;
  }

  text(): string {
    if (!this.truncated) return Buffer.concat([...this.head, ...this.tail]).toString("utf8");
    const decoder = new StringDecoder("utf8");
    const head = decoder.write(Buffer.concat(this.head));
    let tail = Buffer.concat(this.tail);
    tail = tail.subarray(tail.length - this.tailBudget);
    let start = 0;
    while (start < tail.length && start < 3 && (tail[start]! & 0xc0) === 0x80) start++;
    const omitted = this.total - this.headBytes - tail.length + start;
    return `${head}\n[… ${omitted} bytes of output omitted …]\n${tail.subarray(start).toString("utf8")}`;
  }
}

function toArgv(command: string | string[]): string[] {
  return typeof command === "string" ? ["bash", "-c", command] : [...command];
}

function appendLine(output: string, line: string): string {
  if (output === "" || output.endsWith("\n")) return `${output}${line}\n`;
  return `${output}\n${line}\n`;
}

export async function runCommand(
  command: string | string[],
  options: RunCommandOptions,
): Promise<CommandResult> {
  // Not the secrets this process holds in its own /proc/PID/environ either (--sandbox off).
  scrubProcessEnviron();
  const started = performance.now();
  const timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const maxOutputBytes = Math.max(0, options.maxOutputBytes ?? DEFAULT_MAX_OUTPUT_BYTES);
  const argv = toArgv(command);
  const elapsed = () => Math.round(performance.now() - started);
  const failed = (output: string, exitCode: number | null = null): CommandResult => ({
    exitCode,
    signal: null,
    output,
    truncated: false,
    timedOut: false,
    durationMs: elapsed(),
    cancelled: false,
  });

  if (argv.length === 0 || argv[0] === "") return failed("empty command");
  if (options.signal?.aborted) {
    return { ...failed("[command cancelled before it started]\n"), cancelled: true };
  }
  try {
    if (!(await stat(options.cwd)).isDirectory()) return failed(`not a directory: ${options.cwd}`);
  } catch {
    return failed(`working directory does not exist: ${options.cwd}`);
  }

  let mounts;
  try {
    mounts = await sandboxMounts(options.sandbox, options.workspaceRoot, options.hostEnv ?? process.env);
  } catch (error) {
    return failed(`failed to prepare the sandbox: ${(error as Error).message}\n`);
  }
  const { file, args } = sandboxedArgv(options.sandbox, options.workspaceRoot, argv, options.cwd, mounts);
  const headBudget = Math.floor(maxOutputBytes / 2);
  const buffer = new HeadTailBuffer(headBudget, maxOutputBytes - headBudget);

  return new Promise<CommandResult>((resolve) => {
    let child: ChildProcess;
    let filter: number | undefined;
    try {
      const stdio: ("ignore" | "pipe" | number)[] = ["ignore", "pipe", "pipe"];
      if (mounts.seccomp !== "") {
        // bwrap reads the seccomp filter from this descriptor of its own.
        filter = openSync(mounts.seccomp, "r");
        stdio[SECCOMP_FD] = filter;
      }
      child = spawn(file, args, {
        cwd: options.cwd,
        env: options.env ?? commandEnvironment(process.env),
        stdio,
        detached: true,
      });
    } catch (error) {
      releasePlaceholders(mounts.placeholders);
      resolve(failed(`failed to start ${file}: ${(error as Error).message}`));
      return;
    } finally {
      if (filter !== undefined) closeSync(filter);
    }

    let done = false;
    let timedOut = false;
    let cancelled = false;
    let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
    let killTimer: NodeJS.Timeout | undefined;
    let drainTimer: NodeJS.Timeout | undefined;

    const killGroup = (signal: NodeJS.Signals) => {
      if (child.pid === undefined) return;
      try {
        process.kill(-child.pid, signal);
      } catch {
        // The group is already gone.
      }
    };
    const terminate = () => {
      if (killTimer !== undefined) return;
      killGroup("SIGTERM");
      killTimer = setTimeout(() => killGroup("SIGKILL"), KILL_GRACE_MS);
    };
    const timeoutTimer = setTimeout(() => {
      timedOut = true;
      terminate();
    }, timeoutMs);
    const onAbort = () => {
      cancelled = true;
      terminate();
    };
    options.signal?.addEventListener("abort", onAbort, { once: true });

    const finish = (result: CommandResult) => {
      if (done) return;
      done = true;
      releasePlaceholders(mounts.placeholders);
      clearTimeout(timeoutTimer);
      clearTimeout(drainTimer);
      if (killTimer !== undefined) {
        clearTimeout(killTimer);
        killGroup("SIGKILL");
      }
      options.signal?.removeEventListener("abort", onAbort);
      child.stdout?.destroy();
      child.stderr?.destroy();
      resolve(result);
    };

    const complete = () => {
      let output = buffer.text();
      if (timedOut) output = appendLine(output, `[command timed out and was killed after ${timeoutMs} ms]`);
      else if (cancelled) output = appendLine(output, "[command cancelled and killed]");
      finish({
        exitCode: exit?.code ?? null,
        signal: exit?.signal ?? null,
        output,
        truncated: buffer.truncated,
        timedOut,
        durationMs: elapsed(),
        cancelled,
      });
    };

    const attach = (stream: NodeJS.ReadableStream | null) => {
      if (stream === null) return;
      const decoder = new StringDecoder("utf8");
      stream.on("data", (chunk: Buffer) => {
        buffer.push(chunk);
        if (options.onOutput === undefined) return;
        const text = decoder.write(chunk);
        if (text === "") return;
        try {
          options.onOutput(text);
        } catch {
          // A failing observer must not break the command.
        }
      });
      stream.on("error", () => {});
    };
    attach(child.stdout);
    attach(child.stderr);

    child.on("error", (error: NodeJS.ErrnoException) => {
      if (child.pid !== undefined) return;
      if (options.sandbox.kind === "none" && error.code === "ENOENT") {
        finish(failed(`${argv[0]}: command not found\n`, 127));
      } else if (options.sandbox.kind === "none" && error.code === "EACCES") {
        finish(failed(`${argv[0]}: permission denied\n`, 126));
      } else if (options.sandbox.kind === "bubblewrap") {
        finish(failed(`failed to start the sandbox (${file}): ${error.message}\n`));
      } else {
        finish(failed(`failed to start ${file}: ${error.message}\n`));
      }
    });
    child.on("exit", (code, signal) => {
      exit = { code, signal };
      drainTimer = setTimeout(complete, PIPE_DRAIN_MS);
    });
    child.on("close", (code, signal) => {
      exit ??= { code, signal };
      complete();
    });
  });
}

/** The text given back to the model, in the shape of Codex's shell tool output. */
export function formatCommandOutput(result: CommandResult): string {
  const exitCode = result.exitCode ?? (result.signal !== null ? `none (killed by ${result.signal})` : "none");
  const lines = [`Exit code: ${exitCode}`, `Wall time: ${(result.durationMs / 1000).toFixed(1)} seconds`];
  if (result.timedOut) lines.push("Timed out: the command ran too long and was killed.");
  if (result.cancelled) lines.push("Cancelled: the user interrupted the command and it was killed.");
  if (result.truncated) lines.push("Output truncated: the middle of the output was omitted.");
  lines.push("Output:", result.output);
  return lines.join("\n");
}
