/**
 * How a `spark exec` turn ended, for scripts: its exit status and its last `--json` event.
 *
 * | exit | the turn | last `--json` event |
 * |---|---|---|
 * | 0 | finished | `turn.completed` |
 * | 1 | failed (the server or a tool loop gave up) | `turn.failed` |
 * | 2 | never started: bad settings, an unreachable server | none |
 * | 3 | cut off: the context filled up, the output token limit, or another reason the server gave | `turn.incomplete` |
 * | 130 | stopped by SIGINT or SIGTERM | `turn.incomplete` with reason `stopped` |
 *
 * `turn.incomplete` carries `reason` (`context_full`, `output_limit`, `stopped`, or the server's own
 * word), a `message` saying what to do next, and `usage`: a script can tell a truncated answer from
 * a finished one without reading stderr.
 */
import { cutOffOf } from "../agent/cut-off.js";

export const EXIT_FINISHED = 0;
export const EXIT_FAILED = 1;
export const EXIT_CUT_OFF = 3;
export const EXIT_STOPPED = 130;

/** The exit codes as `spark exec --help` states them. */
export const EXIT_CODES_HELP = `Exit status:
  0    the task finished (last --json event: turn.completed)
  1    the turn failed (turn.failed)
  2    bad settings or an unreachable server; nothing ran
  3    the answer was cut off: context full, the output token limit, or another reason the
       server gave (turn.incomplete, with its reason)
  130  stopped by SIGINT or SIGTERM (turn.incomplete, reason "stopped")`;

export interface CutOffTurn {
  /** `context_full`, `output_limit`, `stopped`, or the server's reason. */
  reason: string;
  /** What happened and what to do next, in exec's words. */
  message: string;
}

/** Why a response stopped short, or undefined when it was not a cut (cancelled or steered on purpose). */
export function cutOffTurn(
  reason: string | undefined,
  contextTokens: number,
  contextWindow: number,
): CutOffTurn | undefined {
  const cut = cutOffOf(reason, contextTokens, contextWindow);
  if (cut === undefined) return undefined;
  if (cut === "context_full")
    return {
      reason: "context_full",
      message: "cut off (context full: `spark resume` and /compact to continue)",
    };
  if (cut === "output_limit") return { reason: "output_limit", message: "cut off (the output token limit)" };
  return { reason: cut.other, message: `cut off (${cut.other})` };
}

export const STOPPED: CutOffTurn = { reason: "stopped", message: "stopped (SIGINT or SIGTERM)" };
