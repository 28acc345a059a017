/**
 * A browser's socket to `spark app` (`/app/ws`) for tests: every message recorded in order, the
 * tasks as last described, and waits on a message from an index on (so a test sends, keeps the
 * index `send` returns, and waits for what that message caused, not an older one). Test files add
 * their own helpers by extending it; `connect` makes an instance of the subclass it is called on.
 */
import WebSocket from "ws";
import type { ClientMessage, ServerMessage, TaskSummary } from "../../src/app/protocol.js";

export class AppClient {
  readonly messages: ServerMessage[] = [];
  /** Every task this client has heard of, as last described (hello, task.updated, task.removed). */
  readonly tasks = new Map<string, TaskSummary>();
  #waiters: {
    predicate: (m: ServerMessage) => boolean;
    from: number;
    resolve: (m: ServerMessage) => void;
  }[] = [];

  constructor(readonly socket: WebSocket) {
    socket.on("message", (data) => {
      const received = JSON.parse(String(data)) as ServerMessage;
      if (received.type === "hello") for (const task of received.tasks) this.tasks.set(task.id, task);
      if (received.type === "task.updated") this.tasks.set(received.summary.id, received.summary);
      if (received.type === "task.removed") this.tasks.delete(received.task);
      // The whole list (what the app sent before per-task updates): understood too, so that tests
      // show what they check against an app of either kind.
      if (received.type === "tasks") {
        this.tasks.clear();
        for (const task of received.tasks) this.tasks.set(task.id, task);
      }
      this.messages.push(received);
      const index = this.messages.length - 1;
      this.#waiters = this.#waiters.filter((waiter) => {
        if (index < waiter.from || !waiter.predicate(received)) return true;
        waiter.resolve(received);
        return false;
      });
    });
  }

  /** Connects with the app's own origin and waits for its hello. */
  static async connect<T extends AppClient>(this: new (socket: WebSocket) => T, appUrl: string): Promise<T> {
    const url = new URL(appUrl);
    const socket = new WebSocket(`ws://${url.host}/app/ws`, { headers: { origin: url.origin } });
    // Listening before the socket opens: the hello can come in the same read as the upgrade.
    const client = new this(socket);
    await new Promise<void>((resolve, reject) => {
      socket.once("open", () => resolve());
      socket.once("error", reject);
    });
    await client.next((m) => m.type === "hello");
    return client;
  }

  /** Sends a message (a malformed one too, to test the app's answer); returns where its effects start. */
  send(message: ClientMessage | Record<string, unknown>): number {
    const from = this.messages.length;
    this.socket.send(JSON.stringify(message));
    return from;
  }

  /** The first message from index `from` on that matches (one already received counts). */
  next(predicate: (m: ServerMessage) => boolean, from = 0): Promise<ServerMessage> {
    const found = this.messages.slice(from).find(predicate);
    if (found) return Promise.resolve(found);
    return new Promise((resolve) => this.#waiters.push({ predicate, from, resolve }));
  }

  close(): void {
    this.socket.terminate();
  }
}
