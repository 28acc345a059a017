/**
 * Worker entry of `ThreadedLoopClient` (bench/threaded-loop.ts): runs figure 5's tool loop on its
 * own thread. Receives `{ id, mode, url, turns }`, answers `{ id, turns }` or `{ id, error }`.
 */
import { parentPort } from "node:worker_threads";
import { clientLoop, type LoopMode } from "./tool-loop.js";

const port = parentPort!;
port.on("message", (message: { id: number; mode: LoopMode; url: string; turns: number }) => {
  clientLoop(message.mode, message.url, message.turns).then(
    (turns) => port.postMessage({ id: message.id, turns }),
    (error: unknown) => port.postMessage({ id: message.id, error: String(error) }),
  );
});
