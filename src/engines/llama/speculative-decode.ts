/**
 * Speculative decoding for requests with a prediction (Predicted Outputs) or with input lookup on
 * (drafts from the conversation's own n-grams; see prediction-drafter.ts), a generation loop of
 * our own on `sequence.controlledEvaluate`: each step evaluates the pending token plus a draft of
 * up to 16 predicted tokens in one batch (adaptive: fewer after a rejection), sampling the model's own next token at every position
 * with the request's sampler. The sampled token after the pending one is always kept; each further
 * one is kept while the draft agreed with what was sampled before it (early exit on the first
 * disagreement), so the output is what plain decoding samples: token for token at temperature 0,
 * the same distribution when sampling. The rejected tail is erased from the KV cache.
 *
 * Why not node-llama-cpp's `TokenPredictor` on the sequence: in node-llama-cpp 3.22 its verification
 * (`_speculativeEvaluate`) accepts at most one drafted token per batch (it compares against a list of
 * validated tokens it never fills), so a perfect prediction gains almost nothing; and a predictor is
 * fixed per sequence, where a prediction belongs to one request.
 */
import type {
  ControlledEvaluateInputItem,
  LlamaContextSequence,
  LlamaModel,
  Token,
  TokenBias,
} from "node-llama-cpp";
import type { EnginePart, FinishReason, SpeculationUsage } from "../../engine/types.js";
import { MAX_DRAFT_TOKENS, type CombinedDrafter } from "./prediction-drafter.js";

/** Tokens drafted at the first step; later steps adapt (see the loop). */
export const FIRST_DRAFT_TOKENS = 8;

export interface SpeculativeDecodeOptions {
  model: LlamaModel;
  sequence: LlamaContextSequence;
  prompt: readonly Token[];
  drafter: CombinedDrafter;
  maxTokens: number;
  temperature: number;
  topP: number | undefined;
  signal: AbortSignal;
  /** Masks tokens (`ignoreEos`: the end-of-generation ones, which then never end the output). */
  tokenBias?: TokenBias;
  /** Called when cancelled, with the tokens verified after the abort that were not delivered. */
  onCancel?: (info: { tokensAfterAbort: number }) => void;
}

export async function* decodeSpeculative(options: SpeculativeDecodeOptions): AsyncGenerator<EnginePart> {
  const { model, sequence, prompt, drafter, signal } = options;
  const contextSize = sequence.contextSize;
  // The last prompt token is always evaluated again to produce the first output token.
  const reused = Math.min(commonPrefix(sequence.contextTokens, prompt), prompt.length - 1);
  if (sequence.nextTokenIndex > reused) {
    await sequence.eraseContextTokenRanges([{ start: reused, end: sequence.nextTokenIndex }]);
  }
  const sampling = {
    generateNext: {
      token: true,
      options: {
        temperature: options.temperature,
        ...(options.topP !== undefined ? { topP: options.topP } : {}),
        ...(options.tokenBias ? { tokenBias: options.tokenBias } : {}),
      },
    },
  };
  const counts: SpeculationUsage = {
    drafted: 0,
    accepted: 0,
    rejected: 0,
    steps: 0,
    predictionAccepted: 0,
    predictionRejected: 0,
  };
  const id = "text_1";
  const output: Token[] = [];
  let shown = "";
  let reason: FinishReason | undefined;
  let pending: Token[] = prompt.slice(reused) as Token[];
  // Adaptive draft length: doubles while drafts are accepted whole, falls to one past what was
  // accepted when they are not, so a prediction that stops matching costs little.
  let draftLimit = FIRST_DRAFT_TOKENS;
  yield { type: "text-start", id };
  while (reason === undefined) {
    if (signal.aborted) {
      options.onCancel?.({ tokensAfterAbort: 0 });
      reason = "cancelled";
      break;
    }
    const room = Math.min(
      options.maxTokens - output.length - 1,
      contextSize - sequence.nextTokenIndex - pending.length - 1,
    );
    const draft = await drafter.draft(Math.min(draftLimit, room));
    const input: ControlledEvaluateInputItem[] = pending.map((token, i) =>
      i === pending.length - 1 ? [token, sampling] : token,
    );
    for (const token of draft) input.push([token, sampling]);
    const results = await sequence.controlledEvaluate(input);
    const base = pending.length - 1;
    const verified: Token[] = [];
    for (let j = 0; j <= draft.length; j++) {
      const next = results[base + j]?.next.token;
      if (next == null) throw new Error("llama.cpp sampled no token");
      verified.push(next);
      if (j < draft.length && draft[j] !== next) break;
    }
    const matched = verified.length - 1;
    if (draft.length > 0)
      draftLimit =
        matched === draft.length ? Math.min(MAX_DRAFT_TOKENS, draftLimit * 2) : Math.max(1, matched + 1);
    if (draft.length > 0) {
      counts.steps++;
      counts.drafted += draft.length;
      counts.accepted += matched;
      counts.rejected += draft.length - matched;
      if (drafter.source === "prediction") {
        counts.predictionAccepted += matched;
        counts.predictionRejected += draft.length - matched;
      }
      // Drop the drafted tokens past the first disagreement from the KV cache.
      const rejected = draft.length - matched;
      if (rejected > 0) {
        await sequence.eraseContextTokenRanges([
          { start: sequence.nextTokenIndex - rejected, end: sequence.nextTokenIndex },
        ]);
      }
    }
    for (const [index, token] of verified.entries()) {
      if (model.isEogToken(token)) {
        reason = "stop";
        break;
      }
      if (signal.aborted) {
        options.onCancel?.({ tokensAfterAbort: verified.length - index });
        reason = "cancelled";
        break;
      }
      output.push(token);
      drafter.push(token);
      const text = model.detokenize(output);
      // A multi-byte character split across tokens waits for its last byte.
      if (!text.endsWith("\uFFFD") && text.length > shown.length) {
        const delta = text.slice(shown.length);
        shown = text;
        yield { type: "text-delta", id, delta };
      }
      if (output.length >= options.maxTokens) {
        reason = "length";
        break;
      }
    }
    // The last verified token is not in the KV cache yet: it is evaluated first in the next step.
    pending = [verified.at(-1)!];
  }
  yield { type: "text-end", id };
  yield {
    type: "finish",
    reason,
    usage: {
      inputTokens: prompt.length,
      cachedInputTokens: reused,
      outputTokens: output.length,
      ...(counts.steps > 0 ? { speculation: counts } : {}),
    },
  };
}

/** Length of the longest common prefix of two token lists (what a sequence's KV cache can keep). */
export function commonPrefix(a: readonly Token[], b: readonly Token[]): number {
  const length = Math.min(a.length, b.length);
  let i = 0;
  while (i < length && a[i] === b[i]) i++;
  return i;
}
