/**
 * Markdown for the terminal: marked's lexer (the parser the web app uses) turns an answer into
 * tokens, and this file renders them as rows of styled text: headings bold, emphasis in italics,
 * inline code in cyan, bullets and numbers with hanging indents, quotes behind a bar, tables in
 * columns, fenced code indented and colored by highlight.js (its core and a dozen common languages,
 * as in web/). The answer is sanitized first: model output never reaches the terminal's escape
 * parser.
 *
 * Both libraries load in the background after the prompt is drawn (`loadMarkdown`), so launch does
 * not wait for them; until then text is shown wrapped but unstyled.
 *
 * Streaming (`MarkdownStream`): the text is cut into blocks at blank lines outside code fences. A
 * finished block is rendered once and its rows go to the scrollback; only the unfinished last block
 * is rendered again, once per frame. Inside a fence every completed line is final at once (colored
 * with the fence's preceding lines as context), so a long code block costs the same per frame as a
 * short one. A block taller than the room left on screen is cut at its last complete line, so the
 * live region never outgrows the screen.
 */
import type { Token, Tokens } from "marked";
import { sanitize, visibleWidth, wrapLine, wrapText } from "./wrap.js";

type Lex = (source: string) => Token[];
interface Highlighter {
  highlight(code: string, options: { language: string; ignoreIllegals: boolean }): { value: string };
  getLanguage(name: string): unknown;
}

let lex: Lex | undefined;
let hljs: Highlighter | undefined;
let loading: Promise<void> | undefined;

const LANGUAGES: Record<string, string[]> = {
  bash: ["sh", "shell", "zsh", "console"],
  c: ["h"],
  cpp: ["c++", "cc", "hpp"],
  css: [],
  diff: ["patch"],
  go: ["golang"],
  java: [],
  javascript: ["js", "jsx", "mjs", "cjs"],
  json: ["jsonc"],
  python: ["py"],
  rust: ["rs"],
  sql: [],
  typescript: ["ts", "tsx", "mts"],
  xml: ["html", "svg"],
  yaml: ["yml"],
};

/** Loads marked and highlight.js (once). Rendering works before this resolves, unstyled. */
export function loadMarkdown(): Promise<void> {
  loading ??= (async () => {
    const [{ Lexer }, core] = await Promise.all([import("marked"), import("highlight.js/lib/core")]);
    const hl = core.default;
    await Promise.all(
      Object.entries(LANGUAGES).map(async ([name, aliases]) => {
        const language = (await import(`highlight.js/lib/languages/${name}`)) as {
          default: Parameters<typeof hl.registerLanguage>[1];
        };
        hl.registerLanguage(name, language.default);
        if (aliases.length > 0) hl.registerAliases(aliases, { languageName: name });
      }),
    );
    // `breaks`: a single newline is a line break, as the model wrote it (a terminal has no reflow to gain).
    lex = (source) => Lexer.lex(source, { gfm: true, breaks: true });
    // highlight.js compiles a language's grammar on its first use (up to 45 ms for Java): do it
    // now, one language per event-loop turn, rather than in the frame that shows the first fence.
    for (const name of Object.keys(LANGUAGES)) {
      await new Promise((resolve) => setImmediate(resolve));
      hl.highlight("x = 1", { language: name, ignoreIllegals: true });
    }
    lex("# a\n\n- *b* `c`\n\n| d |\n|---|\n| e |\n");
    hljs = hl;
  })();
  return loading;
}

const enabled = !process.env.NO_COLOR;
const sgr = (open: string, close: string) => (text: string) =>
  enabled && text !== "" ? `\x1b[${open}m${text}\x1b[${close}m` : text;
const bold = sgr("1", "22");
const dim = sgr("2", "22");
const italic = sgr("3", "23");
const underline = sgr("4", "24");
const strike = sgr("9", "29");
const cyan = sgr("36", "39");
const blue = sgr("34", "39");

const ENTITIES: Record<string, string> = {
  amp: "&",
  lt: "<",
  gt: ">",
  quot: '"',
  "#39": "'",
  "#x27": "'",
  nbsp: " ",
};
function decode(text: string): string {
  return text.includes("&")
    ? text.replace(/&(amp|lt|gt|quot|#39|#x27|nbsp);/g, (_, e: string) => ENTITIES[e]!)
    : text;
}

// ── inline ──────────────────────────────────────────────────────────────────────────────

function inline(tokens: readonly Token[] | undefined, fallback = ""): string {
  if (!tokens) return decode(fallback);
  let out = "";
  for (const token of tokens) {
    switch (token.type) {
      case "strong":
        out += bold(inline(token.tokens, token.text));
        break;
      case "em":
        out += italic(inline(token.tokens, token.text));
        break;
      case "del":
        out += strike(inline(token.tokens, token.text));
        break;
      case "codespan":
        out += cyan(decode(token.text));
        break;
      case "br":
        out += "\n";
        break;
      case "link": {
        const text = inline(token.tokens, token.text);
        out +=
          text === token.href ? underline(blue(text)) : `${underline(blue(text))} ${dim(`(${token.href})`)}`;
        break;
      }
      case "image":
        out += dim(`[image: ${token.text || token.href}]`);
        break;
      case "html":
        out += dim(token.text);
        break;
      default:
        out +=
          "tokens" in token && token.tokens
            ? inline(token.tokens)
            : decode((token as { text?: string }).text ?? token.raw);
    }
  }
  return out;
}

// ── blocks ──────────────────────────────────────────────────────────────────────────────

const BULLETS = ["•", "◦", "▪"];

/** Blocks one after another, a blank row between them (none in a tight list's item). */
function blocks(tokens: readonly Token[], width: number, depth = 0, tight = false): string[] {
  const out: string[] = [];
  for (const token of tokens) {
    const rows = block(token, width, depth);
    if (rows === undefined) continue;
    if (out.length > 0 && !tight) out.push("");
    out.push(...rows);
  }
  return out;
}

function block(token: Token, width: number, depth: number): string[] | undefined {
  switch (token.type) {
    case "space":
    case "def":
      return undefined;
    case "heading": {
      const text = inline(token.tokens, token.text);
      const styled =
        token.depth === 1 ? bold(underline(text)) : token.depth === 2 ? bold(text) : bold(italic(text));
      return wrapText(styled, width);
    }
    case "paragraph":
      return wrapText(inline(token.tokens, token.text), width);
    case "text":
      return wrapText(inline(token.tokens, token.text), width);
    case "code":
      return codeRows(token.text, (token as Tokens.Code).lang ?? "", width);
    case "blockquote":
      return blocks(token.tokens ?? [], width - 2, depth).map((row) => `${dim("│")} ${row}`);
    case "hr":
      return [dim("─".repeat(Math.max(1, Math.min(width, 80))))];
    case "list":
      return list(token as Tokens.List, width, depth);
    case "table":
      return table(token as Tokens.Table, width);
    case "html":
      return wrapText(dim(token.text.trimEnd()), width);
    default:
      return wrapText(decode(token.raw.trimEnd()), width);
  }
}

function list(token: Tokens.List, width: number, depth: number): string[] {
  const out: string[] = [];
  const start = typeof token.start === "number" ? token.start : 1;
  const last = start + token.items.length - 1;
  const numberWidth = String(last).length + 1;
  token.items.forEach((item, index) => {
    let marker = token.ordered
      ? `${start + index}.`.padStart(numberWidth)
      : BULLETS[Math.min(depth, BULLETS.length - 1)]!;
    if (item.task) marker += item.checked ? " [x]" : " [ ]";
    const indent = visibleWidth(marker) + 1;
    const body = blocks(item.tokens, width - indent, depth + 1, !token.loose);
    if (token.loose && index > 0) out.push("");
    body.forEach((row, i) => {
      out.push(
        i === 0
          ? `${token.ordered ? marker : dim(marker)} ${row}`
          : row === ""
            ? ""
            : `${" ".repeat(indent)}${row}`,
      );
    });
    if (body.length === 0) out.push(marker);
  });
  return out;
}

function table(token: Tokens.Table, width: number): string[] {
  const header = token.header.map((cell) => inline(cell.tokens, cell.text));
  const rows = token.rows.map((row) => row.map((cell) => inline(cell.tokens, cell.text)));
  const columns = header.length;
  const widths = header.map((cell, i) =>
    Math.max(visibleWidth(cell), ...rows.map((r) => visibleWidth(r[i] ?? ""))),
  );
  const separator = dim(" │ ");
  const total = widths.reduce((a, b) => a + b, 0) + 3 * (columns - 1);
  if (total > width) {
    // Too wide for columns: one cell per line, labelled by its header.
    const out: string[] = [];
    for (const row of rows) {
      if (out.length > 0) out.push("");
      row.forEach((cell, i) => out.push(...wrapText(`${bold(header[i] ?? "")}: ${cell}`, width)));
    }
    return out;
  }
  const line = (cells: string[], style = (s: string) => s) =>
    cells
      .map((cell, i) => {
        const pad = " ".repeat(Math.max(0, widths[i]! - visibleWidth(cell)));
        return style(token.align[i] === "right" ? pad + cell : cell + pad);
      })
      .join(separator)
      .trimEnd();
  return [
    line(header, bold),
    dim(widths.map((w) => "─".repeat(w)).join("─┼─")),
    ...rows.map((row) => line(row)),
  ];
}

// ── code ────────────────────────────────────────────────────────────────────────────────

const CODE_INDENT = "  ";

const SCOPE_COLORS: Record<string, string> = {
  keyword: "35",
  built_in: "36",
  type: "36",
  literal: "36",
  number: "33",
  string: "32",
  regexp: "31",
  symbol: "33",
  comment: "90",
  doctag: "90",
  meta: "90",
  title: "34",
  function: "34",
  class: "34",
  attr: "36",
  attribute: "36",
  property: "36",
  params: "39",
  variable: "31",
  "template-variable": "31",
  tag: "34",
  name: "34",
  "selector-tag": "34",
  "selector-class": "33",
  "selector-id": "33",
  section: "1",
  bullet: "33",
  addition: "32",
  deletion: "31",
  subst: "39",
};

/** highlight.js's HTML (only `<span class="hljs-…">`, `</span>` and five entities) as ANSI lines. */
function htmlToAnsi(html: string): string[] {
  const lines: string[] = [];
  const stack: string[] = [];
  let line = "";
  const color = (): string => stack.at(-1) ?? "39";
  const re = /<span class="([^"]*)">|<\/span>|&(amp|lt|gt|quot|#x27|#39);|([^<&]+)|(.)/gs;
  for (const match of html.matchAll(re)) {
    if (match[1] !== undefined) {
      const scope = /hljs-([\w-]+)/.exec(match[1])?.[1] ?? "";
      const code = SCOPE_COLORS[scope] ?? color();
      stack.push(code);
      if (enabled) line += `\x1b[${code === "1" ? "1" : `22;${code}`}m`;
    } else if (match[0] === "</span>") {
      stack.pop();
      if (enabled) line += `\x1b[22;${color()}m`;
    } else {
      const text = match[2] !== undefined ? ENTITIES[match[2]]! : (match[3] ?? match[4] ?? "");
      const parts = text.split("\n");
      parts.forEach((part, i) => {
        if (i > 0) {
          lines.push(line + (enabled && stack.length > 0 ? "\x1b[0m" : ""));
          line = enabled && stack.length > 0 ? `\x1b[${color()}m` : "";
        }
        line += part;
      });
    }
  }
  lines.push(line + (enabled && stack.length > 0 ? "\x1b[0m" : ""));
  return lines;
}

/** Code lines colored (when highlight.js knows the language), one string per line. */
function highlightLines(code: string, language: string): string[] {
  const lang = language.toLowerCase();
  if (enabled && hljs && lang !== "" && hljs.getLanguage(lang)) {
    try {
      return htmlToAnsi(hljs.highlight(code, { language: lang, ignoreIllegals: true }).value);
    } catch {
      // fall through: plain
    }
  }
  return code.split("\n");
}

function codeLineRows(line: string, width: number): string[] {
  return wrapLine(line, width - CODE_INDENT.length).map((row) => CODE_INDENT + row);
}

function codeRows(code: string, language: string, width: number): string[] {
  const text = code.replace(/\n$/, "");
  return highlightLines(text, language).flatMap((line) => codeLineRows(line, width));
}

/** A whole (finished) Markdown text as rows of at most `width` columns. */
export function renderMarkdown(source: string, width: number): string[] {
  const text = sanitize(source);
  if (!lex) return wrapText(text.replace(/\n+$/, ""), width);
  try {
    return blocks(lex(text), width);
  } catch {
    return wrapText(text, width);
  }
}

// ── streaming ───────────────────────────────────────────────────────────────────────────

const FENCE = /^(\s*)(`{3,}|~{3,})\s*([^`\s]*)/;
/** Lines of a fence before the new ones that are highlighted with them, for the highlighter's state. */
const CONTEXT_LINES = 40;

interface OpenFence {
  char: string;
  length: number;
  indent: number;
  language: string;
  /** The fence's code lines so far (complete ones), and how many of them are on screen as final rows. */
  lines: string[];
  shown: number;
}

export class MarkdownStream {
  #text = "";
  /** Where the current (unfinished) block starts in the text, and how far the line scan got. */
  #blockStart = 0;
  #scanned = 0;
  #fence: OpenFence | undefined;
  /** Rows of the current block already sent to the scrollback (the block outgrew the screen). */
  #emittedRows = 0;
  /** Rows that are final and not yet taken. */
  #done: string[] = [];
  /** A blank row goes before the next block's first row. */
  #gap = false;

  append(delta: string): void {
    this.#text += sanitize(delta);
  }

  get text(): string {
    return this.#text;
  }

  /** Final rows since the last call (finished blocks and fence lines), without the live part. */
  drain(width: number): string[] {
    this.#scan(width);
    return this.#done.splice(0);
  }

  /**
   * The final rows since the last call, and the unfinished block's rows for the live region, at
   * most `maxLive` of them (rows above that become final).
   */
  take(width: number, maxLive: number): { done: string[]; live: string[] } {
    this.#scan(width);
    let rows = this.#liveRows(width);
    // The blank row before this block, when it has not been written yet, takes a row of the room.
    // The last row stays live whatever the room: it is the one still changing.
    const room = (): number => Math.max(1, maxLive - (this.#gap && rows.length > 0 ? 1 : 0));
    if (rows.length > room() && !this.#fence) {
      // Taller than the screen: cut the block at its last complete line (its rows are final).
      const end = this.#text.lastIndexOf("\n");
      if (end >= this.#blockStart) {
        this.#commitBlock(end + 1, width, false);
        rows = this.#liveRows(width);
      }
    }
    if (rows.length > room()) {
      const extra = rows.length - room();
      if (this.#fence) {
        // A code line longer than the room: only its end is shown until it is complete.
        rows = rows.slice(extra);
      } else {
        if (this.#gap) this.#done.push("");
        this.#gap = false;
        this.#done.push(...rows.slice(0, extra));
        this.#emittedRows += extra;
        rows = rows.slice(extra);
      }
    }
    return { done: this.#done.splice(0), live: this.#gap && rows.length > 0 ? ["", ...rows] : rows };
  }

  /** The answer ended: everything left, as final rows. */
  finish(width: number): string[] {
    if (this.#text !== "" && !this.#text.endsWith("\n")) this.#text += "\n";
    this.#scan(width);
    if (this.#fence) this.#closeFence(width);
    else this.#commitBlock(this.#text.length, width, true);
    return this.#done.splice(0);
  }

  /** The unfinished block's rows not yet final (without the blank row before it). */
  #liveRows(width: number): string[] {
    const tail = this.#text.slice(this.#scanned);
    if (this.#fence) {
      if (tail === "") return [];
      return codeLineRows(tail.slice(Math.min(this.#fence.indent, leadingSpaces(tail))), width);
    }
    const source = this.#text.slice(this.#blockStart);
    if (source.trim() === "") return [];
    return renderMarkdown(source, width).slice(this.#emittedRows);
  }

  /** Follows complete lines: block boundaries, fences opening and closing, fence lines. */
  #scan(width: number): void {
    let fenceFrom = -1;
    for (;;) {
      const newline = this.#text.indexOf("\n", this.#scanned);
      if (newline < 0) break;
      const line = this.#text.slice(this.#scanned, newline);
      const start = this.#scanned;
      this.#scanned = newline + 1;
      const fence = this.#fence;
      if (fence) {
        const close = /^\s*(`{3,}|~{3,})\s*$/.exec(line);
        if (close && close[1]![0] === fence.char && close[1]!.length >= fence.length) {
          this.#flushFence(width, fenceFrom);
          fenceFrom = -1;
          this.#closeFence(width);
          this.#blockStart = this.#scanned;
          continue;
        }
        if (fenceFrom < 0) fenceFrom = fence.lines.length;
        fence.lines.push(line.slice(Math.min(fence.indent, leadingSpaces(line))));
        continue;
      }
      const open = FENCE.exec(line);
      if (open) {
        // A fence ends the paragraph before it (no blank line needed).
        this.#commitBlock(start, width, true);
        this.#fence = {
          indent: open[1]!.length,
          char: open[2]![0]!,
          length: open[2]!.length,
          language: open[3] ?? "",
          lines: [],
          shown: 0,
        };
        fenceFrom = -1;
        continue;
      }
      if (line.trim() === "") this.#commitBlock(this.#scanned, width, true);
    }
    if (fenceFrom >= 0) this.#flushFence(width, fenceFrom);
  }

  /** The fence's new complete lines as final rows, highlighted after up to CONTEXT_LINES before them. */
  #flushFence(width: number, from: number): void {
    const fence = this.#fence;
    if (!fence || from < 0 || from >= fence.lines.length) return;
    if (fence.shown === 0 && fence.lines.length > 0) {
      if (this.#gap) this.#done.push("");
      this.#gap = false;
    }
    const contextStart = Math.max(0, from - CONTEXT_LINES);
    const colored = highlightLines(fence.lines.slice(contextStart).join("\n"), fence.language);
    for (const line of colored.slice(from - contextStart)) this.#done.push(...codeLineRows(line, width));
    fence.shown = fence.lines.length;
  }

  #closeFence(width: number): void {
    const fence = this.#fence;
    if (!fence) return;
    this.#flushFence(width, fence.shown);
    this.#fence = undefined;
    this.#gap = true;
    this.#emittedRows = 0;
  }

  /** The text from the block's start to `end` is a finished block: its rows become final. */
  #commitBlock(end: number, width: number, gapAfter: boolean): void {
    const source = this.#text.slice(this.#blockStart, end);
    this.#blockStart = end;
    if (source.trim() === "") return;
    const rows = renderMarkdown(source, width).slice(this.#emittedRows);
    if (rows.length > 0 && this.#emittedRows === 0 && this.#gap) this.#done.push("");
    this.#done.push(...rows);
    this.#emittedRows = 0;
    this.#gap = gapAfter;
  }
}

function leadingSpaces(line: string): number {
  return line.length - line.trimStart().length;
}
