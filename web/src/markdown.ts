/**
 * Markdown for model output: parsed by marked, sanitized by DOMPurify (model output is untrusted:
 * `<script>`, event handlers and `javascript:` links are removed before anything reaches the DOM),
 * code highlighted by highlight.js (a few common languages, to keep the bundle small).
 *
 * Streaming: re-parsing a whole long answer on every frame would grow with its length. A
 * `StreamingMarkdown` splits the text at blank lines outside code fences: blocks before the last
 * such line are final and rendered once, appended to the DOM; only the open block at the end is
 * rendered again, once per animation frame however many deltas arrived in it.
 */
import DOMPurify from "dompurify";
import hljs from "highlight.js/lib/core";
import bash from "highlight.js/lib/languages/bash";
import css from "highlight.js/lib/languages/css";
import diff from "highlight.js/lib/languages/diff";
import javascript from "highlight.js/lib/languages/javascript";
import json from "highlight.js/lib/languages/json";
import python from "highlight.js/lib/languages/python";
import rust from "highlight.js/lib/languages/rust";
import typescript from "highlight.js/lib/languages/typescript";
import xml from "highlight.js/lib/languages/xml";
import { Marked } from "marked";

hljs.registerLanguage("bash", bash);
hljs.registerLanguage("sh", bash);
hljs.registerLanguage("css", css);
hljs.registerLanguage("diff", diff);
hljs.registerLanguage("javascript", javascript);
hljs.registerLanguage("js", javascript);
hljs.registerLanguage("json", json);
hljs.registerLanguage("python", python);
hljs.registerLanguage("py", python);
hljs.registerLanguage("rust", rust);
hljs.registerLanguage("typescript", typescript);
hljs.registerLanguage("ts", typescript);
hljs.registerLanguage("html", xml);
hljs.registerLanguage("xml", xml);

const marked = new Marked({ gfm: true, breaks: false, async: false });

// Links open outside the app and tell the target nothing.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

/**
 * Markdown → sanitized HTML. Images are dropped too: an answer has no business loading anything
 * (and the page's policy would block other hosts anyway).
 */
export function renderMarkdown(text: string): string {
  const html = marked.parse(text) as string;
  return DOMPurify.sanitize(html, { FORBID_TAGS: ["style", "form", "input", "button", "textarea", "img"] });
}

/** Highlights the finished code blocks under `root`. */
export function highlightIn(root: Element): void {
  for (const block of root.querySelectorAll("pre code")) {
    const language = /language-(\w+)/.exec(block.className)?.[1];
    if (!language || !hljs.getLanguage(language)) continue;
    hljs.highlightElement(block as HTMLElement);
  }
}

/** Renders a whole (finished) text into `root`. */
export function renderInto(root: HTMLElement, text: string): void {
  root.innerHTML = renderMarkdown(text);
  highlightIn(root);
}

/** Timing hook for the benchmark: called with the receive times of deltas once they are painted. */
export type PaintProbe = (received: readonly number[], paintedAt: number) => void;

export class StreamingMarkdown {
  #text = "";
  /** End of the text already rendered as final blocks. */
  #committed = 0;
  /** Where the line scan stopped, and whether it is inside a code fence there. */
  #scanned = 0;
  #inFence = false;
  /** Last blank line outside a fence (a safe split point), as an offset after it. */
  #boundary = 0;
  readonly #blocks: HTMLElement;
  readonly #tail: HTMLElement;
  #frame = 0;
  #pending: number[] = [];

  constructor(
    readonly root: HTMLElement,
    private readonly probe?: PaintProbe,
  ) {
    root.textContent = "";
    this.#blocks = document.createElement("div");
    this.#tail = document.createElement("div");
    root.append(this.#blocks, this.#tail);
  }

  get text(): string {
    return this.#text;
  }

  append(delta: string, receivedAt = performance.now()): void {
    this.#text += delta;
    if (this.probe) this.#pending.push(receivedAt);
    if (this.#frame === 0) this.#frame = requestAnimationFrame(() => this.#render());
  }

  /** The answer is complete: render what is left as final. */
  finish(text?: string): void {
    // The final text differs (a steer replaced the answer): render it whole.
    if (text !== undefined && text !== this.#text) this.#restart(text);
    if (this.#frame !== 0) cancelAnimationFrame(this.#frame);
    this.#frame = 0;
    this.#commit(this.#text.length);
    this.#tail.textContent = "";
    this.#painted();
  }

  /**
   * The text so far, whole, in place of what was appended (the app resent the entry: this page
   * fell behind and missed deltas, or opened the task while it streamed). Deltas then follow it.
   */
  reset(text: string): void {
    if (text === this.#text) return;
    this.#restart(text);
    if (this.#frame === 0) this.#frame = requestAnimationFrame(() => this.#render());
  }

  #restart(text: string): void {
    this.#text = text;
    this.#committed = 0;
    this.#scanned = 0;
    this.#boundary = 0;
    this.#inFence = false;
    this.#blocks.textContent = "";
  }

  #render(): void {
    this.#frame = 0;
    this.#scan();
    if (this.#boundary > this.#committed) this.#commit(this.#boundary);
    const tail = this.#text.slice(this.#committed);
    this.#tail.innerHTML = tail === "" ? "" : renderMarkdown(tail);
    this.#painted();
  }

  #painted(): void {
    if (!this.probe || this.#pending.length === 0) return;
    const received = this.#pending;
    this.#pending = [];
    // The DOM is updated; the frame is painted right after this callback.
    this.probe(received, performance.now());
  }

  #commit(end: number): void {
    const block = this.#text.slice(this.#committed, end);
    this.#committed = end;
    if (block.trim() === "") return;
    const element = document.createElement("div");
    element.innerHTML = renderMarkdown(block);
    highlightIn(element);
    this.#blocks.append(element);
  }

  /** Follows complete lines since the last scan, tracking code fences and blank lines. */
  #scan(): void {
    for (;;) {
      const newline = this.#text.indexOf("\n", this.#scanned);
      if (newline < 0) return;
      const line = this.#text.slice(this.#scanned, newline);
      this.#scanned = newline + 1;
      if (/^\s{0,3}(```|~~~)/.test(line)) this.#inFence = !this.#inFence;
      else if (!this.#inFence && line.trim() === "") this.#boundary = this.#scanned;
    }
  }
}
