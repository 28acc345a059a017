/**
 * Worker entry of `ThreadedSseClient`: runs an `SseClient` on its own thread. Receives
 * `{ id, url, headers, body }`, answers `{ id, result }` or `{ id, error }`.
 */
import { parentPort } from "node:worker_threads";
import { SseClient, type StreamOptions, type StreamPath } from "./sse-client.js";

const port = parentPort!;
const clients = new Map<string, SseClient>();

port.on(
  "message",
  (message: {
    id: number;
    url: string;
    headers: Record<string, string>;
    body: Record<string, unknown>;
    path?: StreamPath;
    options?: StreamOptions;
  }) => {
    const key = `${message.url} ${JSON.stringify(message.headers)}`;
    let client = clients.get(key);
    if (!client) clients.set(key, (client = new SseClient(message.url, message.headers)));
    client.stream(message.body, message.path, message.options).then(
      (result) => port.postMessage({ id: message.id, result }),
      (error: unknown) => port.postMessage({ id: message.id, error: String(error) }),
    );
  },
);
