/**
 * Every parameter OpenAI's reference defines for the create routes is done exactly, a documented
 * no-op, or refused with a 400 naming it (`param`); this module holds the last two kinds, checked on
 * the raw body before anything runs. The parameters Spark does serve are read by the services and
 * `request-features.ts`; the `openai` npm package's types (`ChatCompletionCreateParams`,
 * `CompletionCreateParams`, `EmbeddingCreateParams`, `ResponseCreateParams`) are the list checked
 * against, and docs/api.md has the table of no-ops.
 *
 * A refused parameter is accepted at its default (a penalty of 0, an empty `logit_bias`, `null`):
 * sending the default asks for nothing Spark does not do.
 */
import { shown, SparkError } from "../protocol/errors.js";

type Body = Record<string, unknown>;

/**
 * Parameters that tune OpenAI's hosted service and change nothing in the answer: accepted and
 * ignored, as documented (docs/api.md, "Hosted-service parameters").
 */
export const HOSTED_NO_OPS = [
  "prompt_cache_key",
  "prompt_cache_options",
  "prompt_cache_retention",
  "service_tier",
  "safety_identifier",
  "user",
  "stream_options.include_obfuscation",
] as const;

function present(value: unknown): boolean {
  return value !== undefined && value !== null;
}

function refuse(param: string, why: string, code = "unsupported_parameter"): never {
  throw new SparkError(400, "invalid_request_error", code, `'${param}' ${why}`, param);
}

/** Sampling parameters Spark's engines do not implement: refused unless at their default. */
function refuseSamplingExtras(body: Body): void {
  for (const key of ["frequency_penalty", "presence_penalty"]) {
    const value = body[key];
    if (!present(value) || value === 0) continue;
    if (typeof value !== "number" || value < -2 || value > 2)
      refuse(key, "must be a number from -2 to 2.", "invalid_value");
    refuse(key, "is not supported: Spark's engines apply no repetition penalties (send 0 or leave it out).");
  }
  const bias = body.logit_bias;
  if (present(bias)) {
    if (typeof bias !== "object" || Array.isArray(bias))
      refuse("logit_bias", "must be an object.", "invalid_value");
    if (Object.keys(bias as object).length > 0)
      refuse("logit_bias", "is not supported: token ids differ between Spark's models (leave it out).");
  }
  if (present(body.seed))
    refuse(
      "seed",
      "is not supported: sampling is not seeded (temperature 0 is deterministic on the llama engine; leave seed out).",
    );
}

/** Parameters of newer SDKs (openai 7) that ask for hosted services Spark does not have. */
function refuseHostedServices(body: Body): void {
  if (present(body.moderation))
    refuse("moderation", "is not supported: Spark runs no moderation on input or output (leave it out).");
  if (present(body.access_programs))
    refuse(
      "access_programs",
      "is not supported: Spark has no domain-specific access programs (leave it out).",
    );
  const image = body.image;
  if (present(image) && !(isObject(image) && sameKeys(image, { context_compression: "disabled" })))
    refuse(
      "image",
      "is not supported: Spark keeps images as sent, without context compression (leave it out, or send {context_compression: 'disabled'}).",
    );
}

function isObject(value: unknown): value is Body {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Whether `value` holds only keys of `allowed`, each at that value. */
function sameKeys(value: Body, allowed: Body): boolean {
  return Object.entries(value).every(([key, entry]) => key in allowed && allowed[key] === entry);
}

/** `POST /v1/chat/completions`. */
export function checkChatParameters(body: Body): void {
  refuseSamplingExtras(body);
  refuseHostedServices(body);
  if (present(body.functions) || present(body.function_call))
    refuse(
      present(body.functions) ? "functions" : "function_call",
      "is deprecated and not supported: send 'tools' and 'tool_choice' instead.",
    );
  if (present(body.audio)) refuse("audio", "is not supported: Spark answers in text.");
  const modalities = body.modalities;
  if (present(modalities)) {
    if (!Array.isArray(modalities)) refuse("modalities", "must be an array.", "invalid_value");
    const other = modalities.find((modality) => modality !== "text");
    if (other !== undefined) refuse("modalities", `includes ${shown(other)}: Spark answers in text only.`);
  }
  if (body.store === true)
    refuse(
      "store",
      "is not supported: Spark does not store chat completions (use the Responses API to store).",
    );
  if (present(body.web_search_options))
    refuse("web_search_options", "is not supported: Spark does not search the web.");
  const effort = body.reasoning_effort;
  if (present(effort) && !["none", "minimal", "low", "medium", "high", "xhigh"].includes(effort as string))
    refuse("reasoning_effort", `has an unknown value ${shown(effort)}.`, "invalid_value");
  const verbosity = body.verbosity;
  if (present(verbosity) && !["low", "medium", "high"].includes(verbosity as string))
    refuse("verbosity", `has an unknown value ${shown(verbosity)}.`, "invalid_value");
  if (present(body.stop) && body.logprobs === true)
    refuse(
      "stop",
      "together with logprobs is not supported: a stop sequence cuts tokens apart (leave one out).",
    );
}

/** `POST /v1/completions`. */
export function checkCompletionParameters(body: Body): void {
  refuseSamplingExtras(body);
}

/** `POST /v1/responses/compact`. */
export function checkCompactParameters(body: Body): void {
  refuseHostedServices(body);
}

/** `POST /v1/responses` (and what `input_tokens` shares with it). */
export function checkResponsesParameters(body: Body): void {
  refuseHostedServices(body);
  const maxToolCalls = body.max_tool_calls;
  // Spark runs no built-in tool, so the cap on built-in tool calls always holds: a valid one is a no-op.
  if (present(maxToolCalls) && !(Number.isInteger(maxToolCalls) && (maxToolCalls as number) >= 0))
    refuse("max_tool_calls", "must be an integer, 0 or more.", "invalid_value");
  const options = body.background_options;
  if (present(options)) {
    if (!isObject(options) || !sameKeys(options, { completion_window: "soonest" }))
      refuse(
        "background_options",
        "is not supported beyond {completion_window: 'soonest'}: a background response runs at once, with no batch window or continuation.",
      );
  }
  if (present(body.prompt))
    refuse("prompt", "is not supported: Spark keeps no prompt templates (send instructions and input).");
  const truncation = body.truncation;
  if (present(truncation) && truncation !== "disabled") {
    if (truncation !== "auto") refuse("truncation", "must be 'auto' or 'disabled'.", "invalid_value");
    refuse(
      "truncation",
      "'auto' is not supported: a conversation too long for the model is a 400 context_length_exceeded; " +
        "compact it with context_management or POST /v1/responses/compact.",
    );
  }
  for (const key of ["stop", "seed", "frequency_penalty", "presence_penalty", "logit_bias"])
    if (present(body[key])) refuse(key, "is not a Responses API parameter.", "unknown_parameter");
}
