/**
 * Sending to the app server, for the components outside main.tsx: main.tsx owns the connection and
 * binds its `send` here at start (it shows a banner and returns false when not connected, so the
 * caller keeps the user's text).
 */
import type { ClientMessage } from "../../src/app/protocol.js";

let bound: ((message: ClientMessage) => boolean) | undefined;

export function bindSend(send: (message: ClientMessage) => boolean): void {
  bound = send;
}

export function send(message: ClientMessage): boolean {
  return bound?.(message) ?? false;
}
