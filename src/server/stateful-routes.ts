/**
 * The HTTP routes of what the server keeps: stored and background responses (retrieve, stream from
 * a sequence number, cancel, input items, delete), the Conversations API, and the stored chat
 * completions routes Spark does not have (a clear 404, and `store: true` on a chat completion a
 * 400). The core does the work (`BackgroundResponses`, `ConversationsService`, `ResponsesService`);
 * this maps requests and query strings onto it, with the same errors as every route.
 */
import type { BackgroundResponses } from "../core/background.js";
import { pageOf, type ItemPage } from "../core/conversation-store.js";
import { checkInclude, type ConversationsService, type ItemList } from "../core/conversations.js";
import type { PreparedResponse, ResponsesService } from "../core/responses.js";
import { SparkError } from "../protocol/errors.js";
import { readJsonBody } from "./body.js";
import type { CoalesceOptions } from "./coalesce.js";
import { sendEventStream, sendJson, type RequestContext, type Route } from "./http-routing.js";

export interface StatefulRoutesOptions {
  responses: ResponsesService;
  background: BackgroundResponses;
  conversations: ConversationsService;
  maxBodyBytes: number;
  /** How streamed token deltas are written (see `WriteCoalescer`). */
  coalesce?: CoalesceOptions;
}

const CONVERSATION = "/v1/conversations/([^/]+)";

export class StatefulRoutes {
  readonly #responses: ResponsesService;
  readonly #background: BackgroundResponses;
  readonly #conversations: ConversationsService;
  readonly #maxBodyBytes: number;
  readonly #coalesce: CoalesceOptions | undefined;

  constructor(options: StatefulRoutesOptions) {
    this.#responses = options.responses;
    this.#background = options.background;
    this.#conversations = options.conversations;
    this.#maxBodyBytes = options.maxBodyBytes;
    this.#coalesce = options.coalesce;
  }

  routes(): Route[] {
    const route = (method: string, pattern: string, name: string, handler: Route["handler"]): Route => ({
      method,
      pattern: new RegExp(`^${pattern}$`),
      name,
      handler,
    });
    return [
      route("GET", "/v1/responses/([^/]+)", "/v1/responses/{id}", (c) => this.#getResponse(c)),
      route("POST", "/v1/responses/([^/]+)/cancel", "/v1/responses/{id}/cancel", (c) => this.#cancel(c)),
      route("GET", "/v1/responses/([^/]+)/input_items", "/v1/responses/{id}/input_items", (c) =>
        this.#inputItems(c),
      ),
      route("DELETE", "/v1/responses/([^/]+)", "/v1/responses/{id}", (c) => this.#deleteResponse(c)),
      route("POST", "/v1/conversations", "/v1/conversations", async (c) =>
        sendJson(c.response, 200, await this.#conversations.create(await this.#body(c, true), c.principal)),
      ),
      route("GET", CONVERSATION, "/v1/conversations/{id}", async (c) =>
        sendJson(c.response, 200, await this.#conversations.get(c.params[0]!, c.principal)),
      ),
      route("POST", CONVERSATION, "/v1/conversations/{id}", async (c) =>
        sendJson(
          c.response,
          200,
          await this.#conversations.update(c.params[0]!, await this.#body(c), c.principal),
        ),
      ),
      route("DELETE", CONVERSATION, "/v1/conversations/{id}", async (c) =>
        sendJson(c.response, 200, await this.#conversations.delete(c.params[0]!, c.principal)),
      ),
      route("GET", `${CONVERSATION}/items`, "/v1/conversations/{id}/items", async (c) => {
        const page = itemPage(c.query);
        sendJson(c.response, 200, await this.#conversations.listItems(c.params[0]!, c.principal, page));
      }),
      route("POST", `${CONVERSATION}/items`, "/v1/conversations/{id}/items", async (c) => {
        checkInclude(includes(c.query));
        const body = await this.#body(c);
        sendJson(c.response, 200, await this.#conversations.createItems(c.params[0]!, body, c.principal));
      }),
      route("GET", `${CONVERSATION}/items/([^/]+)`, "/v1/conversations/{id}/items/{item_id}", async (c) => {
        checkInclude(includes(c.query));
        sendJson(c.response, 200, await this.#conversations.item(c.params[0]!, c.params[1]!, c.principal));
      }),
      route("DELETE", `${CONVERSATION}/items/([^/]+)`, "/v1/conversations/{id}/items/{item_id}", async (c) =>
        sendJson(
          c.response,
          200,
          await this.#conversations.deleteItem(c.params[0]!, c.params[1]!, c.principal),
        ),
      ),
      route("GET", "/v1/chat/completions", "/v1/chat/completions", storedChat),
      ...["GET", "POST", "DELETE"].map((method) =>
        route(method, "/v1/chat/completions/([^/]+)(?:/messages)?", "/v1/chat/completions/{id}", storedChat),
      ),
    ];
  }

  /**
   * `POST /v1/responses` with `background: true`: answers the response as soon as it is admitted
   * (`queued` or `in_progress`), or with `stream: true` its events as they come; the response goes on
   * when this client leaves.
   */
  async createBackground(context: RequestContext, prepared: PreparedResponse): Promise<void> {
    const started = await this.#background.start(prepared);
    if (!prepared.stream) {
      sendJson(context.response, 200, started.response);
      return;
    }
    await sendEventStream(context.response, started.events.read(-1, context.signal), this.#coalesce);
  }

  async #getResponse({ response, params, query, principal, signal }: RequestContext): Promise<void> {
    checkInclude(includes(query));
    // Spark's streams carry no obfuscation padding (it guards hosted traffic's sizes): nothing to switch.
    booleanParam(query, "include_obfuscation");
    const stream = booleanParam(query, "stream") ?? false;
    if (!stream) {
      if (query.has("starting_after"))
        throw SparkError.invalid(
          "starting_after applies to stream=true only.",
          "starting_after",
          "invalid_value",
        );
      sendJson(response, 200, await this.#background.get(params[0]!, principal));
      return;
    }
    const after = startingAfter(query);
    const events = await this.#background.stream(params[0]!, principal, after);
    await sendEventStream(response, events(signal), this.#coalesce);
  }

  async #cancel({ response, params, principal }: RequestContext): Promise<void> {
    sendJson(response, 200, await this.#background.cancel(params[0]!, principal));
  }

  async #inputItems({ response, params, principal, query }: RequestContext): Promise<void> {
    const page = itemPage(query);
    const id = params[0]!;
    let items: readonly ItemList["data"][number][];
    try {
      items = await this.#responses.inputItems(id, principal);
    } catch (error) {
      const running = error instanceof SparkError && error.status === 404;
      const found = running ? await this.#background.runningInputItems(id, principal) : undefined;
      if (found === undefined) throw error;
      items = found;
    }
    const result = pageOf(page.order === "asc" ? items : [...items].reverse(), page);
    if (!result.found) throw SparkError.invalid(`No input item '${page.after}' in this response.`, "after");
    sendJson(response, 200, {
      object: "list",
      data: result.data,
      first_id: result.data[0]?.id ?? null,
      last_id: result.data.at(-1)?.id ?? null,
      has_more: result.hasMore,
    } satisfies ItemList);
  }

  /** Deletes a stored response; a background response still running is cancelled first. */
  async #deleteResponse({ response, params, principal }: RequestContext): Promise<void> {
    const id = params[0]!;
    if ((await this.#background.runningInputItems(id, principal)) !== undefined)
      await this.#background.cancel(id, principal);
    sendJson(response, 200, await this.#responses.delete(id, principal));
  }

  /** A JSON body; `optional` lets an empty body stand for `{}` (`conversations.create()`). */
  async #body({ request }: RequestContext, optional = false): Promise<unknown> {
    if (optional && request.headers["content-length"] === "0") return {};
    return readJsonBody(request, this.#maxBodyBytes);
  }
}

/** `store: true` on a chat completion: Spark keeps responses, not chat completions. */
export function refuseStoredChat(body: unknown): void {
  if ((body as { store?: unknown } | null)?.store === true)
    throw SparkError.invalid(
      "Spark does not store chat completions. Send store: false (or leave it out), or use the Responses API with store: true to keep and retrieve responses.",
      "store",
      "unsupported_value",
    );
}

async function storedChat(): Promise<void> {
  throw SparkError.notFound(
    "Spark does not store chat completions, so there are none to list, retrieve, update or delete; use the Responses API with store: true to keep and retrieve responses.",
    "stored_chat_completions_unsupported",
  );
}

/** `limit` (1–100, default 20), `order` (`asc` or `desc`, default `desc`), `after`, and `include`. */
function itemPage(query: URLSearchParams): ItemPage {
  checkInclude(includes(query));
  const limit = query.has("limit") ? Number(query.get("limit")) : 20;
  if (!Number.isInteger(limit) || limit < 1 || limit > 100)
    throw SparkError.invalid("limit must be an integer from 1 to 100.", "limit", "invalid_limit");
  const order = query.get("order") ?? "desc";
  if (order !== "asc" && order !== "desc")
    throw SparkError.invalid("order must be asc or desc.", "order", "invalid_order");
  const after = query.get("after");
  return after === null || after === "" ? { limit, order } : { limit, order, after };
}

/** `include` values: `include=a&include=b`, or `include[]=a` as the SDKs write arrays. */
function includes(query: URLSearchParams): string[] {
  return [...query.getAll("include"), ...query.getAll("include[]")];
}

function booleanParam(query: URLSearchParams, name: string): boolean | undefined {
  const value = query.get(name);
  if (value === null) return undefined;
  if (value === "true") return true;
  if (value === "false") return false;
  throw SparkError.invalid(`${name} must be true or false.`, name, "invalid_value");
}

/** `starting_after`: the sequence number after which to stream (absent: from the first event). */
function startingAfter(query: URLSearchParams): number {
  const value = query.get("starting_after");
  if (value === null || value === "") return -1;
  const after = Number(value);
  if (!Number.isInteger(after) || after < 0)
    throw SparkError.invalid(
      "starting_after must be a sequence number (an integer, 0 or more).",
      "starting_after",
    );
  return after;
}
