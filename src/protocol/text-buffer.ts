/**
 * Text built from many small deltas. `text += delta` keeps one rope node (and the delta itself)
 * alive per delta until the text is read whole: a 10 MB answer in ~3 million token-sized deltas
 * holds ~170 MB that way, per copy. This joins the deltas into flat blocks as they come, so it
 * holds about the text's own size.
 */
const BLOCK_DELTAS = 256;

export class TextBuffer {
  #blocks: string[] = [];
  #pending: string[] = [];
  #length = 0;

  constructor(text = "") {
    if (text !== "") this.append(text);
  }

  get length(): number {
    return this.#length;
  }

  append(delta: string): void {
    if (delta === "") return;
    this.#pending.push(delta);
    this.#length += delta.length;
    if (this.#pending.length < BLOCK_DELTAS) return;
    this.#blocks.push(this.#pending.join(""));
    this.#pending = [];
  }

  /** The text so far, as one flat string (later reads reuse it until more is appended). */
  toString(): string {
    if (this.#pending.length > 0) {
      this.#blocks.push(this.#pending.join(""));
      this.#pending = [];
    }
    if (this.#blocks.length > 1) this.#blocks = [this.#blocks.join("")];
    return this.#blocks[0] ?? "";
  }
}
