/**
 * `POST /v1/responses/input_tokens` (the SDK's `responses.inputTokens.count`): how many input tokens
 * a create request with this body would cost, `{object: "response.input_tokens", input_tokens}`.
 *
 * The body is read exactly as a create's (`ResponsesService.prepare` with `generate: false`, which
 * runs nothing and stores nothing): its history (`previous_response_id`, `conversation`), items
 * referenced by id, instructions, tools and tool choice resolve the same way, and the engine counts
 * the conversation rendered as it would render it for generation (chat template, tool definitions
 * and all), with its own tokenizer. An engine that cannot count exactly (`countInputTokens`) is a
 * 400 rather than an estimate presented as a count.
 */
import { shown, SparkError } from "../protocol/errors.js";
import type { Principal } from "./keys.js";
import type { ResponsesService } from "./responses.js";

/** The body's parameters, as OpenAI defines them for this route. */
const PARAMETERS = new Set([
  "conversation",
  "input",
  "instructions",
  "model",
  "parallel_tool_calls",
  "previous_response_id",
  "reasoning",
  "text",
  "tool_choice",
  "tools",
  "truncation",
]);

export interface InputTokenCount {
  object: "response.input_tokens";
  input_tokens: number;
}

export async function countInputTokens(
  responses: ResponsesService,
  raw: unknown,
  principal: Principal,
  signal: AbortSignal,
): Promise<InputTokenCount> {
  if (typeof raw === "object" && raw !== null && !Array.isArray(raw)) {
    const unknown = Object.keys(raw).find((key) => !PARAMETERS.has(key));
    if (unknown !== undefined)
      throw SparkError.invalid(
        `Unknown parameter '${shown(unknown)}' for counting input tokens.`,
        shown(unknown),
        "unknown_parameter",
      );
  }
  const body = { ...(raw as object), generate: false, store: false, stream: false };
  const prepared = await responses.prepare(body, { principal });
  const engine = prepared.model.entry.engine;
  if (!engine.countInputTokens)
    throw SparkError.invalid(
      `The ${engine.kind} engine behind model '${shown(prepared.model.name)}' cannot count input tokens exactly.`,
      "model",
      "input_tokens_unsupported",
    );
  return {
    object: "response.input_tokens",
    input_tokens: await engine.countInputTokens(prepared.request, signal),
  };
}
