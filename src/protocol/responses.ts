/**
 * Wire shapes of the OpenAI Responses API: the create body (validated with zod, lenient where the
 * real API is lenient) and the Response object and stream events Spark sends back.
 */
import { z } from "zod";

const textPart = z.looseObject({
  type: z.enum(["input_text", "output_text", "text", "summary_text", "refusal"]),
  text: z.string().optional(),
  refusal: z.string().optional(),
});
/**
 * An image: `image_url` is a data URL or an http(s) URL (checked when the input is normalized, see
 * `core/conversation.ts`); `file_id` (the Files API) is refused there, Spark has no file store.
 */
const imagePart = z.looseObject({
  type: z.literal("input_image"),
  image_url: z.string().nullish(),
  file_id: z.string().nullish(),
  detail: z.enum(["auto", "low", "high"]).nullish(),
});
/** Other parts (files, audio) are accepted and carry no text. */
const otherPart = z
  .looseObject({ type: z.string() })
  .refine((part) => part.type !== "input_image", { message: "malformed input_image part" });
const contentPart = z.union([textPart, imagePart, otherPart]);

const messageItem = z.looseObject({
  type: z.literal("message").optional(),
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.union([z.string(), z.array(contentPart)]),
});

const toolOutput = z.union([z.string(), z.array(contentPart)]);

const functionCallItem = z.looseObject({
  type: z.literal("function_call"),
  call_id: z.string(),
  name: z.string(),
  /** The namespace tool the called function is in (see `core/namespace-tools.ts`). */
  namespace: z.string().nullish(),
  arguments: z.string(),
});
const functionCallOutputItem = z.looseObject({
  type: z.literal("function_call_output"),
  call_id: z.string(),
  output: toolOutput,
});
const customToolCallItem = z.looseObject({
  type: z.literal("custom_tool_call"),
  call_id: z.string(),
  name: z.string(),
  namespace: z.string().nullish(),
  input: z.string(),
});
const customToolCallOutputItem = z.looseObject({
  type: z.literal("custom_tool_call_output"),
  call_id: z.string(),
  output: toolOutput,
});
/**
 * An earlier item by id (an output or input item of a stored response), replaced by that item
 * before anything reads the input. `type` may be left out, as the API allows.
 */
const itemReference = z.looseObject({
  type: z.literal("item_reference").nullish(),
  id: z.string().min(1),
});
/** Reasoning, web search calls, compaction items and the like: carried by clients, ignored here. */
const otherItem = z
  .looseObject({ type: z.string() })
  .refine(
    (item) =>
      ![
        "message",
        "function_call",
        "function_call_output",
        "custom_tool_call",
        "custom_tool_call_output",
        "item_reference",
      ].includes(item.type),
    { message: "malformed input item" },
  );

export const inputItemSchema = z.union([
  messageItem,
  functionCallItem,
  functionCallOutputItem,
  customToolCallItem,
  customToolCallOutputItem,
  itemReference,
  otherItem,
]);
export type InputItem = z.infer<typeof inputItemSchema>;

const functionTool = z.looseObject({
  type: z.literal("function"),
  name: z.string().min(1),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});
const customTool = z.looseObject({
  type: z.literal("custom"),
  name: z.string().min(1),
  description: z.string().nullish(),
  format: z.record(z.string(), z.unknown()).nullish(),
});
/**
 * A client's group of function and custom tools (Codex 0.171 sends its MCP servers' tools so):
 * the model sees the tools inside, see `core/namespace-tools.ts`.
 */
const namespaceTool = z.looseObject({
  type: z.literal("namespace"),
  name: z.string().min(1),
  description: z.string().nullish(),
  tools: z.array(z.union([functionTool, customTool])),
});
/**
 * Hosted tools (`web_search`, `file_search`, `local_shell`, …) are accepted for compatibility (Codex
 * sends them) but never run: the response names them in `metadata.spark_unavailable_tools`.
 */
const otherTool = z
  .looseObject({ type: z.string() })
  .refine((tool) => !["function", "custom", "namespace"].includes(tool.type), { message: "malformed tool" });
export const toolSchema = z.union([functionTool, customTool, namespaceTool, otherTool]);

export const toolChoiceSchema = z.union([
  z.enum(["auto", "none", "required"]),
  z.looseObject({ type: z.enum(["function", "custom"]), name: z.string() }),
  z.looseObject({ type: z.string() }),
]);

export const responseCreateSchema = z.looseObject({
  model: z.string().min(1).optional(),
  input: z.union([z.string(), z.array(inputItemSchema)]).optional(),
  instructions: z.string().nullish(),
  tools: z.array(toolSchema).nullish(),
  tool_choice: toolChoiceSchema.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  max_output_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
  store: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  previous_response_id: z.string().nullish(),
  reasoning: z.looseObject({}).nullish(),
  text: z.looseObject({}).nullish(),
  include: z.array(z.string()).nullish(),
  /** Checked in `core/logprobs.ts`. */
  top_logprobs: z.unknown().optional(),
  prompt_cache_key: z.string().nullish(),
  truncation: z.string().nullish(),
  user: z.string().nullish(),
  service_tier: z.string().nullish(),
  /** `false` prepares a chainable response without generating (Codex's connection prewarm). */
  generate: z.boolean().nullish(),
  /**
   * Spark extension: Predicted Outputs as on Chat Completions (`{type: "content", content}`), the
   * text the output is expected to mostly repeat (a file being rewritten); engines may draft from it.
   */
  prediction: z
    .looseObject({
      type: z.literal("content"),
      content: z.union([
        z.string(),
        z.array(z.looseObject({ type: z.string(), text: z.string().optional() })),
      ]),
    })
    .nullish(),
  background: z.boolean().nullish(),
  /** The conversation (Conversations API) this response continues and adds its items to: an id or `{id}`. */
  conversation: z.union([z.string().min(1), z.looseObject({ id: z.string().min(1) })]).nullish(),
  /** Spark extension: speculative decoding switches for this request (absent: the engine's defaults). */
  speculation: z.looseObject({ input_lookup: z.boolean().nullish() }).nullish(),
  /** Spark extension (as llama-server's): never end at an end-of-generation token; generate to the token limit. */
  ignore_eos: z.boolean().nullish(),
  /** WebSocket lane; validated by the WebSocket session, ignored over HTTP. */
  stream_id: z.string().nullish(),
  context_management: z
    .array(
      z.looseObject({
        type: z.literal("compaction"),
        compact_threshold: z.number().int().positive().nullish(),
      }),
    )
    .nullish(),
});
export type ResponseCreateBody = z.infer<typeof responseCreateSchema>;

export interface OutputTextPart {
  type: "output_text";
  text: string;
  annotations: unknown[];
  /** With `include: ["message.output_text.logprobs"]`: each token's log probability. */
  logprobs?: unknown[];
}

export type OutputItem =
  | {
      id: string;
      type: "message";
      status: ItemStatus;
      role: "assistant";
      content: OutputTextPart[];
    }
  | {
      id: string;
      type: "function_call";
      status: ItemStatus;
      call_id: string;
      name: string;
      /** Set when the function is one of a namespace tool's (`name` is then its name there). */
      namespace?: string;
      arguments: string;
    }
  | {
      id: string;
      type: "custom_tool_call";
      status: ItemStatus;
      call_id: string;
      name: string;
      namespace?: string;
      input: string;
    }
  | CompactionItem;

/** Opaque context summary; clients pass it back verbatim to restore the pruned context. */
export interface CompactionItem {
  id: string;
  type: "compaction";
  encrypted_content: string;
  /** Compaction items have no lifecycle; the field keeps the output union uniform. */
  status?: undefined;
}

/** `POST /v1/responses/compact`: body and result. */
export const compactRequestSchema = z.looseObject({
  model: z.string().min(1).nullish(),
  input: z.union([z.string(), z.array(inputItemSchema)]).nullish(),
  instructions: z.string().nullish(),
  previous_response_id: z.string().nullish(),
});
export type CompactRequestBody = z.infer<typeof compactRequestSchema>;

export interface CompactedResponse {
  id: string;
  object: "response.compaction";
  created_at: number;
  /** The kept user messages, then one compaction item. */
  output: (
    | {
        id: string;
        type: "message";
        role: "user";
        status: "completed";
        content: { type: "input_text"; text: string }[];
      }
    | CompactionItem
  )[];
  usage: ResponseUsage;
  /**
   * Spark's addition: the tokens of the context this compaction stands for (instructions, summary,
   * kept messages), by the model's tokenizer: what the next request's input starts from. `usage`
   * counts the summarizing itself (the conversation read, the summary written).
   */
  context_tokens?: number;
}

export type ItemStatus = "in_progress" | "completed" | "incomplete";

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: {
    reasoning_tokens: number;
    /** Spark extension, with a prediction the engine verified: as on Chat Completions. */
    accepted_prediction_tokens?: number;
    rejected_prediction_tokens?: number;
  };
  total_tokens: number;
  /** Spark extension: what speculative decoding did, when the engine speculated. */
  speculation?: { drafted: number; accepted: number; rejected: number; steps: number };
}

export interface ResponseObject {
  id: string;
  object: "response";
  created_at: number;
  status: "queued" | "in_progress" | "completed" | "incomplete" | "failed" | "cancelled";
  model: string;
  output: OutputItem[];
  error: { code: string; message: string } | null;
  incomplete_details: { reason: string } | null;
  instructions: string | null;
  max_output_tokens: number | null;
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  reasoning: Record<string, unknown> | null;
  store: boolean;
  temperature: number | null;
  text: Record<string, unknown>;
  tool_choice: unknown;
  tools: unknown[];
  top_p: number | null;
  truncation: string;
  usage: ResponseUsage | null;
  metadata: Record<string, string>;
  user: string | null;
  /** Whether it runs in the background (`background: true`: it returned at once, `GET` follows it). */
  background: boolean;
  /** The conversation it continued and added its input and output to (`conversation` on create). */
  conversation?: { id: string } | null;
  /** Unix seconds when it completed (`status: "completed"` only). */
  completed_at?: number | null;
}

/** A Responses stream event before it is numbered; the stream assigns `sequence_number`. */
export type ResponseEvent = { type: string } & Record<string, unknown>;
