/**
 * Which documents get completions: `spark.completions.*` settings, checked by `spark lsp` before it
 * sends anything and by the VS Code extension before it asks (so a secrets file never leaves the
 * editor even through an older language server). Pure: no editor or Node APIs.
 */

/** Files that hold secrets: matched against the file name (and the path, for patterns with `/`). */
export const DEFAULT_EXCLUDE_PATTERNS: readonly string[] = [
  ".env*",
  "*.pem",
  "*.key",
  "*.p12",
  "*.pfx",
  "id_rsa*",
  "id_dsa*",
  "id_ecdsa*",
  "id_ed25519*",
  "*secret*",
  "*credential*",
  ".npmrc",
  ".netrc",
  ".pgpass",
];

export interface CompletionFilter {
  /** Off: no completion is requested anywhere. */
  enabled: boolean;
  /** Language ids (`markdown`, `plaintext`) that get none. */
  disabledLanguages: readonly string[];
  /** Globs (`*`, `?`, `**`), case-insensitive; without a `/` they match the file name alone. */
  excludePatterns: readonly string[];
}

export const DEFAULT_COMPLETION_FILTER: CompletionFilter = {
  enabled: true,
  disabledLanguages: [],
  excludePatterns: DEFAULT_EXCLUDE_PATTERNS,
};

const compiled = new Map<string, RegExp>();

/** A glob as a RegExp: `**` any characters, `*` and `?` any within one path segment. */
export function globToRegExp(pattern: string): RegExp {
  let cached = compiled.get(pattern);
  if (cached) return cached;
  let source = "";
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "*" && pattern[i + 1] === "*") {
      // `**/` also matches no folder at all.
      if (pattern[i + 2] === "/") {
        source += "(?:.*/)?";
        i += 2;
      } else {
        source += ".*";
        i++;
      }
    } else if (c === "*") source += "[^/]*";
    else if (c === "?") source += "[^/]";
    else source += c.replace(/[.+^${}()|[\]\\]/g, "\\$&");
  }
  // A pattern with a folder in it matches the end of the path (`config/*.json` anywhere).
  cached = new RegExp(pattern.includes("/") ? `(?:^|/)${source}$` : `^${source}$`, "i");
  compiled.set(pattern, cached);
  return cached;
}

/** Whether `path` (a file path or URI path, `/` or `\` separated) matches one of `patterns`. */
export function matchesAny(path: string, patterns: readonly string[]): string | undefined {
  const normalized = path.replace(/\\/g, "/");
  const name = normalized.slice(normalized.lastIndexOf("/") + 1);
  return patterns.find((pattern) => globToRegExp(pattern).test(pattern.includes("/") ? normalized : name));
}

/**
 * Why a document gets no completions (a sentence for a log), or undefined when it gets them.
 * `path` is the file's path, or undefined for a document that is not a file (then only the
 * language counts).
 */
export function completionsBlocked(
  filter: CompletionFilter,
  document: { path: string | undefined; languageId: string },
): string | undefined {
  if (!filter.enabled) return "completions are off (spark.completions.enabled)";
  if (filter.disabledLanguages.includes(document.languageId)) {
    return `completions are off for ${document.languageId} (spark.completions.disabledLanguages)`;
  }
  if (document.path !== undefined) {
    const pattern = matchesAny(document.path, filter.excludePatterns);
    if (pattern !== undefined) return `the file matches ${pattern} (spark.completions.excludePatterns)`;
  }
  return undefined;
}
