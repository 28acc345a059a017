/**
 * A small LRU cache of recent completions keyed by the text around the cursor: the end of the
 * prefix and the start of the suffix. A lookup also hits when the user has since typed the first
 * characters of a cached completion (the prefix grew by exactly those), and answers with the rest,
 * so typing along a shown suggestion costs no request.
 */

/** Characters of the prefix / suffix that make up a key. */
const PREFIX_KEY = 512;
const SUFFIX_KEY = 256;

interface Entry {
  uri: string;
  prefixTail: string;
  suffixHead: string;
  completion: string;
}

export class CompletionCache {
  private readonly entries: Entry[] = [];

  constructor(private readonly capacity = 64) {}

  get size(): number {
    return this.entries.length;
  }

  clear(): void {
    this.entries.length = 0;
  }

  /** Remembers `completion` (possibly "": nothing to suggest here) for this cursor position. */
  set(uri: string, prefix: string, suffix: string, completion: string): void {
    const prefixTail = prefix.slice(-PREFIX_KEY);
    const suffixHead = suffix.slice(0, SUFFIX_KEY);
    const index = this.entries.findIndex(
      (e) => e.uri === uri && e.prefixTail === prefixTail && e.suffixHead === suffixHead,
    );
    if (index >= 0) this.entries.splice(index, 1);
    this.entries.push({ uri, prefixTail, suffixHead, completion });
    if (this.entries.length > this.capacity) this.entries.shift();
  }

  /**
   * The completion for this position: a cached one for exactly this text, or the untyped rest of
   * one whose first characters the user has typed since. Undefined on a miss.
   */
  get(uri: string, prefix: string, suffix: string): string | undefined {
    const suffixHead = suffix.slice(0, SUFFIX_KEY);
    for (let i = this.entries.length - 1; i >= 0; i--) {
      const entry = this.entries[i]!;
      if (entry.uri !== uri || entry.suffixHead !== suffixHead) continue;
      const typed = this.typedLength(entry, prefix);
      if (typed === undefined) continue;
      this.entries.splice(i, 1);
      this.entries.push(entry);
      return entry.completion.slice(typed);
    }
    return undefined;
  }

  /** How many characters of the entry's completion end `prefix` right after its prefix, if any. */
  private typedLength(entry: Entry, prefix: string): number | undefined {
    const { prefixTail, completion } = entry;
    // typed = 0 is an exact hit; typing all of it leaves nothing to show, which is no hit.
    const most = Math.min(completion.length - 1, prefix.length);
    for (let typed = 0; typed <= most; typed++) {
      const end = prefix.length - typed;
      if (typed > 0 && prefix.charCodeAt(end) !== completion.charCodeAt(0)) continue;
      if (!prefix.endsWith(completion.slice(0, typed))) continue;
      const before = prefix.slice(0, end);
      if (before.slice(-PREFIX_KEY) === prefixTail) return typed;
    }
    if (completion === "" && prefix.slice(-PREFIX_KEY) === prefixTail) return 0;
    return undefined;
  }
}
