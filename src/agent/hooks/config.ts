/**
 * The `hooks` section of the config file: commands run at agent events. The common ground of
 * Claude Code's hooks and Codex's hooks.json: events `PreToolUse`, `PostToolUse` (with a
 * `matcher`, a regular expression over the tool's name), `UserPromptSubmit` and `Stop`; each entry
 * is `{"matcher"?, "command", "timeoutMs"?}`, or Claude's own group
 * `{"matcher"?, "hooks": [{"type": "command", "command", "timeout"? (seconds)}]}`, so a Claude
 * settings file's `hooks` can be pasted as it is. `trustWorkspace: true` (on an entry, or on a
 * command of a group) lets a hook run code the agent can write (see workspace-code.ts).
 */
import { z } from "zod";

export const HOOK_EVENTS = ["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop"] as const;
export type HookEventName = (typeof HOOK_EVENTS)[number];

const matcher = z
  .string()
  .refine((text) => {
    try {
      new RegExp(text);
      return true;
    } catch {
      return false;
    }
  }, "must be a regular expression (e.g. shell|apply_patch, mcp__github__.*)")
  .optional();

const flatHook = z.strictObject({
  matcher,
  command: z.string().min(1, "must not be empty"),
  /** Milliseconds before the command is killed (default 60 s). */
  timeoutMs: z.number().int().positive().max(3_600_000).optional(),
  /** Run it even though it runs code from the workspace, which the agent can write. */
  trustWorkspace: z.boolean().optional(),
});

const claudeGroup = z.strictObject({
  matcher,
  hooks: z.array(
    z.strictObject({
      type: z.literal("command"),
      command: z.string().min(1, "must not be empty"),
      /** Seconds, as Claude Code counts them. */
      timeout: z.number().positive().max(3600).optional(),
      trustWorkspace: z.boolean().optional(),
    }),
  ),
});

const entries = z.array(
  z.union([flatHook, claudeGroup], {
    error:
      'must be {"matcher"?, "command", "timeoutMs"?} or {"matcher"?, "hooks": [{"type": "command", "command"}]}',
  }),
);

export const hooksSchema = z.strictObject(
  Object.fromEntries(HOOK_EVENTS.map((name) => [name, entries.optional()])) as Record<
    HookEventName,
    z.ZodOptional<typeof entries>
  >,
);

export type HooksConfig = z.infer<typeof hooksSchema>;

/** One command to run, as the runner sees it (both shapes flattened). */
export interface HookCommand {
  event: HookEventName;
  /** Which tools (see `matcherRegex`); undefined: every tool. */
  matcher: RegExp | undefined;
  command: string;
  timeoutMs: number;
  /** The user's config lets it run code from the workspace. */
  trustWorkspace: boolean;
}

export const DEFAULT_HOOK_TIMEOUT_MS = 60_000;

export function flattenHooks(config: HooksConfig | undefined): HookCommand[] {
  const list: HookCommand[] = [];
  for (const event of HOOK_EVENTS) {
    for (const entry of config?.[event] ?? []) {
      const pattern = entry.matcher;
      const regex = matcherRegex(pattern);
      if ("command" in entry) {
        list.push({
          event,
          matcher: regex,
          command: entry.command,
          timeoutMs: entry.timeoutMs ?? DEFAULT_HOOK_TIMEOUT_MS,
          trustWorkspace: entry.trustWorkspace === true,
        });
      } else {
        for (const hook of entry.hooks) {
          list.push({
            event,
            matcher: regex,
            command: hook.command,
            timeoutMs: hook.timeout === undefined ? DEFAULT_HOOK_TIMEOUT_MS : Math.round(hook.timeout * 1000),
            trustWorkspace: hook.trustWorkspace === true,
          });
        }
      }
    }
  }
  return list;
}

/**
 * As Claude Code reads a matcher: absent, `""` or `*` match every tool; a list of plain names
 * (`shell|apply_patch`: letters, digits, `_`, `|`) matches exactly those names; anything else is an
 * unanchored regular expression (`mcp__github__.*`; use `^`/`$` for a whole match).
 */
function matcherRegex(pattern: string | undefined): RegExp | undefined {
  if (pattern === undefined || pattern === "" || pattern === "*") return undefined;
  if (/^[A-Za-z0-9_|]+$/.test(pattern)) return new RegExp(`^(?:${pattern})$`);
  return new RegExp(pattern);
}
