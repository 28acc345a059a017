/** Wire shapes of the OpenAI Chat Completions API, validated leniently like the real API. */
import { z } from "zod";

/** An image: a data URL or an http(s) URL (checked when the messages are normalized, `core/conversation.ts`). */
const imageUrlPart = z.looseObject({
  type: z.literal("image_url"),
  image_url: z.union([
    z.string(),
    z.looseObject({ url: z.string(), detail: z.enum(["auto", "low", "high"]).nullish() }),
  ]),
});
const otherPart = z
  .looseObject({ type: z.string(), text: z.string().optional() })
  .refine((part) => part.type !== "image_url", { message: "malformed image_url part" });
const contentParts = z.array(z.union([imageUrlPart, otherPart]));
const content = z.union([z.string(), contentParts]).nullish();

const toolCall = z.looseObject({
  id: z.string(),
  type: z.literal("function").optional(),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});

const chatMessage = z.discriminatedUnion("role", [
  z.looseObject({ role: z.literal("system"), content }),
  z.looseObject({ role: z.literal("developer"), content }),
  z.looseObject({ role: z.literal("user"), content }),
  z.looseObject({ role: z.literal("assistant"), content, tool_calls: z.array(toolCall).nullish() }),
  z.looseObject({ role: z.literal("tool"), content, tool_call_id: z.string() }),
]);
export type ChatMessage = z.infer<typeof chatMessage>;

const chatTool = z.union([
  z.looseObject({
    type: z.literal("function"),
    function: z.looseObject({
      name: z.string().min(1),
      description: z.string().nullish(),
      parameters: z.record(z.string(), z.unknown()).nullish(),
    }),
  }),
  z.looseObject({
    type: z.literal("custom"),
    custom: z.looseObject({ name: z.string().min(1), description: z.string().nullish() }),
  }),
]);

export const chatCompletionSchema = z.looseObject({
  model: z.string().min(1).optional(),
  messages: z.array(chatMessage).min(1),
  tools: z.array(chatTool).nullish(),
  /** Checked against the tools in `core/tool-choice.ts`. */
  tool_choice: z.union([z.enum(["auto", "none", "required"]), z.looseObject({ type: z.string() })]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  /** Checked and normalized in `core/structured-output.ts`. */
  response_format: z.unknown().optional(),
  max_tokens: z.number().int().positive().nullish(),
  max_completion_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  stop: z.union([z.string().min(1), z.array(z.string().min(1)).max(4)]).nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().nullish() }).nullish(),
  n: z.literal(1).nullish(),
  prediction: z
    .looseObject({ type: z.literal("content"), content: z.union([z.string(), contentParts]) })
    .nullish(),
  user: z.string().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  /** Spark extension: speculative decoding switches for this request (absent: the engine's defaults). */
  speculation: z.looseObject({ input_lookup: z.boolean().nullish() }).nullish(),
  /** Spark extension (as llama-server's): never end at an end-of-generation token; generate to the token limit. */
  ignore_eos: z.boolean().nullish(),
});
export type ChatCompletionBody = z.infer<typeof chatCompletionSchema>;
