/**
 * Figure 5's tool-loop client on a worker thread, so that the server's thread does only the
 * server's work (its CPU time per turn is then the server's, engine included) and the client runs
 * beside it, as a real client in its own process does.
 */
import { TsWorker } from "./kit/ts-worker.js";
import type { ClientTurn, LoopMode } from "./tool-loop.js";

export class ThreadedLoopClient {
  readonly #worker = new TsWorker<ClientTurn[]>(new URL("./tool-loop-worker.ts", import.meta.url), "turns");

  loop(mode: LoopMode, url: string, turns: number): Promise<ClientTurn[]> {
    return this.#worker.call({ mode, url, turns });
  }

  close(): Promise<void> {
    return this.#worker.close();
  }
}
