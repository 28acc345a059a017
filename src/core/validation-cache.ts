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
 * the partial validation fail, and the frame is then validated whole.
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
