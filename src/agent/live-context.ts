/**
 * The context meter while the model writes. The server counts a conversation's tokens only when a
 * response ends (its usage: input + output); in between, what the conversation gained is estimated
 * from the agent's events, so the meter (the TUI's `ctx`, the app's status bar) moves with the
 * answer instead of standing still until it ends:
 *
 * - each streamed text delta is about one token (a delta carrying more text counts as its length
 *   over 4 characters, the usual size of a token of English or code);
 * - what a turn adds as input (the user's message, a tool's result fed back) counts as its length
 *   over 4 characters;
 * - a response's end replaces the estimate with the server's count, and a compaction or a new
 *   context with the agent's own.
 *
 * The estimate only ever adds to the last exact count, which it never goes below. `liveContext(agent)`
 * is the one meter of an agent, following its events from the first call on.
 */
import type { AgentEvent } from "./agent.js";

/** About 4 characters a token: the usual ratio for English and code. */
const CHARACTERS_PER_TOKEN = 4;

export function estimateTokens(text: string): number {
  return Math.ceil(text.length / CHARACTERS_PER_TOKEN);
}

export class LiveContext {
  /** The server's count at the end of the last response (or the agent's after a compaction). */
  #exact: number;
  /** What the conversation gained since, estimated. */
  #since = 0;

  constructor(exact = 0) {
    this.#exact = exact;
  }

  /** The tokens in the conversation now: exact at a response's end, estimated while it streams. */
  get tokens(): number {
    return this.#exact + this.#since;
  }

  /** Sets the exact count (a compaction, a new context, a saved session's last count). */
  reset(exact: number): void {
    this.#exact = exact;
    this.#since = 0;
  }

  /**
   * Follows an agent event; `agentTokens` is the agent's own count (`Agent.contextTokens`), read on a
   * compaction. Returns whether `tokens` changed (a meter redraws only then).
   */
  update(event: AgentEvent, agentTokens?: number): boolean {
    const before = this.tokens;
    switch (event.type) {
      case "turn.started":
        this.#since += estimateTokens(event.input);
        break;
      case "text.delta":
        if (event.lane === "") this.#since += Math.max(1, estimateTokens(event.delta));
        break;
      case "item.completed":
        // A tool's call and its result join the conversation (the answer's text counted as it streamed).
        if (event.item.type !== "agent_message") this.#since += estimateTokens(JSON.stringify(event.item));
        break;
      case "response.done":
        if (event.lane === "") this.reset(event.contextTokens);
        break;
      case "compacted":
        if (agentTokens !== undefined) this.reset(agentTokens);
        break;
      default:
        break;
    }
    return this.tokens !== before;
  }
}

/** What the meter reads of an agent: its events, and its own count (exact after a response). */
interface Metered {
  on(listener: (event: AgentEvent) => void): () => void;
  readonly contextTokens: number;
}

const meters = new WeakMap<Metered, LiveContext>();

/** The live meter of `agent` (made, and following its events, on the first call). */
export function liveContext(agent: Metered): LiveContext {
  let meter = meters.get(agent);
  if (meter === undefined) {
    const made = new LiveContext(agent.contextTokens);
    agent.on((event) => {
      // A new context (`/new`) empties the transcript: the agent's count is 0 again.
      if (event.type === "transcript.changed" && event.reset && event.items.length === 0) made.reset(0);
      else made.update(event, agent.contextTokens);
    });
    meters.set(agent, made);
    meter = made;
  }
  return meter;
}
