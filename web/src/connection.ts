/**
 * The browser's one WebSocket to the app server (`/app/ws`), reconnecting after a drop. Messages
 * follow src/app/protocol.ts; this module only moves them.
 */
import type { ClientMessage, ServerMessage } from "../../src/app/protocol.js";
import { appBase, appProtocols } from "./host.js";

export type ConnectionState = "connecting" | "open" | "closed" | "unauthenticated";

export class Connection {
  #socket: WebSocket | undefined;
  #retry = 0;
  #stopped = false;

  constructor(
    private readonly onMessage: (message: ServerMessage, receivedAt: number) => void,
    private readonly onState: (state: ConnectionState) => void,
  ) {}

  open(): void {
    this.#stopped = false;
    // The app's own URL: the page's in a browser, the configured one in the VS Code pane.
    const url = new URL("/app/ws", appBase);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    this.onState("connecting");
    const socket = new WebSocket(url, appProtocols);
    this.#socket = socket;
    let opened = false;
    socket.onopen = () => {
      opened = true;
      this.#retry = 0;
      this.onState("open");
      this.send({ type: "hello" });
    };
    socket.onmessage = (event: MessageEvent<string>) => {
      const receivedAt = performance.now();
      let message: ServerMessage;
      try {
        message = JSON.parse(event.data) as ServerMessage;
      } catch {
        return;
      }
      this.onMessage(message, receivedAt);
    };
    socket.onclose = () => {
      if (this.#socket !== socket || this.#stopped) return;
      if (!opened) {
        // Refused at the upgrade: find out whether a sign-in is what is missing.
        void fetch(new URL("/app/session", appBase))
          .then((r) => r.json() as Promise<{ authenticated: boolean; required: boolean }>)
          .then((session) => {
            if (session.required && !session.authenticated) this.onState("unauthenticated");
            else this.#reconnect();
          })
          .catch(() => this.#reconnect());
        return;
      }
      this.#reconnect();
    };
  }

  #reconnect(): void {
    this.onState("closed");
    const delay = Math.min(5000, 250 * 2 ** this.#retry++);
    setTimeout(() => this.open(), delay);
  }

  send(message: ClientMessage): boolean {
    if (this.#socket?.readyState !== WebSocket.OPEN) return false;
    this.#socket.send(JSON.stringify(message));
    return true;
  }

  close(): void {
    this.#stopped = true;
    this.#socket?.close();
  }
}
