/**
 * Why an answer ended `incomplete`, as the terminal surfaces (the TUI, `spark exec`) tell it: the
 * context filled, the output token limit was reached, or another reason the server gave; undefined
 * when it was not a cut (cancelled or steered on purpose). The server says `max_output_tokens` both
 * when the output limit was reached and when the context filled up: a context (nearly) full tells
 * them apart.
 */
export type CutOff = "context_full" | "output_limit" | { other: string };

export function cutOffOf(
  reason: string | undefined,
  contextTokens: number,
  contextWindow: number,
): CutOff | undefined {
  if (reason === undefined || reason === "cancelled" || reason === "steered") return undefined;
  if (
    reason === "context_full" ||
    reason === "context_length_exceeded" ||
    contextTokens >= contextWindow * 0.95
  )
    return "context_full";
  if (reason === "max_output_tokens" || reason === "length") return "output_limit";
  return { other: reason };
}
