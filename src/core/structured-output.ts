/**
 * Structured output of both wire APIs: Chat Completions' `response_format` and Responses'
 * `text.format` (`text`, `json_object`, `json_schema` with `name`, `schema`, `strict`), checked and
 * normalized into the engine seam's `ResponseFormat`. An engine that cannot constrain its output
 * (`capabilities.structuredOutputs`) gets no such request: the client gets a 400 naming the
 * parameter instead of free text it would fail to parse. The schema itself is the engine's to judge
 * (the llama engine refuses keywords it cannot enforce; an upstream judges its own).
 */
import type { Engine, ResponseFormat } from "../engine/types.js";
import { shown, SparkError } from "../protocol/errors.js";

type Json = Record<string, unknown>;

function isRecord(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** OpenAI's rule for a response format's name. */
const NAME = /^[A-Za-z0-9_-]{1,64}$/;

/** `response_format` of a Chat Completions body. */
export function chatResponseFormat(value: unknown): ResponseFormat | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isRecord(value)) throw invalid("response_format", "must be an object with a 'type'.");
  if (value.type === "json_schema") {
    if (!isRecord(value.json_schema))
      throw invalid("response_format.json_schema", "is required for type 'json_schema'.");
    return jsonSchemaFormat(value.json_schema, "response_format.json_schema");
  }
  return simpleFormat(value, "response_format");
}

/** `text` of a Responses body: its `format` (`verbosity` is a documented no-op, see docs/api.md). */
export function responsesTextFormat(value: unknown): ResponseFormat | undefined {
  if (value === undefined || value === null) return undefined;
  if (!isRecord(value)) throw invalid("text", "must be an object.");
  const verbosity = value.verbosity;
  if (
    verbosity !== undefined &&
    verbosity !== null &&
    !["low", "medium", "high"].includes(verbosity as string)
  )
    throw invalid("text.verbosity", "must be 'low', 'medium' or 'high'.");
  const format = value.format;
  if (format === undefined || format === null) return undefined;
  if (!isRecord(format)) throw invalid("text.format", "must be an object with a 'type'.");
  if (format.type === "json_schema") return jsonSchemaFormat(format, "text.format");
  return simpleFormat(format, "text.format");
}

function simpleFormat(format: Json, param: string): ResponseFormat | undefined {
  if (format.type === "text") return undefined;
  if (format.type === "json_object") return { type: "json_object", param };
  throw new SparkError(
    400,
    "invalid_request_error",
    "unsupported_value",
    `Unsupported ${param} type ${shown(format.type)}: use 'text', 'json_object' or 'json_schema'.`,
    `${param}.type`,
  );
}

function jsonSchemaFormat(spec: Json, param: string): ResponseFormat {
  if (typeof spec.name !== "string" || !NAME.test(spec.name))
    throw invalid(`${param}.name`, "is required: 1 to 64 letters, digits, '_' or '-'.");
  if (spec.schema !== undefined && spec.schema !== null && !isRecord(spec.schema))
    throw new SparkError(
      400,
      "invalid_request_error",
      "invalid_json_schema",
      `Invalid schema for ${param}: a JSON Schema must be an object.`,
      `${param}.schema`,
    );
  if (spec.strict !== undefined && spec.strict !== null && typeof spec.strict !== "boolean")
    throw invalid(`${param}.strict`, "must be a boolean.");
  if (spec.description !== undefined && spec.description !== null && typeof spec.description !== "string")
    throw invalid(`${param}.description`, "must be a string.");
  return {
    type: "json_schema",
    name: spec.name,
    ...(typeof spec.description === "string" ? { description: spec.description } : {}),
    schema: (spec.schema as Json | undefined | null) ?? {},
    strict: spec.strict === true,
    param,
  };
}

/** A 400 when `engine` cannot constrain its output to `format`. */
export function requireStructuredOutputs(engine: Engine, format: ResponseFormat | undefined): void {
  if (!format || engine.capabilities.structuredOutputs) return;
  throw new SparkError(
    400,
    "invalid_request_error",
    "unsupported_parameter",
    `The ${engine.kind} engine cannot constrain its output to a JSON format; leave ${format.param} out or use a model on the llama or openai engine.`,
    format.param,
  );
}

function invalid(param: string, rule: string): SparkError {
  return SparkError.invalid(`Invalid '${param}': ${rule}`, param, "invalid_value");
}
