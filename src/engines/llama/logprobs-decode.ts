/**
 * Generation with log probabilities (`EngineRequest.logprobs`): a loop of our own on
 * `sequence.controlledEvaluate`, one token per step, reporting for each output token the model's own
 * log probability and its `top` likeliest alternatives, as llama-server and vLLM do: the log-softmax
 * of the raw logits over the whole vocabulary, before any sampling transform.
 *
 * - At temperature 0 the sampler is greedy, which leaves the logits as they are: llama.cpp returns
 *   the top logits and the sum of exp(logit − max) over the vocabulary, and logprob = logit − max −
 *   ln(sum), exactly.
 * - When sampling, llama.cpp's chain would transform the logits before any of them reach us, so the
 *   whole raw distribution is taken (greedy config) and the token is sampled here the way
 *   node-llama-cpp's chain samples it (top-k 40, top-p, then temperature), from the same
 *   distribution plain decoding uses.
 *
 * What this loop cannot do exactly, the engine refuses with a 400 before streaming (see
 * `logprobsRefusal`): tools the model may call, a response format (its grammar changes the
 * distribution), `ignore_eos` (its bias does). Like the speculative path, output ends at an
 * end-of-generation token.
 */
import type { LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import type { EnginePart, EngineRequest, FinishReason, TokenLogprob } from "../../engine/types.js";
import { callableTools } from "../../engine/tool-choice.js";
import { SparkError } from "../../protocol/errors.js";
import { commonPrefix } from "./speculative-decode.js";

/** node-llama-cpp's sampling defaults when sampling (`LlamaContext._resolveSamplerConfig`). */
const TOP_K = 40;
const DEFAULT_TOP_P = 0.95;

export interface LogprobsDecodeOptions {
  model: LlamaModel;
  sequence: LlamaContextSequence;
  prompt: readonly Token[];
  maxTokens: number;
  temperature: number;
  topP: number | undefined;
  /** Alternatives per token (0-20). */
  top: number;
  signal: AbortSignal;
  onCancel?: (info: { tokensAfterAbort: number }) => void;
}

/** Why a request's log probabilities cannot be reported exactly, as a 400, or undefined when they can. */
export function logprobsRefusal(request: EngineRequest): SparkError | undefined {
  const logprobs = request.logprobs;
  if (!logprobs) return undefined;
  const why =
    callableTools(request.tools, request.toolChoice).length > 0
      ? "with tools the model may call (send tool_choice 'none' or no tools)"
      : request.responseFormat
        ? `with a response format (${request.responseFormat.param}): its grammar changes the distribution`
        : request.ignoreEos
          ? "with ignore_eos: its bias changes the distribution"
          : request.fim
            ? "for completions"
            : undefined;
  if (why === undefined) return undefined;
  return new SparkError(
    400,
    "invalid_request_error",
    "unsupported_parameter",
    `The llama engine reports log probabilities of plain text answers only, not ${why}.`,
    logprobs.param,
  );
}

export async function* decodeWithLogprobs(options: LogprobsDecodeOptions): AsyncGenerator<EnginePart> {
  const { model, sequence, prompt, signal } = options;
  const contextSize = sequence.contextSize;
  const reused = Math.min(commonPrefix(sequence.contextTokens, prompt), prompt.length - 1);
  if (sequence.nextTokenIndex > reused)
    await sequence.eraseContextTokenRanges([{ start: reused, end: sequence.nextTokenIndex }]);
  const greedy = options.temperature <= 0;
  const top = options.top;
  const bytesOf = tokenBytes(model);
  const id = "text_1";
  const output: Token[] = [];
  let shown = "";
  let held: TokenLogprob[] = [];
  let pending: Token[] = prompt.slice(reused) as Token[];
  let reason: FinishReason | undefined;
  yield { type: "text-start", id };
  while (reason === undefined) {
    if (signal.aborted) {
      options.onCancel?.({ tokensAfterAbort: 0 });
      reason = "cancelled";
      break;
    }
    if (output.length >= options.maxTokens || sequence.nextTokenIndex + pending.length >= contextSize) {
      reason = "length";
      break;
    }
    const generateNext = greedy
      ? {
          token: true,
          logits: { filter: { includeTop: Math.max(1, top), includeSelected: true } },
          totalLogitWeight: true,
          options: { temperature: 0 },
        }
      : { probabilities: true, options: { temperature: 0 } };
    const input = pending.map((token, index) =>
      index === pending.length - 1 ? ([token, { generateNext }] as const) : token,
    );
    const next = (await sequence.controlledEvaluate(input as never))[pending.length - 1]?.next;
    if (!next) throw new Error("llama.cpp evaluated no token");
    // Log probabilities by token, highest first.
    let ranked: [Token, number][];
    let token: Token;
    if (greedy) {
      const logits = [...(next.logits ?? new Map<Token, number>())].sort((a, b) => b[1] - a[1]);
      const max = logits[0]?.[1] ?? 0;
      const norm = max + Math.log(next.totalLogitWeight ?? 1);
      ranked = logits.map(([candidate, logit]) => [candidate, logit - norm]);
      if (next.token == null) throw new Error("llama.cpp sampled no token");
      token = next.token;
    } else {
      const probabilities = [...(next.probabilities ?? new Map<Token, number>())];
      ranked = probabilities.map(([candidate, probability]) => [candidate, Math.log(probability)]);
      token = sample(probabilities, options.temperature, options.topP ?? DEFAULT_TOP_P);
    }
    if (model.isEogToken(token)) {
      reason = "stop";
      break;
    }
    const context = output.slice(-4);
    const text = (candidate: Token): string => model.detokenize([candidate], false, context);
    const own = ranked.find(([candidate]) => candidate === token)?.[1] ?? -Infinity;
    held.push({
      token: text(token),
      logprob: own,
      bytes: bytesOf(token, text(token)),
      top: ranked.slice(0, top).map(([candidate, logprob]) => ({
        token: text(candidate),
        logprob,
        bytes: bytesOf(candidate, text(candidate)),
      })),
    });
    output.push(token);
    pending = [token];
    const whole = model.detokenize(output);
    // A character split across tokens waits for its last byte; its tokens' log probabilities with it.
    if (!whole.endsWith("\uFFFD")) {
      yield { type: "text-delta", id, delta: whole.slice(shown.length), logprobs: held };
      shown = whole;
      held = [];
    }
  }
  if (held.length > 0) {
    const whole = model.detokenize(output);
    yield { type: "text-delta", id, delta: whole.slice(shown.length), logprobs: held };
  }
  yield { type: "text-end", id };
  yield {
    type: "finish",
    reason,
    usage: { inputTokens: prompt.length, cachedInputTokens: reused, outputTokens: output.length },
  };
}

/** Samples as node-llama-cpp's chain does: the top 40, then top-p over them, then temperature. */
function sample(probabilities: [Token, number][], temperature: number, topP: number): Token {
  const candidates = probabilities
    .slice()
    .sort((a, b) => b[1] - a[1])
    .slice(0, TOP_K);
  const mass = candidates.reduce((sum, [, p]) => sum + p, 0);
  let kept = 0;
  let cumulative = 0;
  while (kept < candidates.length) {
    cumulative += candidates[kept]![1] / mass;
    kept++;
    if (cumulative >= topP) break;
  }
  const weights = candidates
    .slice(0, kept)
    .map(([candidate, p]) => [candidate, p ** (1 / temperature)] as const);
  const total = weights.reduce((sum, [, weight]) => sum + weight, 0);
  let r = Math.random() * total;
  for (const [candidate, weight] of weights) {
    r -= weight;
    if (r <= 0) return candidate;
  }
  return weights.at(-1)![0];
}

/**
 * A token's bytes: from the vocabulary where its pieces are bytes (SentencePiece `<0xNN>` and `▁`,
 * GPT-2 byte-level BPE), which keeps the bytes of a token that holds part of a character; else the
 * UTF-8 of its text.
 */
function tokenBytes(model: LlamaModel): (token: Token, text: string) => number[] {
  const ggml = (
    model.fileInfo.metadata as { tokenizer?: { ggml?: { model?: string; tokens?: readonly string[] } } }
  ).tokenizer?.ggml;
  const pieces = ggml?.tokens;
  const utf8 = (text: string): number[] => [...Buffer.from(text, "utf8")];
  if (!pieces) return (_token, text) => utf8(text);
  if (ggml.model === "llama")
    return (token, text) => {
      const piece = pieces[token];
      if (piece === undefined) return utf8(text);
      const byte = /^<0x([0-9A-Fa-f]{2})>$/.exec(piece);
      return byte ? [parseInt(byte[1]!, 16)] : utf8(piece.replaceAll("\u2581", " "));
    };
  if (ggml.model === "gpt2") {
    const decode = byteDecoder();
    return (token, text) => {
      const piece = pieces[token];
      if (piece === undefined) return utf8(text);
      const bytes: number[] = [];
      for (const char of piece) {
        const byte = decode.get(char);
        if (byte === undefined) return utf8(text);
        bytes.push(byte);
      }
      return bytes;
    };
  }
  return (_token, text) => utf8(text);
}

/** GPT-2's byte-level alphabet, reversed: the character standing for each byte. */
function byteDecoder(): Map<string, number> {
  const printable = (byte: number): boolean =>
    (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || (byte >= 174 && byte <= 255);
  const decoder = new Map<string, number>();
  let extra = 0;
  for (let byte = 0; byte < 256; byte++) {
    const code = printable(byte) ? byte : 256 + extra++;
    decoder.set(String.fromCodePoint(code), byte);
  }
  return decoder;
}
