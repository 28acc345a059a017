/**
 * Worker entry of `ThreadedSseClient`: runs an `SseClient` on its own thread. Receives
 * `{ id, url, body }`, answers `{ id, result }` or `{ id, error }`.
 */
import { parentPort } from "node:worker_threads";
import { SseClient } from "./sse-client.js";

const port = parentPort!;
const clients = new Map<string, SseClient>();

port.on("message", (message: { id: number; url: string; body: Record<string, unknown> }) => {
  let client = clients.get(message.url);
  if (!client) clients.set(message.url, (client = new SseClient(message.url)));
  client.stream(message.body).then(
    (result) => port.postMessage({ id: message.id, result }),
    (error: unknown) => port.postMessage({ id: message.id, error: String(error) }),
  );
});
