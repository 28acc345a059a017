/**
 * Log probabilities of output tokens: the request side of both wire APIs (Chat Completions'
 * `logprobs` / `top_logprobs`; Responses' `include: ["message.output_text.logprobs"]` /
 * `top_logprobs`), checked and normalized into `EngineRequest.logprobs`, and the response side, the
 * engine's `TokenLogprob`s in each wire's shape.
 *
 * Also the other `include` values of a Responses create: each one is either done or a documented
 * no-op (docs/api.md), never silently dropped; an unknown one is a 400.
 */
import type { Engine, TokenLogprob } from "../engine/types.js";
import { shown, SparkError } from "../protocol/errors.js";

export interface LogprobsRequest {
  top: number;
  /** The parameter that asked for them, for the engine's refusals. */
  param: string;
}

/** The most alternatives per token OpenAI allows. */
const MAX_TOP_LOGPROBS = 20;
const LOGPROBS_INCLUDE = "message.output_text.logprobs";

/**
 * `include` values accepted without effect: they add the output of hosted tools Spark never runs
 * (there are no such items), or encrypted reasoning (Spark's models keep no hidden reasoning).
 * `message.input_image.image_url` is done: stored input items keep the image URLs as sent.
 */
const INCLUDE_WITHOUT_EFFECT = new Set([
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
  "reasoning.encrypted_content",
  "message.input_image.image_url",
]);

function topLogprobs(value: unknown): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > MAX_TOP_LOGPROBS)
    throw SparkError.invalid(
      `top_logprobs must be an integer from 0 to ${MAX_TOP_LOGPROBS}.`,
      "top_logprobs",
      "invalid_value",
    );
  return value;
}

/** Chat Completions: `logprobs: true` with `top_logprobs` alternatives (which need `logprobs`). */
export function chatLogprobs(logprobs: unknown, top: unknown): LogprobsRequest | undefined {
  if (logprobs !== undefined && logprobs !== null && typeof logprobs !== "boolean")
    throw SparkError.invalid("logprobs must be a boolean.", "logprobs", "invalid_value");
  const count = topLogprobs(top);
  if (logprobs !== true) {
    if (count !== undefined && count > 0)
      throw SparkError.invalid("top_logprobs needs logprobs: true.", "top_logprobs", "invalid_value");
    return undefined;
  }
  return { top: count ?? 0, param: "logprobs" };
}

/** Responses: `include` (checked whole) and `top_logprobs`. */
export function responsesLogprobs(include: unknown, top: unknown): LogprobsRequest | undefined {
  const count = topLogprobs(top);
  const values = include ?? [];
  if (!Array.isArray(values))
    throw SparkError.invalid("include must be an array.", "include", "invalid_value");
  let wanted = false;
  values.forEach((value: unknown, index) => {
    if (value === LOGPROBS_INCLUDE) wanted = true;
    else if (typeof value !== "string" || !INCLUDE_WITHOUT_EFFECT.has(value))
      throw SparkError.invalid(
        `Unknown include value ${shown(value)}.`,
        `include[${index}]`,
        "invalid_value",
      );
  });
  if (!wanted) {
    if (count !== undefined && count > 0)
      throw SparkError.invalid(
        `top_logprobs needs include: ["${LOGPROBS_INCLUDE}"].`,
        "top_logprobs",
        "invalid_value",
      );
    return undefined;
  }
  return { top: count ?? 0, param: "include" };
}

/** A 400 when `engine` cannot report log probabilities at all. */
export function requireLogprobs(engine: Engine, logprobs: LogprobsRequest | undefined): void {
  if (!logprobs || engine.capabilities.logprobs) return;
  throw new SparkError(
    400,
    "invalid_request_error",
    "unsupported_parameter",
    `The ${engine.kind} engine cannot report log probabilities; leave ${logprobs.param === "include" ? `'${LOGPROBS_INCLUDE}' out of include` : "logprobs out"}.`,
    logprobs.param,
  );
}

/** One token as both wires write it (`token`, `logprob`, `bytes`, `top_logprobs`). */
export function wireLogprob(logprob: TokenLogprob): Record<string, unknown> {
  return {
    token: logprob.token,
    logprob: logprob.logprob,
    bytes: logprob.bytes,
    top_logprobs: logprob.top.map((top) => ({ token: top.token, logprob: top.logprob, bytes: top.bytes })),
  };
}
