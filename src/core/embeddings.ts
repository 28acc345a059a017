/**
 * `POST /v1/embeddings`, transport-free: validates the body (`input` as a string, strings, token ids
 * or lists of token ids; `encoding_format` `float` or `base64`; `dimensions`), resolves the model,
 * admits the request like any other (rate limits, queue) and asks the model's engine for vectors.
 * An engine without embeddings is a 400 naming `model`; `dimensions` is the engine's to honour or
 * refuse.
 */
import type { EmbeddingRequest } from "../engine/types.js";
import { shown, SparkError } from "../protocol/errors.js";
import { embeddingsSchema } from "../protocol/embeddings.js";
import type { LimitGate } from "./limits/gate.js";
import { anonymousPrincipal, type Principal } from "./keys.js";
import type { ModelRegistry } from "./model-registry.js";
import { validateBody } from "./validate.js";

export interface EmbeddingList {
  object: "list";
  data: { object: "embedding"; index: number; embedding: number[] | string }[];
  model: string;
  usage: { prompt_tokens: number; total_tokens: number };
}

export class EmbeddingsService {
  constructor(
    private readonly models: ModelRegistry,
    private readonly admission: LimitGate,
  ) {}

  async create(
    raw: unknown,
    signal: AbortSignal,
    principal: Principal = anonymousPrincipal,
  ): Promise<EmbeddingList> {
    const body = validateBody(embeddingsSchema, raw);
    const resolved = this.models.resolve(body.model);
    const engine = resolved.entry.engine;
    if (!engine.embed)
      throw SparkError.invalid(
        `Model '${shown(resolved.name)}' (the ${engine.kind} engine) has no embeddings.`,
        "model",
        "model_not_supported",
      );
    const input = body.input;
    const inputs =
      typeof input === "string"
        ? [input]
        : typeof input[0] === "number"
          ? [input as number[]]
          : (input as string[] | number[][]);
    const request: EmbeddingRequest = { model: resolved.engineModel, inputs };
    if (body.dimensions != null) request.dimensions = body.dimensions;
    const { entry } = resolved;
    const ticket = await this.admission.admit(principal, entry.tier, engine, entry.capacity);
    let tokens = 0;
    try {
      await ticket.wait(signal);
      const result = await engine.embed(request, signal);
      tokens = result.inputTokens;
      const base64 = body.encoding_format === "base64";
      return {
        object: "list",
        data: result.vectors.map((vector, index) => ({
          object: "embedding",
          index,
          embedding: base64 ? Buffer.from(Float32Array.from(vector).buffer).toString("base64") : vector,
        })),
        model: resolved.name,
        usage: { prompt_tokens: tokens, total_tokens: tokens },
      };
    } finally {
      ticket.release(tokens);
    }
  }
}
