/**
 * The Conversations API, transport-free: conversations and their items (create, retrieve, update,
 * delete; items list, create, retrieve, delete), and `conversation` on `POST /v1/responses`, whose
 * items become the response's context and to which its input and output items are appended.
 *
 * Contract:
 * - Per key like stored responses: another key's conversation (or item) is `404` exactly as a
 *   missing one. The store must keep conversations (`ResponseStore.conversations`), else every call
 *   is a 400 saying so.
 * - Every stored item has an id unique in its conversation: an item sent without one gets one
 *   (`msg_…`, `fc_…`, …); an item whose id the conversation already holds gets a new one when a
 *   response appends it (an `item_reference` resolved to an earlier item) and is refused (400) when
 *   a client adds it through `items.create`. Messages without a `status` are stored `completed`.
 * - A response with `conversation` sees the conversation's items (instructions are its own), then
 *   its input. Its input and output items are appended when it ends (`completed`, `incomplete`, or
 *   `cancelled` while queued), before its terminal event is sent; a failed response appends nothing.
 *   `conversation` and `previous_response_id` are mutually exclusive (400), as OpenAI says.
 */
import type { ConversationItem } from "../engine/types.js";
import { shown, SparkError } from "../protocol/errors.js";
import {
  conversationCreateSchema,
  conversationItemsCreateSchema,
  conversationParamSchema,
  conversationUpdateSchema,
  type ConversationDeleted,
  type ConversationObject,
} from "../protocol/conversations.js";
import type { InputItem, OutputItem } from "../protocol/responses.js";
import { itemsFromResponsesInput } from "./conversation.js";
import type { ConversationRecord, ConversationStore, ItemPage } from "./conversation-store.js";
import { newId } from "./ids.js";
import type { Principal } from "./keys.js";
import { idPrefix, inputItemRecords } from "./response-items.js";
import {
  StoreUnavailableError,
  StoreWriteError,
  type InputItemRecord,
  type ResponseStore,
} from "./response-store.js";
import { validateBody } from "./validate.js";

/** A list of items as the API sends it (`items.list`, `items.create`, `input_items`). */
export interface ItemList {
  object: "list";
  data: readonly InputItemRecord[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

/** The part of a response a conversation takes part in (see `ResponsesService.prepare`). */
export interface ConversationTurn {
  id: string;
  /** The conversation's items as the engine reads them, oldest first. */
  history: ConversationItem[];
  /** Appends the response's input and output items (before its terminal event is sent). */
  append(input: readonly InputItemRecord[], output: readonly OutputItem[]): Promise<void>;
}

/**
 * `include` values of item lists and retrievals. Spark keeps input images' URLs, produces no
 * reasoning, and runs no hosted tool (so there are no such items to fill in): those are done by
 * doing nothing. Logprobs are not kept with stored items: refused.
 */
const INCLUDABLE = new Set([
  "message.input_image.image_url",
  "reasoning.encrypted_content",
  "file_search_call.results",
  "web_search_call.action.sources",
  "web_search_call.results",
  "code_interpreter_call.outputs",
  "computer_call_output.output.image_url",
]);

export function checkInclude(values: readonly string[], param = "include"): void {
  for (const value of values) {
    if (INCLUDABLE.has(value)) continue;
    throw SparkError.invalid(
      value === "message.output_text.logprobs"
        ? "Stored items do not keep logprobs: message.output_text.logprobs cannot be included here."
        : `Unknown include value '${shown(value)}'.`,
      param,
      "invalid_value",
    );
  }
}

export class ConversationsService {
  constructor(private readonly responses: ResponseStore) {}

  async create(raw: unknown, principal: Principal): Promise<ConversationObject> {
    const body = validateBody(conversationCreateSchema, raw ?? {});
    const store = this.#store("items");
    const record: ConversationRecord = {
      id: newId("conv"),
      owner: principal.id,
      createdAt: Math.floor(Date.now() / 1000),
      metadata: body.metadata ?? {},
    };
    const items = withUniqueIds(storedItems(body.items ?? [], "items"), new Set(), "items");
    await write(() => store.create(record, items));
    return objectOf(record);
  }

  async get(id: string, principal: Principal): Promise<ConversationObject> {
    return objectOf(await this.#record(id, principal));
  }

  async update(id: string, raw: unknown, principal: Principal): Promise<ConversationObject> {
    const body = validateBody(conversationUpdateSchema, raw);
    const store = this.#store("metadata");
    const updated = await write(() => store.update(id, principal.id, body.metadata ?? {}));
    if (updated === undefined) throw notFound(id);
    return objectOf(updated);
  }

  async delete(id: string, principal: Principal): Promise<ConversationDeleted> {
    const store = this.#store(null);
    if (!(await write(() => store.delete(id, principal.id)))) throw notFound(id);
    return { id, object: "conversation.deleted", deleted: true };
  }

  async listItems(id: string, principal: Principal, page: ItemPage): Promise<ItemList> {
    const store = this.#store(null);
    const result = await read(() => store.list(id, principal.id, page));
    if (!result.found) {
      if (result.missing === "conversation") throw notFound(id);
      throw SparkError.invalid(
        `No item '${shown(page.after)}' in this conversation.`,
        "after",
        "invalid_value",
      );
    }
    return listOf(result.data, result.hasMore);
  }

  async createItems(id: string, raw: unknown, principal: Principal): Promise<ItemList> {
    const body = validateBody(conversationItemsCreateSchema, raw);
    const store = this.#store(null);
    const existing = await read(() => store.items(id, principal.id));
    if (existing === undefined) throw notFound(id);
    const ids = new Set(existing.map((item) => item.id));
    const items = withUniqueIds(storedItems(body.items, "items"), ids, "items");
    if (!(await write(() => store.append(id, principal.id, items)))) throw notFound(id);
    return listOf(items, false);
  }

  async item(id: string, itemId: string, principal: Principal): Promise<InputItemRecord> {
    const store = this.#store(null);
    const item = await read(() => store.item(id, principal.id, itemId));
    if (item !== undefined) return item;
    await this.#record(id, principal);
    throw itemNotFound(itemId);
  }

  /** Deletes an item; answers the conversation, as the API does. */
  async deleteItem(id: string, itemId: string, principal: Principal): Promise<ConversationObject> {
    const store = this.#store(null);
    const record = await this.#record(id, principal);
    if (!(await write(() => store.deleteItem(id, principal.id, itemId)))) throw itemNotFound(itemId);
    return objectOf(record);
  }

  /**
   * The conversation a `POST /v1/responses` body names, if any: its items as the response's history
   * and the hook that appends the response's items. A 400 with `previous_response_id` too, a 404
   * for a conversation the key does not have.
   */
  async open(
    body: { conversation?: unknown; previous_response_id?: string | null | undefined },
    principal: Principal,
  ): Promise<ConversationTurn | undefined> {
    if (body.conversation == null) return undefined;
    const parsed = conversationParamSchema.safeParse(body.conversation);
    if (!parsed.success)
      throw SparkError.invalid(
        "conversation must be a conversation id or {id}.",
        "conversation",
        "invalid_value",
      );
    if (body.previous_response_id)
      throw SparkError.invalid(
        "Mutually exclusive parameters: send either previous_response_id or conversation, not both.",
        "conversation",
        "mutually_exclusive_parameters",
      );
    const id = typeof parsed.data === "string" ? parsed.data : parsed.data.id;
    const store = this.#store("conversation");
    const items = await read(() => store.items(id, principal.id));
    if (items === undefined) throw notFound(id, "conversation");
    const ids = new Set(items.map((item) => item.id));
    return {
      id,
      history: itemsFromResponsesInput(items as unknown as InputItem[], undefined),
      append: async (input, output) => {
        const added = withUniqueIds(
          [...storedItems(input as InputItem[], "input"), ...(output as unknown as InputItemRecord[])],
          ids,
          null,
        );
        // A conversation deleted meanwhile keeps nothing; the response itself is not affected. A
        // store error is the response's (`store_write_failed`), as its own record's would be.
        await store.append(id, principal.id, added);
        for (const item of added) ids.add(item.id);
      },
    };
  }

  async #record(id: string, principal: Principal): Promise<ConversationRecord> {
    const store = this.#store(null);
    const record = await read(() => store.get(id, principal.id));
    if (record === undefined) throw notFound(id);
    return record;
  }

  #store(param: string | null): ConversationStore {
    const store = this.responses.conversations;
    if (store !== undefined) return store;
    throw SparkError.invalid(
      "This server's response store keeps no conversations; use --store sqlite, memory or a Postgres URL.",
      param,
      "conversations_unsupported",
    );
  }
}

function objectOf(record: ConversationRecord): ConversationObject {
  return { id: record.id, object: "conversation", created_at: record.createdAt, metadata: record.metadata };
}

function listOf(data: readonly InputItemRecord[], hasMore: boolean): ItemList {
  return {
    object: "list",
    data,
    first_id: data[0]?.id ?? null,
    last_id: data.at(-1)?.id ?? null,
    has_more: hasMore,
  };
}

/** Items as a conversation stores them: each with an id, messages with a status. */
function storedItems(items: readonly InputItem[], param: string): InputItemRecord[] {
  // Checked as a response's input is (images, malformed items): a stored item must be usable later.
  itemsFromResponsesInput(items as InputItem[], undefined);
  return inputItemRecords(items as InputItem[]).map((item, index) => {
    if (item.type === "item_reference")
      throw SparkError.invalid(
        "item_reference items cannot be stored in a conversation.",
        `${param}[${index}]`,
      );
    return item.type === "message" && item.status === undefined ? { ...item, status: "completed" } : item;
  });
}

/**
 * `items` with ids unique among themselves and against `taken`: a repeated id is refused (400
 * naming the item) when `param` is given, else replaced with a new id.
 */
function withUniqueIds(
  items: InputItemRecord[],
  taken: ReadonlySet<string>,
  param: string | null,
): InputItemRecord[] {
  const seen = new Set(taken);
  return items.map((item, index) => {
    if (!seen.has(item.id)) {
      seen.add(item.id);
      return item;
    }
    if (param !== null)
      throw SparkError.invalid(
        `An item with id '${shown(item.id)}' is already in this conversation.`,
        `${param}[${index}].id`,
        "duplicate_item_id",
      );
    const renamed = { ...item, id: newId(idPrefix(item.type)) };
    seen.add(renamed.id);
    return renamed;
  });
}

function notFound(id: string, param: string | null = null): SparkError {
  return SparkError.notFound(
    `Conversation with id '${shown(id)}' not found.`,
    "conversation_not_found",
    param,
  );
}

function itemNotFound(id: string): SparkError {
  return SparkError.notFound(`Item with id '${shown(id)}' not found in this conversation.`, "item_not_found");
}

async function read<T>(operation: () => T | Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    throw storeError(error);
  }
}

const write = read;

/** A store that cannot be reached or written is the client's 503 (or 507 on a full disk). */
function storeError(error: unknown): unknown {
  if (error instanceof StoreUnavailableError || (error instanceof StoreWriteError && error.unavailable))
    return new SparkError(
      503,
      "service_unavailable_error",
      "store_unavailable",
      `The conversation store cannot be reached (${error.message}); retry shortly.`,
      null,
      { "retry-after": "1" },
    );
  if (error instanceof StoreWriteError && error.full)
    return new SparkError(
      507,
      "server_error",
      "store_write_failed",
      `The conversation could not be stored: the server's data directory is full (${error.message}).`,
    );
  if (error instanceof StoreWriteError)
    return SparkError.internal(
      `The conversation could not be stored (${error.message}).`,
      "store_write_failed",
    );
  return error;
}
