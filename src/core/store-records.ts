/**
 * Shapes every store of `src/core` shares (responses, conversations, runs), apart from
 * response-store.ts so that the conversation and run stores, which it builds, do not import it back.
 */

/** One item of `GET /v1/responses/{id}/input_items`: the wire shape, with an `id`. */
export type InputItemRecord = { id: string; type: string } & Record<string, unknown>;

/** A value, or a promise of it. */
export type Awaitable<T> = T | Promise<T>;
