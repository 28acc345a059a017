/** Wire shape of `POST /v1/embeddings` (OpenAI's Embeddings API), validated like the real API. */
import { z } from "zod";

/** OpenAI's limit on the inputs of one request. */
export const MAX_EMBEDDING_INPUTS = 2048;

const token = z.number().int().min(0);

export const embeddingsSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([
    z.string().min(1),
    z.array(z.string().min(1)).min(1).max(MAX_EMBEDDING_INPUTS),
    z.array(token).min(1),
    z.array(z.array(token).min(1)).min(1).max(MAX_EMBEDDING_INPUTS),
  ]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.number().int().positive().nullish(),
  /** An end user's id, for OpenAI's abuse monitoring: a documented no-op here (docs/api.md). */
  user: z.string().nullish(),
});
export type EmbeddingsBody = z.infer<typeof embeddingsSchema>;
