/**
 * Wire shape of the OpenAI (legacy) Completions API, `POST /v1/completions`, as editors use it for
 * fill in the middle: `prompt` is the text before the cursor and `suffix` the text after it.
 * `input_extra` is a Spark extension borrowed from llama.cpp's `/infill`: chunks of other files,
 * placed before the prefix as context.
 */
import { z } from "zod";

/** Most choices one request may ask for. */
export const MAX_COMPLETION_CHOICES = 8;

const extraChunk = z.looseObject({ filename: z.string().max(4096), text: z.string() });

export const completionSchema = z.looseObject({
  model: z.string().min(1).optional(),
  // OpenAI also takes a list of prompts (one completion each) or token arrays; editors send one
  // string, and so does every client we know of. A one-element list is accepted as that string.
  prompt: z.union([z.string(), z.array(z.string()).length(1)]),
  suffix: z.string().nullish(),
  input_extra: z.array(extraChunk).max(64).nullish(),
  max_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  stop: z.union([z.string().min(1), z.array(z.string().min(1)).max(4)]).nullish(),
  n: z.number().int().min(1).max(MAX_COMPLETION_CHOICES).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
  echo: z.literal(false).nullish(),
  best_of: z.literal(1).nullish(),
  logprobs: z.null().optional(),
  user: z.string().nullish(),
  /** Spark extension (as llama-server's): never end at an end-of-generation token; generate to the token limit. */
  ignore_eos: z.boolean().nullish(),
});
export type CompletionBody = z.infer<typeof completionSchema>;
