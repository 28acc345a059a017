/**
 * The messages a task holds while the Spark server does not answer, so that nothing typed is lost:
 * each is shown at once as a user entry marked `pending` (saved so, so a restart holds it again:
 * `restore`), and once the server answers again (`send`) they all go out, in order, as one turn
 * whose user message is already shown. A message sent behind held ones is held too.
 *
 * The task is reached through `HeldMessagesHost`; nothing here knows the task's connection or
 * transcript beyond what the host answers.
 */
import type { Agent } from "../agent/agent.js";
import type { LogEntry } from "./protocol.js";

/** What the held messages need of their task. */
export interface HeldMessagesHost {
  /** Deleted: nothing is sent any more. */
  deleted(): boolean;
  /** The task's agent, connecting on first use (it throws while the server does not answer). */
  agent(): Promise<Agent>;
  /** The task's transcript as the browser renders it. */
  entries(): LogEntry[];
  /** Adds or replaces an entry, tells the browsers, and saves it. */
  add(entry: LogEntry): void;
  nextId(): string;
  /** A task still named "New task" takes this message as its title. */
  titleFrom(text: string): void;
  /** The next turn's user message is already shown (see `TaskEvents.quietTurn`). */
  quietTurn(): void;
}

export class HeldMessages {
  /** The held messages' `pending` user entries (ids), in the order they were sent. */
  readonly #ids: string[] = [];
  #sending = false;

  constructor(private readonly host: HeldMessagesHost) {}

  /** Whether messages wait for the Spark server. */
  get holding(): boolean {
    return this.#ids.length > 0;
  }

  /** A loaded task's entry `id` was still held when the app stopped: it is still to be sent. */
  restore(id: string): void {
    this.#ids.push(id);
  }

  /** Holds a message until the Spark server answers: shown at once, marked as waiting. */
  hold(text: string, images: readonly string[] = []): void {
    const id = this.host.nextId();
    this.#ids.push(id);
    this.host.titleFrom(text || "image");
    this.host.add({
      kind: "user",
      id,
      text,
      pending: true,
      ...(images.length > 0 ? { images: [...images] } : {}),
    });
  }

  /**
   * The Spark server answers again: the held messages go out as one turn (their entries are already
   * shown, so the turn adds none). If it cannot connect yet, they stay held for the next try.
   */
  async send(): Promise<void> {
    if (this.#ids.length === 0 || this.#sending || this.host.deleted()) return;
    this.#sending = true;
    try {
      const agent = await this.host.agent();
      if (agent.busy) return;
      const texts: string[] = [];
      const images: string[] = [];
      for (const id of this.#ids.splice(0)) {
        const entry = this.host.entries().find((e) => e.id === id);
        if (entry?.kind !== "user") continue;
        texts.push(entry.text);
        images.push(...(entry.images ?? []));
        delete entry.pending;
        this.host.add(entry);
      }
      if (texts.length === 0) return;
      this.host.quietTurn();
      void agent.submit(texts.join("\n\n"), images);
    } catch {
      // Still unreachable: the next change of the server's health tries again.
    } finally {
      this.#sending = false;
    }
  }
}
