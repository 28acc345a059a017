/**
 * Fill in the middle with the model's own FIM tokens (read from the GGUF through node-llama-cpp,
 * never assumed from a model family). Layout, prefix-suffix-middle as coder models are trained:
 *
 *   [BOS] (<FILE_SEP> filename \n text \n)* <FIM_PRE> prefix <FIM_SUF> suffix <FIM_MID> → middle
 *
 * Chunks of other files come first (with the model's file separator between them when it has one)
 * so that everything before the cursor is a stable prefix: typing one more character changes only
 * the end of `prefix` and what follows, and the sequence's KV cache keeps the rest.
 *
 * Budget: the prompt gets the context minus the output room; the suffix at most a quarter of it,
 * the other files at most a quarter, the prefix the rest. Each is clipped at line boundaries away
 * from the cursor (the prefix keeps its last lines, the suffix its first), so the clip point stays
 * put while the user types within a line; clipping tokenizes about as much text as the budget
 * holds, whatever the size of the input (`clip-text.ts`).
 *
 * A plain completion (a prompt with no suffix and no other files) needs no FIM tokens: on a model
 * without them it is the prompt's last lines as they are (`plainPrompt`).
 */
import type { LlamaContextSequence, LlamaModel, Token, TokenBias } from "node-llama-cpp";
import type { EnginePart, FimInput, FinishReason } from "../../engine/types.js";
import { SparkError } from "../../protocol/errors.js";
import { clipLines, type ClipTokenizer } from "./clip-text.js";
import { commonPrefix } from "./speculative-decode.js";

export interface FimTokens {
  prefix: Token;
  suffix: Token;
  middle: Token;
  /** Separator between files (`<|file_sep|>` in Qwen2.5-Coder), when the model has one. */
  fileSeparator: Token | undefined;
}

/** The model's FIM tokens, or undefined when it was not trained for fill in the middle. */
export function fimTokensOf(model: LlamaModel): FimTokens | undefined {
  const { prefix, suffix, middle } = model.tokens.infill;
  if (prefix == null || suffix == null || middle == null) return undefined;
  const ggml = (model.fileInfo.metadata as { tokenizer?: { ggml?: Record<string, unknown> } }).tokenizer
    ?.ggml;
  const separator = ggml?.["fim_sep_token_id"];
  return {
    prefix,
    suffix,
    middle,
    fileSeparator: typeof separator === "number" && separator >= 0 ? (separator as Token) : undefined,
  };
}

export function fimUnsupported(modelName: string): SparkError {
  return new SparkError(
    400,
    "invalid_request_error",
    "fim_unsupported",
    `The model ${modelName} has no fill-in-the-middle tokens (tokenizer.ggml.fim_pre_token_id, ` +
      "fim_suf_token_id and fim_mid_token_id in its GGUF), so it cannot complete between a prefix " +
      "and a suffix. Load a coder model trained for FIM (Qwen2.5-Coder, StarCoder2, CodeLlama…), " +
      "or use /v1/chat/completions.",
    "model",
  );
}

export interface FimBudget {
  /** Tokens the whole prompt may take. */
  promptTokens: number;
}

/** The prompt tokens of a FIM request (see the layout above). */
export function fimPrompt(
  fim: FimInput,
  tokens: FimTokens,
  tokenizer: ClipTokenizer,
  budget: FimBudget,
  bos: Token | undefined,
): Token[] {
  // Four special tokens, BOS and a separator per file.
  const room = Math.max(16, budget.promptTokens - 4 - fim.extra.length);
  const suffix = clipLines(fim.suffix, tokenizer, Math.floor(room / 4), "keep-start");
  const extraRoom = Math.floor(room / 4);
  const extra: Token[] = [];
  for (const chunk of fim.extra) {
    const text = `${chunk.filename}\n${chunk.text}\n`;
    const chunkTokens = clipLines(text, tokenizer, extraRoom - extra.length, "keep-start");
    if (chunkTokens.length === 0) break;
    if (tokens.fileSeparator !== undefined) extra.push(tokens.fileSeparator);
    extra.push(...chunkTokens);
  }
  const prefix = clipLines(fim.prefix, tokenizer, room - suffix.length - extra.length, "keep-end");
  return [
    ...(bos !== undefined ? [bos] : []),
    ...extra,
    tokens.prefix,
    ...prefix,
    tokens.suffix,
    ...suffix,
    tokens.middle,
  ];
}

export interface FimDecodeOptions {
  model: LlamaModel;
  sequence: LlamaContextSequence;
  prompt: readonly Token[];
  maxTokens: number;
  temperature: number;
  topP: number | undefined;
  signal: AbortSignal;
  /** Masks tokens (`ignoreEos`: the end-of-generation ones, which then never end the output). */
  tokenBias?: TokenBias;
  /** Called when cancelled, with the tokens decoded after the abort (at most one). */
  onCancel?: (info: { tokensAfterAbort: number }) => void;
}

/** Whether a model without FIM tokens can still serve `fim`: only a prompt to continue, nothing around it. */
export function isPlainCompletion(fim: FimInput): boolean {
  return fim.suffix === "" && fim.extra.length === 0;
}

/** A plain completion's prompt: BOS and the prompt's last lines that fit the budget. */
export function plainPrompt(
  prompt: string,
  tokenizer: ClipTokenizer,
  budget: FimBudget,
  bos: Token | undefined,
): Token[] {
  const room = Math.max(1, budget.promptTokens - 1);
  return [...(bos !== undefined ? [bos] : []), ...clipLines(prompt, tokenizer, room, "keep-end")];
}

/**
 * Decodes the middle on `sequence`, keeping the cached tokens it shares with `prompt` (the previous
 * keystroke's prompt, usually): only the tokens after the first difference are evaluated. Stops at
 * the model's end-of-generation tokens, at `maxTokens`, or within one token of an abort.
 */
export async function* decodeFim(options: FimDecodeOptions): AsyncGenerator<EnginePart> {
  const { model, sequence, prompt, signal } = options;
  // The last prompt token is always evaluated again to produce the first output token.
  const reused = Math.min(commonPrefix(sequence.contextTokens, prompt), prompt.length - 1);
  if (sequence.nextTokenIndex > reused) {
    await sequence.eraseContextTokenRanges([{ start: reused, end: sequence.nextTokenIndex }]);
  }
  const output: Token[] = [];
  let shown = "";
  let reason: FinishReason = "stop";
  const id = "completion";
  yield { type: "text-start", id };
  if (!signal.aborted && options.maxTokens > 0) {
    const tokens = sequence.evaluate(prompt.slice(reused) as Token[], {
      temperature: options.temperature,
      ...(options.topP !== undefined ? { topP: options.topP } : {}),
      ...(options.tokenBias ? { tokenBias: options.tokenBias } : {}),
    });
    try {
      for await (const token of tokens) {
        if (signal.aborted) {
          options.onCancel?.({ tokensAfterAbort: 1 });
          reason = "cancelled";
          break;
        }
        if (model.isEogToken(token)) break;
        output.push(token);
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
    } finally {
      await tokens.return();
    }
  }
  if (signal.aborted && reason !== "cancelled") {
    options.onCancel?.({ tokensAfterAbort: 0 });
    reason = "cancelled";
  }
  yield { type: "text-end", id };
  yield {
    type: "finish",
    reason,
    usage: { inputTokens: prompt.length, cachedInputTokens: reused, outputTokens: output.length },
  };
}
