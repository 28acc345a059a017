/**
 * A ring of recently edited places, sent with each completion as `input_extra` (chunks of other
 * files, newest first): what the user just touched elsewhere is the context most likely to matter.
 * An edit records only its file and line (cheap on every keystroke); the chunk's text is read from
 * the document when a request needs it. A closed document leaves the ring: what is kept is only
 * what the editor still has open (a closed file's URI, odd or not, cannot affect later requests).
 */

export interface ExtraChunk {
  filename: string;
  text: string;
}

/** Reads lines [from, to) of an open document, or undefined when it is not open. */
export type LineReader = (uri: string, from: number, to: number) => string | undefined;

interface Place {
  uri: string;
  line: number;
}

export interface EditRingOptions {
  /** Places kept. */
  capacity: number;
  /** Lines of context on each side of an edit. */
  radius: number;
  /** Characters of all chunks of one request. */
  budget: number;
}

export const DEFAULT_EDIT_RING: EditRingOptions = { capacity: 16, radius: 12, budget: 6_000 };

export class EditRing {
  private places: Place[] = [];

  constructor(
    private readonly read: LineReader,
    private readonly options: EditRingOptions = DEFAULT_EDIT_RING,
  ) {}

  /** An edit at `line` of `uri`: replaces an older place of the same file whose chunk overlaps. */
  record(uri: string, line: number): void {
    const last = this.places[this.places.length - 1];
    if (last && last.uri === uri && Math.abs(last.line - line) <= 2) {
      last.line = line;
      return;
    }
    this.places = this.places.filter((p) => p.uri !== uri || Math.abs(p.line - line) > this.options.radius);
    this.places.push({ uri, line });
    if (this.places.length > this.options.capacity) this.places.shift();
  }

  /** Drops a closing document's places. */
  close(uri: string): void {
    this.places = this.places.filter((p) => p.uri !== uri);
  }

  /** Chunks of files other than `uri`, newest first, within the character budget. */
  chunks(uri: string, filename: (uri: string) => string): ExtraChunk[] {
    const chunks: ExtraChunk[] = [];
    let left = this.options.budget;
    for (let i = this.places.length - 1; i >= 0 && left > 0; i--) {
      const place = this.places[i]!;
      if (place.uri === uri) continue;
      const text = this.text(place);
      if (text === undefined || text.trim() === "") continue;
      const clipped = text.length > left ? text.slice(0, left) : text;
      left -= clipped.length;
      chunks.push({ filename: filename(place.uri), text: clipped });
    }
    return chunks;
  }

  private text(place: Place): string | undefined {
    const from = Math.max(0, place.line - this.options.radius);
    return this.read(place.uri, from, place.line + this.options.radius + 1);
  }
}
