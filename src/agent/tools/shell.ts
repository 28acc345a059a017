/**
 * The `shell` tool (its definition is in definitions.ts): one command run as the approval mode
 * decides (asked, refused, or run; in the sandbox when there is one, outside it only when an
 * escalation the model asked for was approved), with the environment's secrets removed and
 * checkpoints around it.
 */
import { commandEnvironment } from "../sandbox/secrets.js";
import { formatCommandOutput, runCommand } from "../sandbox/shell.js";
import type { ThreadItem } from "../thread-item.js";
import { decideCommand } from "./approval.js";
import { errorText, stringArg } from "./call-helpers.js";
import type { ToolCallScope, ToolRun } from "./context.js";

/** Runs a `shell` call. */
export async function runShellTool(scope: ToolCallScope, args: Record<string, unknown>): Promise<ToolRun> {
  const { id, context, signal, onStarted, reply, approve } = scope;
  const raw = args.command;
  const argv = Array.isArray(raw) && raw.every((a) => typeof a === "string") ? (raw as string[]) : undefined;
  const command = argv ?? ["bash", "-c", stringArg(args, "command")];
  const shown = argv ? argv.join(" ") : stringArg(args, "command");
  const escalate = args.escalate === true;
  const item = (
    status: "in_progress" | "completed" | "failed" | "declined",
    output = "",
    exitCode: number | null = null,
  ): ThreadItem => ({
    id,
    type: "command_execution",
    command: shown,
    aggregated_output: output,
    exit_code: exitCode,
    status,
  });
  let cwd: string;
  try {
    cwd = await context.workspace.resolve(
      typeof args.workdir === "string" && args.workdir !== "" ? args.workdir : ".",
      "read",
    );
  } catch (error) {
    // A workdir outside the workspace (or missing): the command never runs, but it is still a command.
    const message = errorText(error);
    return { completed: item("failed", message), output: reply(message) };
  }
  const sandbox = await context.sandbox;
  const sandboxed = sandbox.kind !== "none";
  const decision = decideCommand(context.approval, command, {
    sandboxed,
    escalationRequested: escalate,
    interactive: context.ask !== undefined,
  });
  const declined = await approve(
    decision,
    {
      kind: "command",
      summary: shown,
      reason:
        decision.action === "ask"
          ? escalate && typeof args.justification === "string"
            ? `${decision.reason}: ${args.justification}`
            : decision.reason
          : "",
    },
    `command:${shown}`,
  );
  if (declined !== undefined) {
    return { completed: item("declined", declined), output: reply(`Command not run: ${declined}`) };
  }
  // An approved escalation runs outside the sandbox; everything else inside it when there is one.
  const runOutside = escalate && decision.action === "ask";
  const started = item("in_progress");
  onStarted(started);
  await context.checkpoints?.beforeCommand();
  const result = await runCommand(command, {
    workspaceRoot: context.workspace.root,
    cwd,
    sandbox: runOutside ? { kind: "none", reason: "approved to run outside the sandbox" } : sandbox,
    ...(typeof args.timeout_ms === "number" ? { timeoutMs: args.timeout_ms } : {}),
    ...(context.commandTimeoutMs === undefined || typeof args.timeout_ms === "number"
      ? {}
      : { timeoutMs: context.commandTimeoutMs }),
    ...(context.maxOutputBytes === undefined ? {} : { maxOutputBytes: context.maxOutputBytes }),
    env: commandEnvironment(process.env, context.allowEnv),
    signal,
  });
  await context.checkpoints?.afterCommand();
  const ok = result.exitCode === 0 && !result.timedOut && !result.cancelled;
  return {
    started,
    completed: item(ok ? "completed" : "failed", result.output, result.exitCode),
    output: reply(formatCommandOutput(result)),
  };
}
