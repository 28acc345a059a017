/**
 * Bounded tokenization of untrusted text (issue 21, item 5). llama.cpp's tokenizer is synchronous
 * and takes about half a microsecond a character on the event loop: a 14 MB prompt tokenized whole
 * stalls every user of the server for seconds, and clipping by re-tokenizing the whole kept text
 * once per dropped line is quadratic (a 0.8 MB FIM body froze the server for 25 s).
 *
 * So text is tokenized a chunk at a time from the side that is kept, and only until it certainly
 * holds more tokens than the context can take: the work is bounded by the context (about `limit`
 * tokens' worth of text plus one chunk), never by the body. A chunk ends at a line boundary when
 * one is within reach, so chunks of the same text are the same from one keystroke to the next.
 */
import type { Token } from "node-llama-cpp";

/** Characters tokenized in one go (about 8 ms of tokenizing on the test machine). */
export const CHUNK_CHARS = 16_384;
/** Tokens that may merge across one cut between chunks (a chunk's count is then a token or two high). */
const MERGE_SLACK = 2;
/** Cuts tried, one line further each, before the tokens nearest the cursor are kept instead. */
const MAX_CUT_TRIES = 4;

export type Tokenize = (text: string) => Token[];

export interface ClipTokenizer {
  tokenize: Tokenize;
  detokenize: (tokens: readonly Token[]) => string;
}

export type Keep = "keep-start" | "keep-end";

/**
 * The part of `text` on the `keep` side that holds more than `limit` tokens (or all of it, when
 * it does not): chunks are tokenized from that side until the count certainly passes `limit`.
 * `over` says whether it did; a text of one chunk or less is returned whole, not counted.
 */
export function keptRegion(
  text: string,
  tokenize: Tokenize,
  limit: number,
  keep: Keep,
): { text: string; over: boolean } {
  if (text.length <= CHUNK_CHARS) return { text, over: false };
  const end = keep === "keep-end";
  let edge = end ? text.length : 0;
  let counted = 0;
  let chunks = 0;
  while (end ? edge > 0 : edge < text.length) {
    const next = end ? chunkStart(text, edge) : chunkEnd(text, edge);
    counted += tokenize(end ? text.slice(next, edge) : text.slice(edge, next)).length;
    chunks++;
    edge = next;
    if (counted - MERGE_SLACK * chunks > limit) {
      return { text: end ? text.slice(edge) : text.slice(0, edge), over: true };
    }
  }
  return { text, over: false };
}

/** Whether `texts`, one after the other, certainly hold more than `limit` tokens; bounded work. */
export function exceedsTokens(texts: Iterable<string>, tokenize: Tokenize, limit: number): boolean {
  let rest = limit;
  for (const text of texts) {
    if (text.length <= CHUNK_CHARS) {
      rest -= text.length === 0 ? 0 : Math.max(0, tokenize(text).length - MERGE_SLACK);
      if (rest < 0) return true;
      continue;
    }
    const region = keptRegion(text, tokenize, Math.max(0, rest), "keep-start");
    if (region.over) return true;
    rest -= Math.max(0, tokenize(region.text).length - MERGE_SLACK);
    if (rest < 0) return true;
  }
  return false;
}

/**
 * Tokens of `text`, a chunk at a time with a turn of the event loop between chunks, so a long text
 * never holds the loop for more than one chunk. The sum may differ from the whole text's count by
 * a token or two per chunk (merges across a cut): a count for estimates and thresholds.
 */
export async function countTokensInChunks(text: string, tokenize: Tokenize): Promise<number> {
  let count = 0;
  for (let edge = 0; edge < text.length;) {
    if (edge > 0) await new Promise<void>((resolve) => setImmediate(resolve));
    const next = chunkEnd(text, edge);
    count += tokenize(text.slice(edge, next)).length;
    edge = next;
  }
  return count;
}

/**
 * Tokenizes `text`, dropping whole lines from the far side until it fits `limit` tokens: the
 * prefix keeps its end (next to the cursor), the suffix and other files their start.
 *
 * Linear: only the kept region is tokenized (`keptRegion`), then where the budget ends in it is
 * read from the text of its `limit` tokens on the kept side, moved to the next line boundary, and
 * the lines from there are tokenized once (a line further, a few times at most, when tokens merge
 * differently across the cut). A line longer than the whole budget keeps the tokens nearest the cursor.
 */
export function clipLines(text: string, tokenizer: ClipTokenizer, limit: number, keep: Keep): Token[] {
  if (limit <= 0 || text === "") return [];
  const end = keep === "keep-end";
  const region = keptRegion(text, tokenizer.tokenize, limit, keep).text;
  let tokens = tokenizer.tokenize(region);
  if (tokens.length <= limit) return tokens;
  const kept = end ? tokens.slice(tokens.length - limit) : tokens.slice(0, limit);
  const keptChars = tokenizer.detokenize(kept).length;
  let cut = end ? lineStartFrom(region, region.length - keptChars) : lineEndBefore(region, keptChars);
  for (let tries = 0; tries < MAX_CUT_TRIES; tries++) {
    const candidate = end ? region.slice(cut) : region.slice(0, cut);
    if (candidate === "") break;
    const fitted = tokenizer.tokenize(candidate);
    if (fitted.length <= limit) return fitted;
    tokens = fitted;
    cut = end ? lineStartFrom(region, cut + 1) : lineEndBefore(region, cut - 1);
  }
  return end ? tokens.slice(tokens.length - limit) : tokens.slice(0, limit);
}

/** The first line start at or after `at` (the text's length when there is none). */
function lineStartFrom(text: string, at: number): number {
  if (at <= 0) return 0;
  if (at >= text.length) return text.length;
  if (text[at - 1] === "\n") return at;
  const newline = text.indexOf("\n", at);
  return newline < 0 ? text.length : newline + 1;
}

/** The last line end (just after a newline) at or before `at` (0 when there is none). */
function lineEndBefore(text: string, at: number): number {
  if (at >= text.length) return text.length;
  if (at <= 0) return 0;
  if (text[at - 1] === "\n") return at;
  const newline = text.lastIndexOf("\n", at - 1);
  return newline < 0 ? 0 : newline + 1;
}

/** Start of the chunk that ends at `edge`: the first line start within reach, else mid-line. */
function chunkStart(text: string, edge: number): number {
  const from = edge - CHUNK_CHARS;
  if (from <= 0) return 0;
  // Searched in a slice, so a text without newlines is not scanned to its start for each chunk.
  const newline = text.slice(from, edge - 1).indexOf("\n");
  if (newline >= 0) return from + newline + 1;
  return isLowSurrogate(text.charCodeAt(from)) ? from + 1 : from;
}

/** End of the chunk that starts at `edge`: just after the last newline within reach, else mid-line. */
function chunkEnd(text: string, edge: number): number {
  const to = edge + CHUNK_CHARS;
  if (to >= text.length) return text.length;
  const newline = text.slice(edge, to).lastIndexOf("\n");
  if (newline >= 0) return edge + newline + 1;
  return isLowSurrogate(text.charCodeAt(to)) ? to - 1 : to;
}

function isLowSurrogate(code: number): boolean {
  return code >= 0xdc00 && code <= 0xdfff;
}
