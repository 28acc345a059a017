/**
 * The TUI's input editor (the composer): the message being typed, its caret, and the messages sent
 * before (Up/Down browse them). It edits text only: what Enter, Tab, Esc and the other keys mean is
 * the app's (app.ts), and the app draws `rows` under the status line.
 *
 * Contract: `edit(key)` applies an editing key (caret moves, deletions, Ctrl-U/Ctrl-W, history) and
 * says whether the composer is to be drawn again; nothing here writes to the terminal.
 */
import type { Key } from "./keys.js";
import { bold } from "./style.js";
import { visibleWidth } from "./wrap.js";

/** The composer's prompt; while the model writes, what is typed steers it. */
export const PROMPT = "› ";
export const STEER_PROMPT = "steer › ";

export class Composer {
  #text = "";
  #caret = 0;
  readonly #history: string[] = [];
  /** -1: the message being typed; 0: the last one sent, 1 the one before… */
  #historyIndex = -1;

  get text(): string {
    return this.#text;
  }

  /** What Tab completes: the text before the caret. */
  get beforeCaret(): string {
    return this.#text.slice(0, this.#caret);
  }

  insert(text: string): void {
    this.#text = this.#text.slice(0, this.#caret) + text + this.#text.slice(this.#caret);
    this.#caret += text.length;
  }

  /** The whole text, the caret at its end. */
  set(text: string): void {
    this.#text = text;
    this.#caret = text.length;
  }

  /** A completion: the `length` characters before the caret become `text`. */
  replaceBeforeCaret(length: number, text: string): void {
    this.#text = this.#text.slice(0, this.#caret - length) + text + this.#text.slice(this.#caret);
    this.#caret += text.length - length;
  }

  /** A sent message joins the history (not twice in a row); browsing starts again from the end. */
  remember(text: string): void {
    if (this.#history[this.#history.length - 1] !== text) this.#history.push(text);
    this.#historyIndex = -1;
  }

  /**
   * Applies an editing key; true: draw the composer again. False when `key` is not an editing key
   * (the caller decides what it means), or is Up/Down past either end of the history.
   */
  edit(key: Key): boolean {
    switch (key.name) {
      case "backspace":
        if (this.#caret > 0) {
          this.#text = this.#text.slice(0, this.#caret - 1) + this.#text.slice(this.#caret);
          this.#caret--;
        }
        return true;
      case "delete":
        this.#text = this.#text.slice(0, this.#caret) + this.#text.slice(this.#caret + 1);
        return true;
      case "left":
        this.#caret = Math.max(0, this.#caret - 1);
        return true;
      case "right":
        this.#caret = Math.min(this.#text.length, this.#caret + 1);
        return true;
      case "home":
      case "ctrl-a":
        this.#caret = 0;
        return true;
      case "end":
      case "ctrl-e":
        this.#caret = this.#text.length;
        return true;
      case "ctrl-u":
        this.set("");
        return true;
      case "ctrl-w": {
        const before = this.#text.slice(0, this.#caret).replace(/\S+\s*$/, "");
        this.#text = before + this.#text.slice(this.#caret);
        this.#caret = before.length;
        return true;
      }
      case "up":
      case "down":
        return this.#browseHistory(key.name === "up" ? 1 : -1);
      default:
        return false;
    }
  }

  #browseHistory(step: number): boolean {
    const next = this.#historyIndex + step;
    if (next < -1 || next >= this.#history.length) return false;
    this.#historyIndex = next;
    this.set(next === -1 ? "" : this.#history[this.#history.length - 1 - next]!);
    return true;
  }

  /**
   * The composer's rows after `prompt`: a multi-line message (Ctrl-J, Shift+Enter, a paste) shows
   * its further lines indented under the first. The caret's row is counted from the first.
   */
  rows(prompt: string): { rows: string[]; caretRow: number; caretColumn: number } {
    const indent = " ".repeat(visibleWidth(prompt));
    const before = this.beforeCaret.split("\n");
    return {
      rows: this.#text.split("\n").map((line, i) => (i === 0 ? bold(prompt) + line : indent + line)),
      caretRow: before.length - 1,
      caretColumn: indent.length + visibleWidth(before[before.length - 1]!),
    };
  }
}
