/**
 * Validation of `response.create` frames on one connection, remembered per distinct settings.
 *
 * A coding agent repeats everything but its new input on every turn of a connection: model,
 * instructions, its whole tool set (Codex: dozens of tools with JSON schemas), tool_choice, store…
 * Validating the tool definitions was most of a turn's validation (zod: 0.3 ms of 0.33 ms for 16
 * tools on the test VM). So the first frame with given settings is validated whole, and its settings
 * (everything but `input` and `previous_response_id`) are remembered by their SHA-256; a later frame
 * with the same settings validates only its input and chain against the same schema, and takes the
 * settings as validated before.
 *
 * Contract: the body returned is what `validateBody(responseCreateSchema, raw)` returns (or the same
 * 400 is thrown). The cached path validates `{input, previous_response_id}` with the full schema, so
 * every rule on those fields applies; a rule that ties them to a setting and fails without it makes
 * the partial validation fail, and the frame is then validated whole. Input made only of plain
 * tool-loop items (see `plainInput`) is known valid without running the schema.
 */
import { createHash } from "node:crypto";
import { responseCreateSchema, type ResponseCreateBody } from "../protocol/responses.js";
import { validateBody } from "./validate.js";

/** Distinct settings remembered per connection (lanes with different tool sets, a few at once). */
const REMEMBERED_SETTINGS = 8;

export class ValidationCache {
  /** Validated settings by the digest of their JSON, least recently used first. */
  readonly #settings = new Map<string, Record<string, unknown>>();

  validate(raw: unknown): ResponseCreateBody {
    if (typeof raw !== "object" || raw === null || Array.isArray(raw))
      return validateBody(responseCreateSchema, raw);
    const { input, previous_response_id: previous, ...settings } = raw as Record<string, unknown>;
    const digest = createHash("sha256").update(JSON.stringify(settings)).digest("base64");
    const known = this.#settings.get(digest);
    if (known !== undefined) {
      this.#settings.delete(digest);
      this.#settings.set(digest, known);
      if (plainInput(input) && (previous == null || typeof previous === "string")) {
        const body = { ...known } as ResponseCreateBody;
        if (input !== undefined) body.input = input as ResponseCreateBody["input"];
        if (previous !== undefined) body.previous_response_id = previous as string | null;
        return body;
      }
      const own: Record<string, unknown> = {};
      if (input !== undefined) own.input = input;
      if (previous !== undefined) own.previous_response_id = previous;
      const parsed = responseCreateSchema.safeParse(own);
      if (parsed.success) {
        const body = { ...known } as ResponseCreateBody;
        if ("input" in parsed.data) body.input = parsed.data.input;
        if ("previous_response_id" in parsed.data)
          body.previous_response_id = parsed.data.previous_response_id;
        return body;
      }
    }
    const body = validateBody(responseCreateSchema, raw);
    const { input: _input, previous_response_id: _previous, ...validated } = body;
    if (this.#settings.size >= REMEMBERED_SETTINGS)
      this.#settings.delete(this.#settings.keys().next().value!);
    this.#settings.set(digest, validated);
    return body;
  }
}

const ROLES = new Set(["user", "assistant", "system", "developer"]);

/**
 * Whether `input` is made only of the items a tool loop sends every turn, in their plain form
 * (a user or assistant message with string content, a function or custom tool call, its output as
 * a string), each of which the schema accepts as is: then the schema's verdict is known without
 * running it. Run cold, once per turn, zod's union of item shapes cost more than the rest of a
 * turn's validation (about 0.25 ms a turn on the test VM, 3 µs in a hot loop). Anything else
 * (content parts, images, references, other items) goes through the schema.
 */
function plainInput(input: unknown): boolean {
  if (input === undefined || typeof input === "string") return true;
  if (!Array.isArray(input)) return false;
  for (const item of input as unknown[]) {
    if (typeof item !== "object" || item === null || Array.isArray(item)) return false;
    const fields = item as Record<string, unknown>;
    const type = fields.type;
    if (type === undefined || type === "message") {
      if (typeof fields.role !== "string" || !ROLES.has(fields.role) || typeof fields.content !== "string")
        return false;
    } else if (type === "function_call_output" || type === "custom_tool_call_output") {
      if (typeof fields.call_id !== "string" || typeof fields.output !== "string") return false;
    } else if (type === "function_call") {
      if (
        (fields.namespace !== undefined && typeof fields.namespace !== "string") ||
        typeof fields.call_id !== "string" ||
        typeof fields.name !== "string" ||
        typeof fields.arguments !== "string"
      )
        return false;
    } else if (type === "custom_tool_call") {
      if (
        (fields.namespace !== undefined && typeof fields.namespace !== "string") ||
        typeof fields.call_id !== "string" ||
        typeof fields.name !== "string" ||
        typeof fields.input !== "string"
      )
        return false;
    } else return false;
  }
  return true;
}
