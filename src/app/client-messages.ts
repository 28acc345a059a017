/**
 * What a browser may send the app over its socket, validated before anything acts on it: a
 * schema per message type, bounds on every string and number, images as base64 data URLs.
 *
 * Its own module so that the app serves its first page without zod (~0.75 MB of code, ~60 ms to
 * load on the test VM, figures 27 and 34): app-server.ts loads it once a browser connects, and
 * handles that browser's messages, in order, once it is loaded.
 */
import { z } from "zod";
import { MAX_VARIANTS, MIN_VARIANTS } from "../agent/variants/runner.js";
import type { ClientMessage } from "./protocol.js";

/** Images on one message, and the characters of each data URL (about 7.5 MiB of image). */
const MAX_IMAGES = 4;
const MAX_IMAGE_URL_CHARS = 10 * 1024 * 1024;
const text = z.string().max(200_000);
const taskId = z.string().min(1).max(200);
const clientMessage: z.ZodType<ClientMessage> = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("hello") }),
  z.strictObject({
    type: z.literal("task.create"),
    model: z.string().min(1).max(200),
    text: text.optional(),
    background: z.boolean().optional(),
    title: z.string().max(200).optional(),
  }),
  z.strictObject({ type: z.literal("task.open"), task: taskId }),
  z.strictObject({ type: z.literal("task.rename"), task: taskId, title: z.string().max(200) }),
  z.strictObject({ type: z.literal("task.delete"), task: taskId }),
  z
    .strictObject({
      type: z.literal("send"),
      task: taskId,
      text,
      sentAt: z.number().optional(),
      /** Pasted or attached images, as data URLs; the server routes them to a model that sees. */
      images: z
        .array(
          z
            .string()
            .max(MAX_IMAGE_URL_CHARS)
            .regex(
              /^data:image\/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=]+$/,
              "must be a base64 image data URL",
            ),
        )
        .max(MAX_IMAGES)
        .optional(),
    })
    .refine((message) => message.text.length > 0 || (message.images?.length ?? 0) > 0, {
      message: "send needs text or an image",
    }),
  z.strictObject({ type: z.literal("queue"), task: taskId, text: text.min(1) }),
  z.strictObject({ type: z.literal("stop"), task: taskId }),
  z.strictObject({ type: z.literal("model"), task: taskId, model: z.string().min(1).max(200) }),
  z.strictObject({ type: z.literal("compact"), task: taskId }),
  z.strictObject({ type: z.literal("new_context"), task: taskId }),
  z.strictObject({
    type: z.literal("approval"),
    task: taskId,
    entry: z.string().max(200),
    answer: z.enum(["yes", "always", "no"]),
    reason: z.string().max(2000).optional(),
  }),
  z.strictObject({
    type: z.literal("variants"),
    task: taskId,
    count: z.number().int().min(MIN_VARIANTS).max(MAX_VARIANTS),
    text: text.min(1),
  }),
  z.strictObject({
    type: z.literal("choose"),
    task: taskId,
    entry: z.string().max(200),
    index: z
      .number()
      .int()
      .min(0)
      .max(MAX_VARIANTS - 1),
  }),
  z.strictObject({ type: z.literal("variants.discard"), task: taskId, entry: z.string().max(200) }),
  z.strictObject({
    type: z.literal("variant.diff"),
    task: taskId,
    entry: z.string().max(200),
    index: z
      .number()
      .int()
      .min(0)
      .max(MAX_VARIANTS - 1),
  }),
  z.strictObject({ type: z.literal("review"), task: taskId }),
  z.strictObject({ type: z.literal("revert"), task: taskId, path: z.string().min(1).max(4096).optional() }),
  z.strictObject({ type: z.literal("undo"), task: taskId, turn: z.number().int().min(1).optional() }),
  z.strictObject({ type: z.literal("redo"), task: taskId }),
  z.strictObject({ type: z.literal("keep"), task: taskId, path: z.string().min(1).max(4096).optional() }),
  z.strictObject({ type: z.literal("apply"), task: taskId, path: z.string().min(1).max(4096).optional() }),
  z.strictObject({ type: z.literal("discard"), task: taskId, path: z.string().min(1).max(4096).optional() }),
  z.strictObject({ type: z.literal("file"), task: taskId, path: z.string().min(1).max(4096) }),
  z.strictObject({ type: z.literal("files"), query: z.string().max(200) }),
]) as z.ZodType<ClientMessage>;

/** The message, or why it is not one (a line for the browser). */
export function parseClientMessage(json: unknown): { message: ClientMessage } | { error: string } {
  const parsed = clientMessage.safeParse(json);
  if (parsed.success) return { message: parsed.data };
  return { error: `not an app message: ${z.prettifyError(parsed.error).replace(/\n/g, "; ").slice(0, 500)}` };
}
