/**
 * Quick edit: the Chat Completions request that rewrites a selection by an instruction (with the
 * selection as the Predicted Outputs `prediction`), and the clean-up of the streamed answer.
 */

export interface QuickEditInput {
  filename: string;
  languageId: string;
  before: string;
  selection: string;
  after: string;
  instruction: string;
}

const CONTEXT_LINES_BEFORE = 40;
/** Room for a rewrite of an empty or tiny selection (a line written from an instruction). */
export const QUICK_EDIT_MIN_TOKENS = 256;

/**
 * The output cap of a quick edit: twice the selection's tokens plus QUICK_EDIT_MIN_TOKENS, so a
 * rewrite may grow but a model that wanders off (repeats, writes the whole file) stops. Tokens are
 * estimated at 3 characters each, on the generous side for code (about 3.5 to 4 in practice).
 */
export function quickEditMaxTokens(selection: string): number {
  return 2 * Math.ceil(selection.length / 3) + QUICK_EDIT_MIN_TOKENS;
}
const CONTEXT_LINES_AFTER = 20;

export const QUICK_EDIT_SYSTEM =
  "You edit code. Rewrite the selected code as the instruction says and answer with the rewritten " +
  "code only: no explanation and no Markdown code fence. Keep the indentation and style of the " +
  "surrounding code; the answer replaces the selection exactly.";

function lastLines(text: string, count: number): string {
  return text.split("\n").slice(-count).join("\n");
}

function firstLines(text: string, count: number): string {
  return text.split("\n").slice(0, count).join("\n");
}

export function quickEditMessages(input: QuickEditInput): { role: string; content: string }[] {
  const user = [
    `File: ${input.filename} (${input.languageId})`,
    "",
    "Code before the selection:",
    lastLines(input.before, CONTEXT_LINES_BEFORE),
    "<selection>",
    input.selection,
    "</selection>",
    "Code after the selection:",
    firstLines(input.after, CONTEXT_LINES_AFTER),
    "",
    `Instruction: ${input.instruction}`,
  ].join("\n");
  return [
    { role: "system", content: QUICK_EDIT_SYSTEM },
    { role: "user", content: user },
  ];
}

/**
 * The rewrite without a Markdown code fence around it. Works on a partial answer too (while it
 * streams): an opening fence line still being written reads as nothing yet.
 */
export function stripFence(text: string): string {
  const open = /^\s*```[^\n`]*/.exec(text);
  if (!open) return text;
  const newline = text.indexOf("\n", open[0].length);
  if (newline < 0) return "";
  let body = text.slice(newline + 1);
  const close = /\n?```\s*$/.exec(body) ?? /\n`{1,2}$/.exec(body);
  if (close) body = body.slice(0, close.index);
  return body;
}

/** The final text: fence stripped, ending with a newline exactly when the selection did. */
export function finalRewrite(answer: string, selection: string): string {
  let text = stripFence(answer);
  if (selection.endsWith("\n") && !text.endsWith("\n") && text !== "") text += "\n";
  else if (!selection.endsWith("\n") && text.endsWith("\n")) text = text.replace(/\r?\n$/, "");
  return text;
}

/**
 * What a client needs to bring its copy of the rewrite from `sent` to `next`: keep its first `from`
 * characters (UTF-16 code units, as LSP counts) and append `text`. The rewrite mostly grows at its
 * end; stripping a fence can take back a few characters, which `from` covers.
 */
export function progressDelta(sent: string, next: string): { from: number; text: string } {
  let from = 0;
  if (next.startsWith(sent)) from = sent.length;
  else {
    const limit = Math.min(sent.length, next.length);
    while (from < limit && sent.charCodeAt(from) === next.charCodeAt(from)) from++;
  }
  // Never between the two halves of a surrogate pair.
  const before = next.charCodeAt(from - 1);
  if (from > 0 && from < next.length && before >= 0xd800 && before <= 0xdbff) from--;
  return { from, text: next.slice(from) };
}

/** At most one progress notification this often. */
export const PROGRESS_INTERVAL_MS = 50;
/** A notification carries at least this many new characters, unless PROGRESS_MAX_WAIT_MS passed. */
const PROGRESS_MIN_CHARS = 256;
const PROGRESS_MAX_WAIT_MS = 250;

/**
 * Quick-edit progress at a bounded rate, as deltas: a rewrite of N bytes costs the editor about N
 * bytes plus a bounded overhead per second, where sending the whole rewrite so far with every token
 * cost N²/(token size) (a 100 KB rewrite wrote 1.6 GB). The first change is sent at once; later ones
 * wait for the interval, and for enough new text to be worth a notification (or the longer wait).
 * `current` is read only when a notification may go out, so the fence is stripped at that rate too.
 */
export class ProgressThrottle {
  #sent = "";
  #started = false;
  #dirty = false;
  #lastAt = -Infinity;
  #timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly current: () => string,
    private readonly send: (from: number, text: string) => void,
  ) {}

  /** The rewrite grew (or changed). */
  changed(): void {
    this.#dirty = true;
    if (this.#timer === undefined) this.#tick();
  }

  /** The final text: sent now if the client's copy differs (and always once). */
  finish(final: string): void {
    this.stop();
    if (final !== this.#sent || !this.#started) this.#emit(final);
  }

  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  readonly #tick = (): void => {
    this.#timer = undefined;
    if (!this.#dirty) return;
    const text = this.current();
    if (text === this.#sent) {
      this.#dirty = false;
      return;
    }
    const now = performance.now();
    const waited = now - this.#lastAt;
    const grown = Math.abs(text.length - this.#sent.length);
    if (waited >= PROGRESS_MAX_WAIT_MS || (waited >= PROGRESS_INTERVAL_MS && grown >= PROGRESS_MIN_CHARS)) {
      this.#dirty = false;
      this.#lastAt = now;
      this.#emit(text);
    }
    this.#timer = setTimeout(this.#tick, PROGRESS_INTERVAL_MS);
  };

  #emit(text: string): void {
    const { from, text: appended } = progressDelta(this.#sent, text);
    this.#sent = text;
    this.#started = true;
    this.send(from, appended);
  }
}
