/**
 * Wire shapes of the OpenAI Conversations API (`/v1/conversations`): request bodies validated with
 * zod as the API documents them (at most 20 items per request, metadata of at most 16 pairs with
 * keys up to 64 and values up to 512 characters), and the objects sent back.
 */
import { z } from "zod";
import { inputItemSchema } from "./responses.js";

export const MAX_ITEMS_PER_REQUEST = 20;

export const metadataSchema = z
  .record(z.string().max(64), z.string().max(512))
  .refine((metadata) => Object.keys(metadata).length <= 16, { message: "at most 16 metadata pairs" });

const items = z.array(inputItemSchema).max(MAX_ITEMS_PER_REQUEST);

export const conversationCreateSchema = z.looseObject({
  items: items.nullish(),
  metadata: metadataSchema.nullish(),
});

export const conversationUpdateSchema = z.looseObject({
  metadata: metadataSchema.nullable(),
});

export const conversationItemsCreateSchema = z.looseObject({
  items: items.min(1),
});

/** `conversation` on `POST /v1/responses`: the id, or `{id}`. */
export const conversationParamSchema = z.union([z.string().min(1), z.looseObject({ id: z.string().min(1) })]);

export interface ConversationObject {
  id: string;
  object: "conversation";
  created_at: number;
  metadata: Record<string, string>;
}

export interface ConversationDeleted {
  id: string;
  object: "conversation.deleted";
  deleted: true;
}
