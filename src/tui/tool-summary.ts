/**
 * What the TUI shows of the agent's tool calls: one line a human reads at a glance (`read
 * search.py`, `$ pytest -q`, `edit a.ts`), and, on request (Ctrl-O or /expand), the whole call:
 * its arguments and its output. Also the words for an answer that was cut off.
 */
import type { ThreadItem } from "../agent/tools/index.js";
import { cutOffOf } from "../agent/cut-off.js";

type ToolItem = Exclude<ThreadItem, { type: "agent_message" } | { type: "error" }>;

function parse(text: string): Record<string, unknown> {
  try {
    const value = JSON.parse(text) as unknown;
    return value && typeof value === "object" && !Array.isArray(value)
      ? (value as Record<string, unknown>)
      : {};
  } catch {
    return {};
  }
}

function str(value: unknown): string | undefined {
  return typeof value === "string" && value !== "" ? value : undefined;
}

/** A string on one line, at most `max` characters. */
function oneLine(text: string, max = 120): string {
  const flat = text.replace(/\s*\n\s*/g, " ⏎ ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** The one-line summary of a tool call, without color. */
export function summarizeToolItem(item: ToolItem): string {
  switch (item.type) {
    case "command_execution":
      return `$ ${oneLine(item.command)}`;
    case "file_change": {
      const verbs = { add: "add", update: "edit", delete: "delete" } as const;
      return item.changes.map((c) => `${verbs[c.kind]} ${c.path}`).join(", ") || "patch";
    }
    case "tool_call": {
      const args = parse(item.arguments);
      const path = str(args.path);
      switch (item.tool) {
        case "read_file": {
          const offset = typeof args.offset === "number" ? args.offset : undefined;
          const limit = typeof args.limit === "number" ? args.limit : undefined;
          const range =
            offset !== undefined || limit !== undefined
              ? `:${offset ?? 1}${limit !== undefined ? `-${(offset ?? 1) + limit - 1}` : ""}`
              : "";
          return `read ${path ?? "?"}${range}`;
        }
        case "list_files":
          return `list ${path ?? "."}`;
        case "search": {
          const where = [path, str(args.glob)].filter(Boolean).join(" ");
          return `search /${oneLine(str(args.pattern) ?? "", 60)}/${where ? ` in ${where}` : ""}`;
        }
        case "edit_file":
          return `edit ${path ?? "?"}`;
        case "delegate":
          return `delegate: ${oneLine(str(args.task) ?? "", 80)}`;
        default: {
          // MCP tools (mcp__SERVER__TOOL) and anything else: the name and its first argument.
          const name = item.tool.startsWith("mcp__") ? item.tool.slice(5).replace("__", ": ") : item.tool;
          const first = Object.values(args).find((v) => typeof v === "string" || typeof v === "number");
          return first === undefined ? name : `${name} ${oneLine(String(first), 60)}`;
        }
      }
    }
  }
}

/** The whole tool call, for /expand: what it was given and what came back. */
export function expandToolItem(item: ToolItem): string[] {
  const lines = [summarizeToolItem(item)];
  switch (item.type) {
    case "command_execution":
      lines.push(`  command: ${item.command}`);
      lines.push(`  status: ${item.status}${item.exit_code === null ? "" : `, exit ${item.exit_code}`}`);
      if (item.aggregated_output.trim() !== "") {
        lines.push(
          "  output:",
          ...item.aggregated_output
            .trimEnd()
            .split("\n")
            .map((l) => `    ${l}`),
        );
      } else lines.push("  (no output)");
      break;
    case "file_change":
      lines.push(`  status: ${item.status}`);
      for (const change of item.changes) lines.push(`  ${change.kind} ${change.path}`);
      if (item.error) lines.push(...item.error.split("\n").map((l) => `  ${l}`));
      break;
    case "tool_call": {
      lines.push(`  tool: ${item.tool} (${item.status})`);
      let args = item.arguments;
      try {
        args = JSON.stringify(JSON.parse(item.arguments), null, 2);
      } catch {
        // custom tools take raw text
      }
      lines.push("  arguments:", ...args.split("\n").map((l) => `    ${l}`));
      if (item.result !== undefined)
        lines.push(
          "  result:",
          ...item.result
            .trimEnd()
            .split("\n")
            .map((l) => `    ${l}`),
        );
      break;
    }
  }
  return lines;
}

/**
 * An answer that ended `incomplete` (not by the user, not by a steer): what happened and what to
 * do next, or undefined when the reason is not a cut (cancelled, steered).
 */
export function describeCutOff(
  serverReason: string | undefined,
  contextTokens: number,
  contextWindow: number,
): string | undefined {
  const cut = cutOffOf(serverReason, contextTokens, contextWindow);
  if (cut === undefined) return undefined;
  if (cut === "context_full") return "cut off: context full — /compact or /new to continue";
  if (cut === "output_limit") return "cut off: the output token limit — say “continue” for the rest";
  const reason = cut.other;
  if (reason === "server_shutdown")
    return "cut off: the server shut down — send the message again once it is back";
  if (reason === "connection_limit_reached" || reason === "client_disconnected")
    return "cut off: the connection ended — send the message again to retry";
  return `cut off (${reason}) — send the message again to retry`;
}
