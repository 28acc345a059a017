/**
 * Writes a relayed Chat Completions stream (`ChatCompletionsService.relay`): the upstream's SSE
 * bytes as they come, with back-pressure (a slow reader pauses the upstream's body, so memory stays
 * bounded), coalesced like every other stream (`WriteCoalescer`): the first bytes go out at the end
 * of their tick, and bytes that arrive under a millisecond after the last are held briefly and
 * written together. llama-server writes one event per token; at 2,000+ tokens per second, one
 * client write per token was most of the relay's own cost.
 *
 * The status waits for the first bytes: an error before them (a 400 the upstream gave, an engine
 * not ready) is thrown, for the route to answer as a plain JSON error with its status. An error
 * after them ends the stream with an `error` event and `data: [DONE]`, as a stream of parts does.
 */
import { once } from "node:events";
import type { ServerResponse } from "node:http";
import { SparkError } from "../protocol/errors.js";
import { DEFAULT_COALESCE, WriteCoalescer, type CoalesceOptions } from "./coalesce.js";

/** Held bytes past this are written at once instead of waiting for their flush. */
const FLUSH_BYTES = 64 * 1024;

export async function sendRelayedStream(
  response: ServerResponse,
  bytes: AsyncIterable<Uint8Array>,
  coalesce: CoalesceOptions = DEFAULT_COALESCE,
): Promise<void> {
  const iterator = bytes[Symbol.asyncIterator]();
  // Thrown before anything was written: the route answers it as any error (status, headers).
  const first = await iterator.next();
  response.writeHead(200, {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    connection: "keep-alive",
    "x-accel-buffering": "no",
  });
  let held: Uint8Array[] = [];
  let heldBytes = 0;
  let drain: Promise<void> | undefined;
  const write = (): void => {
    if (held.length === 0 || response.destroyed) return;
    const out = held.length === 1 ? held[0]! : Buffer.concat(held, heldBytes);
    held = [];
    heldBytes = 0;
    if (!response.write(out) && !drain) drain = drained(response).finally(() => (drain = undefined));
  };
  const coalescer = new WriteCoalescer(write, coalesce);
  try {
    for (let next = first; !next.done; next = await iterator.next()) {
      if (response.destroyed) break;
      held.push(next.value);
      heldBytes += next.value.byteLength;
      if (heldBytes >= FLUSH_BYTES) coalescer.flushNow();
      else coalescer.queued(true);
      if (drain) await drain;
    }
  } catch (error) {
    if (!response.destroyed) {
      held.push(Buffer.from(`data: ${JSON.stringify(SparkError.from(error).toBody())}\n\ndata: [DONE]\n\n`));
    }
  } finally {
    coalescer.stop();
    // A reader that left stops the upstream too.
    await iterator.return?.();
  }
  if (response.destroyed) return;
  // What is held goes out with the response's end, in one write.
  const rest = held.length === 0 ? undefined : Buffer.concat(held, heldBytes);
  if (rest) response.end(rest);
  else response.end();
}

async function drained(response: ServerResponse): Promise<void> {
  if (response.destroyed) return;
  const settled = new AbortController();
  try {
    await Promise.race([
      once(response, "drain", { signal: settled.signal }),
      once(response, "close", { signal: settled.signal }),
    ]);
  } catch {
    // An error on the response ends the stream like a close does.
  } finally {
    settled.abort();
  }
}
