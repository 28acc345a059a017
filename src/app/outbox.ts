/**
 * What the app server holds for one browser socket, bounded in bytes. A browser that stops reading
 * (a suspended laptop, a stalled network, a tab the OS froze) would otherwise make the app queue
 * every delta of every answer for it: one 10 MB answer grew the app by over a GiB.
 *
 * Contract: at most `limit` bytes (each message counted with a fixed per-message overhead, since
 * many small deltas cost more than their text) wait to be written to the socket, plus one message
 * larger than that on its own (a long task's log: it must get through, or the page could never
 * open that task). Past that the reader is "behind": further messages for it are dropped. Once it has read everything
 * that was queued it is resynced — `resync()` sends it a fresh `hello`, and the page reopens its
 * task, whose log carries whatever it missed.
 */
import type { WebSocket } from "ws";

/** Bytes that may wait for one browser before it is treated as behind. */
export const OUTBOX_LIMIT_BYTES = 4 * 1024 * 1024;
/** What one queued message costs beyond its text (frame, write request, callback). */
const MESSAGE_OVERHEAD_BYTES = 256;

export class Outbox {
  #unsent = 0;
  #behind = false;
  /** Bytes of the one oversized message allowed through beyond the limit, while it is queued. */
  #oversized = 0;

  constructor(
    private readonly ws: WebSocket,
    private readonly resync: () => void,
    private readonly limit = OUTBOX_LIMIT_BYTES,
  ) {}

  /** Whether messages are being dropped until the browser catches up. */
  get behind(): boolean {
    return this.#behind;
  }

  /** Sends `data` (a JSON frame), or drops it while the browser is behind; false when not sent. */
  send(data: string): boolean {
    if (this.ws.readyState !== this.ws.OPEN) return false;
    if (this.#behind) return false;
    const bytes = data.length + MESSAGE_OVERHEAD_BYTES;
    const oversized = bytes > this.limit && this.#oversized === 0;
    if (oversized) this.#oversized = bytes;
    this.#unsent += bytes;
    this.ws.send(data, (error) => {
      this.#unsent -= bytes;
      if (oversized) this.#oversized = 0;
      if (!this.#behind || this.#unsent > 0 || error || this.ws.readyState !== this.ws.OPEN) return;
      // Caught up: everything queued has been written. Start again from a fresh state.
      this.#behind = false;
      this.resync();
    });
    if (this.#unsent - this.#oversized > this.limit) this.#behind = true;
    return true;
  }
}
