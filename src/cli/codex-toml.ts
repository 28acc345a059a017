/**
 * The edit `spark setup codex` makes to Codex's `config.toml`: a real TOML parser
 * (`toml-eslint-parser`, an AST with source ranges for every key, value and table) finds what is
 * there, and only targeted text edits are made at those ranges, so everything else in the file
 * stays byte for byte: comments, layout, key order, quoting, multi-line strings (whose lines may
 * start with `[` or look like `key = value`), line endings (a CRLF file gets CRLF lines).
 *
 * Contract of `planCodexConfig`:
 * - Missing top-level keys are added after the user's last top-level key (else before the first
 *   table and the comments right above it), under a `# Spark (spark setup codex)` line; a missing
 *   `[model_providers.spark]` table is appended; missing keys of an existing table are added after
 *   its last key (before its sub-tables, such as `[model_providers.spark.http_headers]`).
 * - A key of the user's with another value is a conflict: listed, and replaced (its value only, the
 *   key and any comment after it kept) only when `force`.
 * - Forms this does not edit (a dotted `model_providers.spark.x = …` key, an inline table, an array
 *   of tables) and a file that is not valid TOML are refused with what to do; nothing is planned.
 * - The result is parsed again and checked to say what was asked before it is returned.
 */
import { getStaticTOMLValue, parseTOML, type AST } from "toml-eslint-parser";
import { ConfigError } from "../settings/setting-names.js";

export type TomlValue = string | boolean;

export interface SetupPlan {
  /** What would be added or replaced, one line each, for the user. */
  changes: string[];
  /** Settings of the user's that say something else; nothing is written while there are any, unless forced. */
  conflicts: string[];
  text: string;
}

const PROVIDER = "spark";
const PROVIDER_PATH = ["model_providers", PROVIDER];

/** A TOML value as text: a basic string (JSON's escapes are TOML's; DEL, which TOML forbids raw, escaped) or a boolean. */
export function tomlValue(value: TomlValue): string {
  return typeof value === "string" ? JSON.stringify(value).replace(/\x7f/g, "\\u007F") : String(value);
}

/** A text edit at source offsets. */
interface Edit {
  at: number;
  end: number;
  text: string;
}

/**
 * Merges the wanted top-level keys and `[model_providers.spark]` keys into `existing` (a
 * config.toml's text, or undefined when there is none). Conflicting values are replaced only when
 * `force`.
 */
export function planCodexConfig(
  existing: string | undefined,
  top: readonly [string, TomlValue][],
  provider: readonly [string, TomlValue][],
  force: boolean,
): SetupPlan {
  const source = existing ?? "";
  const eol = source.includes("\r\n") ? "\r\n" : "\n";
  const program = parse(source);
  const root = program.body[0];
  const lines = new LineIndex(source);
  const changes: string[] = [];
  const conflicts: string[] = [];
  const edits: Edit[] = [];

  refuseUnsupportedForms(root, lines);

  const topKeys = root.body.filter((node): node is AST.TOMLKeyValue => node.type === "TOMLKeyValue");
  const tables = root.body.filter((node): node is AST.TOMLTable => node.type === "TOMLTable");

  // Top-level keys.
  const added: string[] = [];
  for (const [key, value] of top) {
    const node = topKeys.find((candidate) => sameKey(keyPath(candidate.key), [key]));
    const line = `${key} = ${tomlValue(value)}`;
    if (node === undefined) {
      added.push(line);
      changes.push(`add ${line}`);
      continue;
    }
    const conflict = conflictOf(source, node, value, line);
    if (conflict === undefined) continue;
    conflicts.push(conflict);
    if (force) edits.push({ at: node.value.range[0], end: node.value.range[1], text: tomlValue(value) });
  }
  if (added.length > 0) {
    const block = ["# Spark (spark setup codex)", ...added];
    const last = topKeys.at(-1);
    if (last !== undefined) {
      // After the user's last top-level key (its line, a trailing comment included).
      edits.push(lines.blockAt(lines.endOfLine(last.range[1]), block, eol));
    } else if (tables.length > 0) {
      // Before the first table and the comments right above it (they belong to it).
      edits.push(lines.blockAt(lines.startOfCommentsAbove(tables[0]!.range[0]), block, eol));
    } else {
      edits.push(lines.blockAt(source.length, block, eol));
    }
  }

  // The provider table.
  const table = tables.find(
    (candidate) => candidate.kind === "standard" && sameKey(candidate.resolvedKey, PROVIDER_PATH),
  );
  if (table === undefined) {
    edits.push(
      lines.blockAt(
        source.length,
        [`[model_providers.${PROVIDER}]`, ...provider.map(([key, value]) => `${key} = ${tomlValue(value)}`)],
        eol,
      ),
    );
    changes.push(`add a [model_providers.${PROVIDER}] table (${provider.map(([key]) => key).join(", ")})`);
  } else {
    const missing: string[] = [];
    for (const [key, value] of provider) {
      const node = table.body.find((candidate) => sameKey(keyPath(candidate.key), [key]));
      const line = `${key} = ${tomlValue(value)}`;
      if (node === undefined) {
        missing.push(line);
        changes.push(`add ${line} to [model_providers.${PROVIDER}]`);
        continue;
      }
      const conflict = conflictOf(source, node, value, line);
      if (conflict === undefined) continue;
      conflicts.push(`[model_providers.${PROVIDER}] ${conflict}`);
      if (force) edits.push({ at: node.value.range[0], end: node.value.range[1], text: tomlValue(value) });
    }
    if (missing.length > 0) {
      // After the table's last key, or its header line when it has none.
      const after = table.body.at(-1)?.range[1] ?? table.key.range[1];
      const at = lines.endOfLine(after);
      const text = missing.map((line) => line + eol).join("");
      edits.push(
        at === source.length && !endsWithNewline(source)
          ? { at, end: at, text: eol + text }
          : { at, end: at, text },
      );
    }
  }
  if (force) changes.push(...conflicts.map((conflict) => `replace ${conflict}`));

  let text = source;
  // Two insertions at one offset keep their order (top-level block before the appended table).
  const ordered = edits
    .map((edit, index) => ({ edit, index }))
    .sort((a, b) => b.edit.at - a.edit.at || b.index - a.index);
  for (const { edit } of ordered) text = text.slice(0, edit.at) + edit.text + text.slice(edit.end);
  if (edits.length > 0 && !endsWithNewline(text)) text += eol;
  if (conflicts.length === 0 || force) verify(text, top, provider);
  return { changes, conflicts, text };
}

function parse(source: string): AST.TOMLProgram {
  try {
    return parseTOML(source);
  } catch (error) {
    const where = error as { lineNumber?: number; column?: number; message?: string };
    const position =
      typeof where.lineNumber === "number"
        ? ` (line ${where.lineNumber}, column ${(where.column ?? 0) + 1})`
        : "";
    throw new ConfigError(
      `config.toml is not valid TOML${position}: ${where.message ?? String(error)}. ` +
        `Fix it (Codex cannot read it either), or move it aside, and run again.`,
    );
  }
}

/** Definitions of `model_providers.spark` in a form that is not a `[model_providers.spark]` table. */
function refuseUnsupportedForms(root: AST.TOMLTopLevelTable, lines: LineIndex): void {
  const refuse = (node: AST.TOMLKeyValue | AST.TOMLTable): never => {
    throw new ConfigError(
      `config.toml line ${node.loc.start.line} defines model_providers.${PROVIDER} in a form this command does not edit ` +
        `(${lines.lineAt(node.range[0]).trim()}); make it a [model_providers.${PROVIDER}] table, or remove it, and run again`,
    );
  };
  const definesProvider = (path: readonly (string | number)[], value: AST.TOMLContentNode): boolean => {
    if (path[0] !== "model_providers") return false;
    if (path.length >= 2) return path[1] === PROVIDER;
    return value.type === "TOMLInlineTable" && value.body.some((kv) => keyPath(kv.key)[0] === PROVIDER);
  };
  for (const node of root.body) {
    if (node.type === "TOMLKeyValue") {
      if (definesProvider(keyPath(node.key), node.value)) refuse(node);
      continue;
    }
    if (
      node.kind === "array" &&
      node.resolvedKey[0] === "model_providers" &&
      node.resolvedKey[1] === PROVIDER
    )
      refuse(node);
    for (const kv of node.body) {
      if (definesProvider([...node.resolvedKey, ...keyPath(kv.key)], kv.value) && node.resolvedKey.length < 2)
        refuse(kv);
    }
  }
}

/** The conflict line for a key the user set to something else; undefined when it says `value`. */
function conflictOf(
  source: string,
  node: AST.TOMLKeyValue,
  value: TomlValue,
  line: string,
): string | undefined {
  const current = node.value;
  if (current.type === "TOMLValue" && (current.kind === "string" || current.kind === "boolean")) {
    if (current.value === value) return undefined;
  }
  return `${source.slice(node.range[0], node.range[1]).trim()} (yours) would become ${line}`;
}

function keyPath(key: AST.TOMLKey): string[] {
  return key.keys.map((part) => (part.type === "TOMLBare" ? part.name : part.value));
}

function sameKey(a: readonly (string | number)[], b: readonly (string | number)[]): boolean {
  return a.length === b.length && a.every((part, index) => part === b[index]);
}

function endsWithNewline(text: string): boolean {
  return text.endsWith("\n");
}

/** Checks that `text` is TOML that says what was asked; an internal error otherwise (nothing written). */
function verify(
  text: string,
  top: readonly [string, TomlValue][],
  provider: readonly [string, TomlValue][],
): void {
  let value: Record<string, unknown>;
  try {
    value = getStaticTOMLValue(parseTOML(text)) as Record<string, unknown>;
  } catch (error) {
    throw new Error(
      `spark setup codex made config.toml invalid (a bug; nothing was written): ${String(error)}`,
      {
        cause: error,
      },
    );
  }
  const table = (value.model_providers as Record<string, Record<string, unknown>> | undefined)?.[PROVIDER];
  for (const [key, wanted] of top)
    if (value[key] !== wanted)
      throw new Error(`spark setup codex: ${key} did not come out as planned (a bug; nothing was written)`);
  for (const [key, wanted] of provider)
    if (table?.[key] !== wanted)
      throw new Error(
        `spark setup codex: model_providers.spark.${key} did not come out as planned (a bug; nothing was written)`,
      );
}

/** Line starts of a text, for edits by line. */
class LineIndex {
  constructor(private readonly source: string) {}

  /** The offset just after the end-of-line that ends the line holding `offset` (or the text's end). */
  endOfLine(offset: number): number {
    const newline = this.source.indexOf("\n", offset);
    return newline < 0 ? this.source.length : newline + 1;
  }

  startOfLine(offset: number): number {
    return this.source.lastIndexOf("\n", offset - 1) + 1;
  }

  lineAt(offset: number): string {
    const start = this.startOfLine(offset);
    const end = this.source.indexOf("\n", start);
    return this.source.slice(start, end < 0 ? undefined : end).replace(/\r$/, "");
  }

  /** The start of the comment lines directly above the line at `offset` (no blank line between). */
  startOfCommentsAbove(offset: number): number {
    let start = this.startOfLine(offset);
    while (start > 0) {
      const previous = this.startOfLine(start - 1);
      if (!/^\s*#/.test(this.source.slice(previous, start))) break;
      start = previous;
    }
    return start;
  }

  /**
   * `block` as lines inserted at `offset` (a line start, or the end of the text), set apart by a
   * blank line from the text before and after it, where there is text.
   */
  blockAt(offset: number, block: readonly string[], eol: string): Edit {
    const before = this.source.slice(0, offset);
    const after = this.source.slice(offset);
    let text = block.map((line) => line + eol).join("");
    if (before !== "" && !before.endsWith("\n")) text = eol + text;
    if (before.trim() !== "" && !/\n[ \t]*\r?\n$/.test(eol + before)) text = eol + text;
    if (after !== "" && !/^[ \t]*\r?\n/.test(after)) text += eol;
    return { at: offset, end: offset, text };
  }
}
