/**
 * Writes a relayed Chat Completions stream (`ChatCompletionsService.relay`): the upstream's SSE
 * bytes as they come, one write per burst, with back-pressure (a slow reader pauses the upstream's
 * body, so memory stays bounded).
 *
 * The status waits for the first bytes: an error before them (a 400 the upstream gave, an engine
 * not ready) is thrown, for the route to answer as a plain JSON error with its status. An error
 * after them ends the stream with an `error` event and `data: [DONE]`, as a stream of parts does.
 */
import { once } from "node:events";
import type { ServerResponse } from "node:http";
import { SparkError } from "../protocol/errors.js";

export async function sendRelayedStream(
  response: ServerResponse,
  bytes: AsyncIterable<Uint8Array>,
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
  try {
    for (let next = first; !next.done; next = await iterator.next()) {
      if (response.destroyed) break;
      if (!response.write(next.value)) await drained(response);
    }
  } catch (error) {
    if (!response.destroyed)
      response.write(`data: ${JSON.stringify(SparkError.from(error).toBody())}\n\ndata: [DONE]\n\n`);
  } finally {
    // A reader that left stops the upstream too.
    await iterator.return?.();
  }
  if (!response.destroyed) response.end();
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
