/**
 * OpenAI's Codex CLI (`@openai/codex`, unmodified) for the tests that drive it against Spark:
 * where its binary is (`SPARK_CODEX_BIN` or the npm dependency's), a skip reason when it is not
 * there, the script of the task every such test gives it (a shell command through `exec_command`,
 * a file added through `apply_patch`, then a closing message), and `codexExec`, which runs
 * `codex exec --json` to its end with nothing of this machine's but PATH: its HOME and CODEX_HOME
 * are the one given, so no config but the test's is read.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

export const CODEX_BIN =
  process.env.SPARK_CODEX_BIN || fileURLToPath(new URL("../../node_modules/.bin/codex", import.meta.url));

/** `describe`'s `skip`: false where the Codex CLI is installed, else why not. */
export const CODEX_SKIP: false | string = existsSync(CODEX_BIN)
  ? false
  : `Codex CLI not found at ${CODEX_BIN}; run npm install`;

/** Only to keep a broken run from hanging the suite; no assertion depends on it. */
const SAFETY_TIMEOUT_MS = 120_000;

/** The model's side of the task: run `command`, add hello.txt with apply_patch (a freeform tool), say `done`. */
export function codexTaskScript(command: string, done: string): object[] {
  return [
    {
      output: [
        { type: "message", text: "Running a command." },
        {
          type: "function_call",
          name: "exec_command",
          arguments: JSON.stringify({ cmd: command, login: false }),
        },
      ],
    },
    {
      output: [
        {
          type: "custom_tool_call",
          name: "apply_patch",
          input: "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n",
        },
      ],
    },
    { output: [{ type: "message", text: done }] },
  ];
}

export interface CodexEvent {
  type: string;
  item?: Record<string, unknown>;
}

export interface CodexExec {
  code: number | string;
  events: CodexEvent[];
  stderr: string;
}

/**
 * `codex exec --json --skip-git-repo-check --ephemeral --dangerously-bypass-approvals-and-sandbox
 * ARGS… PROMPT` in `workspace`, with HOME = CODEX_HOME = `home` and `env` added; its JSON events.
 */
export async function codexExec(options: {
  home: string;
  workspace: string;
  prompt: string;
  args?: readonly string[];
  env?: Record<string, string>;
}): Promise<CodexExec> {
  // stdin must not stay open: `codex exec` would wait for more input.
  const child = spawn(
    CODEX_BIN,
    [
      "exec",
      "--json",
      "--skip-git-repo-check",
      "--ephemeral",
      "--dangerously-bypass-approvals-and-sandbox",
      ...(options.args ?? []),
      options.prompt,
    ],
    {
      cwd: options.workspace,
      env: {
        PATH: process.env.PATH ?? "",
        HOME: options.home,
        CODEX_HOME: options.home,
        RUST_LOG: "warn",
        ...options.env,
      },
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const safety = setTimeout(() => child.kill("SIGKILL"), SAFETY_TIMEOUT_MS);
  const code = await new Promise<number | string>((resolve) =>
    child.once("close", (exit: number | null, signal: NodeJS.Signals | null) =>
      resolve(exit ?? signal ?? -1),
    ),
  );
  clearTimeout(safety);
  const events = stdout
    .split("\n")
    .filter((line) => line.trim() !== "")
    .map((line) => JSON.parse(line) as CodexEvent);
  return { code, events, stderr };
}
