/**
 * A `TurnRecorder` for checkpoints that are still opening (`Checkpoints.open` runs git and reads the
 * store, which a session's first request must not wait for): calls made meanwhile are applied in
 * order once the store is open. A store that fails to open records nothing (the session has no
 * /undo; the caller says so).
 */
import type { Checkpoint, Checkpoints, TurnRecorder } from "./checkpoints.js";

export class DeferredRecorder implements TurnRecorder {
  /** The store once open, with every call made before that already applied, in order. */
  #chain: Promise<Checkpoints | undefined>;

  constructor(opening: Promise<Checkpoints | undefined>) {
    this.#chain = opening.catch(() => undefined);
  }

  beginTurn(): void {
    this.#chain = this.#chain.then((store) => {
      store?.beginTurn();
      return store;
    });
  }

  async beforeWrite(paths: readonly string[]): Promise<void> {
    await (await this.#chain)?.beforeWrite(paths);
  }

  async beforeCommand(): Promise<void> {
    await (await this.#chain)?.beforeCommand();
  }

  async afterCommand(): Promise<void> {
    await (await this.#chain)?.afterCommand();
  }

  async endTurn(): Promise<Checkpoint | undefined> {
    return (await this.#chain)?.endTurn();
  }
}
