/**
 * The `mcpServers` section of the config file, in the shape Cursor, Claude and VS Code users
 * already have: `{"NAME": {"command", "args", "env", "cwd"} | {"url", "headers"}}`, plus Spark's
 * per-server `enabled`, `startupTimeoutMs`, `toolTimeoutMs` and `trusted`.
 */
import { z } from "zod";

const timeout = z.number().int().positive().max(3_600_000);
const stringMap = z.record(z.string(), z.string());

const common = {
  /** Other tools' configs carry a transport type; accepted, the transport follows command/url. */
  type: z.enum(["stdio", "http", "streamable-http", "streamableHttp"]).optional(),
  /** `false` keeps the entry but starts nothing (default true). */
  enabled: z.boolean().optional(),
  /** How long connecting and listing the tools may take (default 30 s). */
  startupTimeoutMs: timeout.optional(),
  /** How long one tool call may take (default 120 s). */
  toolTimeoutMs: timeout.optional(),
  /** Its tools run without asking, in every approval mode (`spark exec` included). */
  trusted: z.boolean().optional(),
};

export const stdioServerSchema = z.strictObject({
  command: z.string().min(1, "must not be empty"),
  args: z.array(z.string()).optional(),
  env: stringMap.optional(),
  cwd: z.string().min(1).optional(),
  ...common,
});

export const httpServerSchema = z.strictObject({
  url: z.url({ protocol: /^https?$/, error: "must be an http or https URL" }),
  headers: stringMap.optional(),
  ...common,
});

const SHAPE = 'must be {"command", "args"?, "env"?, "cwd"?} (stdio) or {"url", "headers"?} (streamable HTTP)';

/**
 * One server: a command to run (stdio) or a URL (streamable HTTP). The shape is picked by the key
 * it has, so that a problem is reported in that shape's terms (`mcpServers.x.args: …`).
 */
const serverEntry = z.unknown().transform((value, ctx): McpServerConfig => {
  const record = typeof value === "object" && value !== null && !Array.isArray(value) ? value : undefined;
  const schema =
    record && "url" in record
      ? httpServerSchema
      : record && "command" in record
        ? stdioServerSchema
        : undefined;
  if (!schema) {
    ctx.addIssue({ code: "custom", message: SHAPE });
    return z.NEVER;
  }
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issue = parsed.error.issues[0]!;
  ctx.addIssue({ code: "custom", message: issue.message, path: issue.path });
  return z.NEVER;
});

/** Server names become part of tool names (`mcp__NAME__TOOL`, at most 64 characters in all). */
export const MCP_SERVER_NAME = /^[A-Za-z0-9_-]{1,32}$/;

export const mcpServersSchema = z.record(
  z
    .string()
    .regex(MCP_SERVER_NAME, "server names are 1-32 letters, digits, '_' or '-'")
    // Server `a` with tool `b__c` and server `a__b` with tool `c` would both be `mcp__a__b__c`.
    .refine((name) => !name.includes("__"), {
      message:
        "server names must not contain '__': tool names are mcp__SERVER__TOOL, so it would be ambiguous",
    }),
  serverEntry,
);

export type StdioServerConfig = z.infer<typeof stdioServerSchema>;
export type HttpServerConfig = z.infer<typeof httpServerSchema>;
export type McpServerConfig = StdioServerConfig | HttpServerConfig;
export type McpServersConfig = Record<string, McpServerConfig>;
