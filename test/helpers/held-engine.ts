/**
 * The script engine, held mid-answer: each generation stops after `holdAfter` text pieces until the
 * test lets it go (`release`) or it is cancelled, so a test can act on a response while it is
 * certainly generating, whatever the machine's load. `holding` resolves when a generation waits.
 */
import type { EnginePart, EngineRequest } from "../../src/engine/types.js";
import { parseScript, ScriptEngine } from "../../src/engines/script/script-engine.js";

export class HeldEngine extends ScriptEngine {
  #release!: () => void;
  #released = new Promise<void>((resolve) => (this.#release = resolve));
  #onHold: (() => void)[] = [];
  /** Generations started, in order. */
  started = 0;

  constructor(
    text: string,
    readonly holdAfter: number,
  ) {
    super({ lines: parseScript(JSON.stringify({ output: [{ type: "message", text }] }), "held") });
  }

  /** Resolves when a generation reaches its hold (the next one that does). */
  holding(): Promise<void> {
    return new Promise((resolve) => this.#onHold.push(resolve));
  }

  /** Lets every held generation (and every later one) run to its end. */
  release(): void {
    this.#release();
  }

  /** Holds generations again from now on. */
  hold(): void {
    this.#released = new Promise<void>((resolve) => (this.#release = resolve));
  }

  override async *stream(request: EngineRequest, signal: AbortSignal): AsyncGenerator<EnginePart> {
    this.started++;
    let pieces = 0;
    for await (const part of super.stream(request, signal)) {
      yield part;
      if (part.type === "text-delta" && ++pieces === this.holdAfter) {
        for (const waiter of this.#onHold.splice(0)) waiter();
        await new Promise<void>((resolve) => {
          void this.#released.then(resolve);
          signal.addEventListener("abort", () => resolve(), { once: true });
        });
      }
    }
  }
}
