/**
 * `model: "auto"`: chooses the tier (`spark` or `deep`) for a request from what it asks for.
 *
 * Why rules and not a model: the router runs on every auto request, before any model is chosen, so it
 * must be deterministic (the same request always goes to the same tier: testable, cacheable,
 * reproducible), take microseconds (a few regular expressions over a few KiB, no model call in front
 * of the model call) and be explainable (every decision names the rule that fired and the evidence,
 * and both are sent back to the client).
 *
 * What it looks at, with bounded work however large the conversation is:
 * - the task: the latest user message (plus any user messages directly before it), found by walking
 *   back from the end over at most {@link MAX_WALK_ITEMS} items. Only the first
 *   {@link TASK_HEAD_CHARS} and last {@link TASK_TAIL_CHARS} characters are scanned (the ask is
 *   almost always at the start or the end of a pasted log or file); pasted code in it is scanned too
 *   (code that handles passwords is security work). User messages that are client context rather
 *   than a task (Codex sends `<environment_context>…`, `<user_instructions>…` and
 *   `# AGENTS.md instructions…` as user messages: a leading `<snake_case>` or `<instructions>` tag, or
 *   that heading) count as instructions, not as the task. Older turns are never read;
 * - the shape of the current task: tool results since that user message (counted, never read; past
 *   the walk limit the count is reported as "at least");
 * - instructions (leading system/developer messages, those near the task and client context, at most
 *   4 KiB each and 12 KiB in all), lightly, and only when the task has a weak security word: see below;
 * - the prediction: present or not (its text is not read).
 * `tools` is not a signal (Codex always sends its whole tool set), nor is `maxOutputTokens`.
 *
 * Rules, in precedence order (the first that matches decides):
 * 1. `security_sensitive` (deep): the task names authentication/authorization (auth, login,
 *    password, OAuth, JWT, session/access/API token, MFA…), cryptography (crypto, encrypt/decrypt,
 *    cipher, HMAC, bcrypt, hashing passwords…), TLS/certificates, secrets/API keys/private keys, or
 *    vulnerability work (CVE, vulnerability, exploitable, SQL/command injection, XSS, CSRF, SSRF,
 *    sanitize, path traversal, privilege escalation, sandbox escape, security…). Word-boundary matching
 *    on whole words and phrases keeps out the usual false positives: "keyboard" or "object key"
 *    (`key` alone is never a signal, only `api key`, `private key`, `secret key`…), "HashMap" or
 *    "hash map" (only hashing *passwords* counts), "tokenize"/"tokens" (only `session token`,
 *    `access token`… count), "dependency injection" (only named injection classes count),
 *    "author" (`auth` is a whole word), "exploit parallelism" (only `exploits`, `exploitable`,
 *    `an exploit`…), "log in the console" (only `login`/`log-in`), "crypto.randomUUID()".
 *    Accepted the other way: "add a login button" or "certificate of completion" go to deep; sending a
 *    borderline task to the thorough tier costs latency, missing real security work costs more.
 *    Ambiguous words (token, session, cookie, hash, salt, permission, signature, CORS) are weak: they
 *    count only when the instructions set a security context ("security review", "security audit",
 *    "vulnerabilities", "penetration test", "threat model", "appsec"…). Instructions never route to deep
 *    by themselves: system prompts routinely talk about authorization, secrets and "keep going until
 *    the query is completely resolved" (Codex's own do), which would send every request to `deep`.
 * 2. `long_autonomous_run` (deep): at least {@link LONG_RUN_TOOL_RESULTS} tool results since the latest
 *    user message, or the task asks for autonomy ("keep going until all tests pass", "fix all failing
 *    tests", "work through the whole backlog", "don't stop", "autonomously", "without asking"…).
 * 3. `multi_file_refactor` (deep): a change verb with a scope that spans files by itself ("across the
 *    codebase", "every module", "all files", "throughout the repo", "project-wide", "everywhere"…); a
 *    refactoring verb (refactor, rename, migrate, move, port, extract, split, replace, convert…) over
 *    "all call sites/usages/tests…" unless one file path pins it ("rename all usages in utils.ts");
 *    or any change verb with at least {@link MULTI_FILE_PATHS} distinct file paths named
 *    (`src/foo/bar.ts`, `lib/x.py`, `README.md`; "Node.js"-style library names are not paths).
 *    "In this file/function" keeps it local when at most one path is named.
 * 4. `spark` rules, the interactive work:
 *    - `inline_completion`: the client sent a prediction; or (after short_tool_loop) a fill-in-the-middle
 *      marker, a short "complete this function…" prompt, or a short code-only prompt;
 *    - `short_tool_loop`: 1 to {@link LONG_RUN_TOOL_RESULTS}-1 tool results since the latest user message;
 *    - `question`: starts with a question word (what/why/how/explain…) or has a line ending with "?",
 *      unless it is a polite request to change code ("can you fix…?");
 *    - `single_file_edit`: a change verb with at most one file path named;
 *    - `default_interactive`: nothing points to deep.
 * 5. `image_input`, applied after the rules above by the model registry (`core/model-registry.ts`),
 *    which knows which models can see: a request that carries an image goes to a model that can
 *    see, the chosen tier's own when it can, else the first configured one that can (its tier
 *    then applies); the reason names the rule the text alone matched.
 *
 * `reason` is one ASCII sentence of at most {@link REASON_MAX_CHARS} characters citing the evidence
 * (the matched words, the path count, the tool-result count): it goes into an HTTP header and into the
 * response metadata.
 *
 * Cost: a few microseconds for a typical request (a short prompt after Codex's instructions); the
 * worst case is bounded by the scan limits (tens of microseconds for a 2.5 KiB task scan, whatever
 * the conversation size). What the expressions find in a task text is remembered for the last
 * {@link TASK_MEMO_ENTRIES} texts, so the turns of a tool loop (one task, many requests) do not
 * scan it again.
 */
import type { ConversationItem, ToolSpec } from "../engine/types.js";

export type Tier = "spark" | "deep";

/** What the router looks at: the normalized request, before any model is chosen. */
export interface RouteInput {
  /** The full conversation (instructions, history, new input), oldest first. */
  items: readonly ConversationItem[];
  tools: readonly ToolSpec[];
  /** Predicted Outputs text, when the client sent one (a strong sign of an inline edit). */
  prediction?: string;
  maxOutputTokens?: number;
  /** A fill-in-the-middle request (`POST /v1/completions`): always an inline completion. */
  fim?: boolean;
}

export interface RouteDecision {
  tier: Tier;
  /** Short machine-readable rule name ({@link RouteRule}), e.g. `security_sensitive`. */
  rule: string;
  /** One human-readable sentence: why this tier, citing what was seen (e.g. the keyword). */
  reason: string;
}

/** Machine-readable names of the rules, in precedence order. */
export type RouteRule =
  | "security_sensitive"
  | "long_autonomous_run"
  | "multi_file_refactor"
  | "inline_completion"
  | "short_tool_loop"
  | "question"
  | "single_file_edit"
  | "default_interactive"
  | "image_input";

/** Tool results since the latest user message from which a task counts as a long autonomous run. */
export const LONG_RUN_TOOL_RESULTS = 8;
/** Distinct file paths named in a change request from which it counts as multi-file. */
export const MULTI_FILE_PATHS = 3;
/** Items walked back from the end of the conversation, at most, to find the latest user message. */
export const MAX_WALK_ITEMS = 4096;
/** Characters of the task scanned from its start and from its end. */
export const TASK_HEAD_CHARS = 2000;
export const TASK_TAIL_CHARS = 500;
/** Characters of each instruction message, and of all of them together, scanned (only when needed). */
const INSTRUCTION_CHARS = 4000;
const INSTRUCTIONS_TOTAL_CHARS = 12000;
/** Leading items searched for system/developer instructions (they come first). */
const LEADING_INSTRUCTION_ITEMS = 8;
const MAX_PATHS = 32;
const SHORT_PROMPT_CHARS = 1000;
export const REASON_MAX_CHARS = 200;

/** `\b(?:a|b|c)\b` over lower-cased text. Terms are regex sources that start and end with word characters. */
function words(terms: readonly string[], flags = ""): RegExp {
  return new RegExp(String.raw`\b(?:${terms.join("|")})\b`, flags);
}

const STRONG_SECURITY = words([
  // authentication and authorization
  "auth",
  "authn",
  "authz",
  String.raw`authenticat(?:e|es|ed|ing|ion|or|ors)`,
  String.raw`(?:un)?authori[sz](?:e|es|ed|ing|ation|ations|er)`,
  String.raw`log-?ins?`,
  String.raw`sign-?ins?`,
  String.raw`(?:single )?sign-on`,
  "sso",
  "saml",
  "oauth2?",
  "openid",
  "oidc",
  "jwts?",
  "mfa",
  "2fa",
  "totp",
  "two-factor",
  "passwords?",
  "passwd",
  "passphrases?",
  "credentials?",
  String.raw`(?:session|access|refresh|bearer|auth|api|csrf|id|reset|personal access) tokens?`,
  String.raw`session (?:cookies?|hijack\w*|fixation)`,
  "access control",
  "rbac",
  String.raw`permission checks?`,
  // cryptography
  String.raw`crypto(?!\.randomuuid)`,
  String.raw`cryptograph\w*`,
  String.raw`(?:en|de)crypt\w*`,
  "ciphers?",
  "ciphertexts?",
  String.raw`aes(?:-\d+)?`,
  "rsa",
  String.raw`hmac\w*`,
  "bcrypt",
  "scrypt",
  String.raw`argon2\w*`,
  "pbkdf2",
  String.raw`(?:hash(?:es|ed|ing)?|salt(?:s|ed|ing)?) (?:the |a |user |users'? |user's )?passwords?`,
  // transport security
  "m?tls",
  "ssl",
  String.raw`x\.?509`,
  "certificates?",
  String.raw`cert(?:ificate)? pinning`,
  // secrets
  "secrets?",
  String.raw`api[ _-]?keys?`,
  String.raw`(?:private|signing|access|secret|encryption|ssh|master) keys?`,
  // vulnerability work
  String.raw`cve(?:-\d{4}-\d+)?`,
  String.raw`vulnerab\w*`,
  String.raw`exploitab\w*`,
  "exploitation",
  "exploits",
  String.raw`(?:an|the|this|that|working|public|known|remote|poc) exploit`,
  "zero-day",
  "0-day",
  "security",
  "insecure",
  "malicious",
  "backdoors?",
  String.raw`attack (?:vectors?|surface)`,
  String.raw`pentest\w*`,
  String.raw`penetration test\w*`,
  String.raw`threat model\w*`,
  String.raw`(?:sql|nosql|command|shell|code|ldap|xpath|header|template|html|script|os command|prompt|crlf|log) injection`,
  "sqli",
  "xss",
  "cross-site scripting",
  "csrf",
  "xsrf",
  "cross-site request forgery",
  "ssrf",
  "rce",
  "remote code execution",
  String.raw`(?:path|directory) traversal`,
  String.raw`open redirects?`,
  "clickjacking",
  String.raw`buffer overflows?`,
  "use-after-free",
  String.raw`timing attacks?`,
  String.raw`brute[- ]force attacks?`,
  String.raw`(?:un)?saniti[sz]\w*`,
  String.raw`privilege escalation`,
  String.raw`escalat\w* (?:of )?privileges?`,
  String.raw`least privilege`,
  String.raw`sandbox escapes?`,
  String.raw`escap\w* (?:from )?the sandbox`,
]);

/** Ambiguous on their own ("count the tokens", "hash map"); security only in a security context. */
const WEAK_SECURITY = words([
  "tokens?",
  "sessions?",
  "cookies?",
  String.raw`hash(?:es|ed|ing)?(?! ?(?:maps?|tables?|sets?|codes?|joins?|functions?))`,
  String.raw`salt(?:s|ed|ing)?`,
  "permissions?",
  "signatures?",
  "cors",
]);

/** Instructions that make the whole conversation security work (not generic "never leak secrets"). */
const SECURITY_CONTEXT = words([
  String.raw`security (?:review\w*|audit\w*|assessment\w*|engineer\w*|research\w*|team|expert|analys\w*|focus\w*)`,
  "appsec",
  String.raw`penetration test\w*`,
  String.raw`pentest\w*`,
  String.raw`threat model\w*`,
  String.raw`vulnerabilit\w*`,
  "secure coding",
  String.raw`red team\w*`,
]);

const AUTONOMY = words([
  String.raw`keep (?:going|working|iterating|at it)`,
  String.raw`don'?t stop`,
  "do not stop",
  "never stop",
  String.raw`until (?:all |every |the )?(?:of the )?(?:tests?|specs?|checks?|builds?|ci|lint\w*|type ?checks?)(?: \w+){0,3} (?:pass\w*|green|succeed\w*|clean)`,
  String.raw`until (?:it|they|everything|the build|ci) (?:passes|pass|is green|are green|works|compiles|builds|succeeds)`,
  String.raw`(?:fix|repair) (?:all|every|each)(?: of)?(?: the)?(?: remaining)? (?:failing|broken|red|flaky) (?:tests?|specs?|builds?|checks?|jobs?)`,
  String.raw`make (?:all|every)(?: of)?(?: the)? (?:tests?|specs?|checks?) pass`,
  String.raw`(?:whole|entire|full) backlog`,
  String.raw`work (?:your way )?through (?:the |all |every |each )?(?:whole |entire |remaining )?(?:backlog|issues|tickets|todos?|list|tasks|items|failures)`,
  String.raw`(?:resolve|close|fix|address|tackle|implement) (?:all|every|each)(?: of)?(?: the)? (?:open |remaining )?(?:issues|tickets|todos?|todo items)`,
  String.raw`implement the (?:whole|entire|full|complete) (?:feature|spec|plan|project|app|roadmap|milestone)`,
  String.raw`autonomous(?:ly)?`,
  "unattended",
  String.raw`without (?:asking|checking in|stopping|waiting|confirmation|supervision)`,
]);

const REFACTOR_VERB = words([
  String.raw`refactor\w*`,
  String.raw`renam\w*`,
  String.raw`migrat\w*`,
  String.raw`mov(?:e|es|ed|ing)`,
  String.raw`port(?:s|ed|ing)?`,
  String.raw`restructur\w*`,
  String.raw`reorgani[sz]\w*`,
  String.raw`extract\w*`,
  String.raw`split\w*`,
  String.raw`consolidat\w*`,
  String.raw`replac\w*`,
  String.raw`convert\w*`,
  String.raw`upgrad\w*`,
  String.raw`rewrit\w*`,
  "rewrote",
  String.raw`dedup\w*`,
  String.raw`modulari[sz]\w*`,
  String.raw`switch(?:es|ed|ing)? (?:from|to|over)`,
  String.raw`(?:change|update) (?:all|every)`,
]);

/** Scope that spans files by itself: any change verb with it is multi-file work. */
const WIDE_SCOPE = words([
  String.raw`across (?:the |our |all |multiple |several |many )?(?:whole |entire )?(?:code ?base|repo(?:sitory)?|project|app|monorepo|packages|services|modules|files|components|crates|workspace)`,
  String.raw`(?:all|every|each)(?: of)?(?: the| our)? (?:source |test |\.?[a-z]{1,4} )?(?:files?|modules?|packages?|components?|services?|crates?)`,
  String.raw`throughout (?:the )?(?:code ?base|repo(?:sitory)?|project|app|source|tree|monorepo)`,
  String.raw`(?:project|repo|codebase|code-base|workspace|monorepo)-wide`,
  "everywhere",
  String.raw`(?:whole|entire) (?:code ?base|repo(?:sitory)?|project|app|monorepo)`,
  String.raw`(?:multiple|several|many|\d{2,}|[3-9]) (?:files|modules|packages|components|services)`,
]);

/** "All call sites", "every test": multi-file with a refactoring verb, unless one file path pins it. */
const ITEM_SCOPE = words([
  String.raw`(?:all|every|each)(?: of)?(?: the| our)? (?:call ?sites?|callers?|usages?|uses|references|endpoints?|routes?|handlers?|controllers?|imports?|tests?|specs?)`,
]);

const LOCAL_SCOPE = words([
  String.raw`(?:in|within|inside) (?:this|the current|the same|that|a single|one) (?:file|function|method|class|component|module|block|test)`,
]);

const CHANGE_VERB = words([
  String.raw`fix(?:es|ed|ing)?`,
  String.raw`add(?:s|ed|ing)?`,
  String.raw`chang\w*`,
  String.raw`updat\w*`,
  String.raw`modif\w*`,
  String.raw`edit\w*`,
  String.raw`implement\w*`,
  String.raw`remov\w*`,
  String.raw`delet\w*`,
  String.raw`refactor\w*`,
  String.raw`renam\w*`,
  String.raw`migrat\w*`,
  String.raw`mov(?:e|es|ed|ing)`,
  String.raw`replac\w*`,
  String.raw`convert\w*`,
  String.raw`extract\w*`,
  String.raw`rewrit\w*`,
  String.raw`inline`,
  String.raw`optimi[sz]\w*`,
  String.raw`simplif\w*`,
  String.raw`clean(?:s|ed|ing)? up`,
  String.raw`tweak\w*`,
  String.raw`adjust\w*`,
  String.raw`handl(?:e|es|ing)`,
  String.raw`creat(?:e|es|ing)`,
  String.raw`writ(?:e|es|ing)`,
  String.raw`make`,
  String.raw`use`,
  String.raw`set up`,
  String.raw`support`,
  String.raw`bump\w*`,
  String.raw`patch\w*`,
  String.raw`apply`,
  String.raw`wire up`,
  String.raw`hook up`,
  String.raw`format`,
  String.raw`debug`,
]);

const QUESTION_START =
  /^(?:what|what's|whats|why|how|when|where|which|who|whose|is|are|was|were|does|do|did|can i|should i|explain|describe|tell me|help me understand|walk me through|compare|difference between)\b/;
const QUESTION_LINE_END = /\?[ \t]*(?:\n|$)/;
const POLITE_REQUEST = /^(?:please |pls )?(?:can|could|would|will) you (?:please )?(\w+)/;

const FIM_MARKER =
  /<\|fim_(?:prefix|suffix|middle)\|>|<fim_(?:prefix|suffix|middle)>|<suf>[\s\S]*<mid>|<\|user_cursor_is_here\|>|<\|cursor\|>|<cursor>|\{\{cursor\}\}|\[cursor\]/;
const COMPLETION_ASK =
  /^autocomplete\b|\b(?:complete|finish|continue|autocomplete|fill in)(?: this| the following| the| my)? (?:code|function|line|snippet|method|class|implementation|statement|loop|expression)\b/;
const PROSE_RUN = /\b[a-z]+(?: [a-z]+){3,}\b/;
const CODE_SYMBOLS = /[{}()[\];=<>]/g;

/** File extensions that make a token a file path (`src/foo/bar.ts`, `lib/x.py`, `README.md`). */
const PATH_EXTENSIONS = new Set(
  (
    "ts tsx mts cts js jsx mjs cjs py pyi rb go rs java kt kts scala c h cc cpp cxx hpp hh cs swift php lua " +
    "dart ex exs erl hs clj jl sh bash zsh ps1 sql md mdx rst txt json jsonc yaml yml toml ini cfg conf xml " +
    "html htm css scss sass less vue svelte astro graphql gql proto tf gradle lock env"
  ).split(" "),
);
/** Library names that look like files ("Node.js"); a bare one (no directory) is not a path. */
const LIBRARY_NAME =
  /^(?:node|next|nuxt|vue|express|three|chart|d3|ember|backbone|angular|moment|p5|react|alpine|solid|nest|knockout|handlebars|highlight|video|anime|pixi|babylon|electron|mongoose|sequelize|socket|deno|bun)\.js$/;

/** Client context sent as a user message (Codex): instructions, not the task. */
const CONTEXT_MESSAGE = /^\s*(?:<(?:[a-z]+_[a-z_]+|instructions)\b|# agents\.md instructions)/i;

function isInstruction(item: ConversationItem): boolean {
  return item.type === "message" && (item.role === "system" || item.role === "developer");
}

function isContext(text: string): boolean {
  return CONTEXT_MESSAGE.test(text.slice(0, 64));
}

/** The head and tail of a text, at most TASK_HEAD_CHARS + TASK_TAIL_CHARS characters. */
function clip(text: string): string {
  if (text.length <= TASK_HEAD_CHARS + TASK_TAIL_CHARS) return text;
  return `${text.slice(0, TASK_HEAD_CHARS)}\n${text.slice(text.length - TASK_TAIL_CHARS)}`;
}

/** Evidence for a reason: single-spaced printable ASCII without quotes, at most 48 characters. */
function cite(text: string): string {
  const clean = text
    .replace(/\s+/g, " ")
    .replace(/[^\x20-\x7e]|"/g, "")
    .trim();
  return clean.length <= 48 ? clean : `${clean.slice(0, 45)}...`;
}

function decide(tier: Tier, rule: RouteRule, reason: string): RouteDecision {
  let ascii = reason.replace(/[^\x20-\x7e]/g, "?");
  if (ascii.length > REASON_MAX_CHARS) ascii = `${ascii.slice(0, REASON_MAX_CHARS - 4)}...`;
  return { tier, rule, reason: ascii };
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

/** `[a-z0-9_]` (the text is lower-cased). */
function isWordChar(code: number): boolean {
  return (code >= 97 && code <= 122) || (code >= 48 && code <= 57) || code === 95;
}

/** `[\w@./-]`: characters of a path token. */
function isPathChar(code: number): boolean {
  return isWordChar(code) || code === 64 || code === 46 || code === 47 || code === 45;
}

/**
 * Distinct file paths named in the (lower-cased) text, at most MAX_PATHS: tokens of path characters
 * ending in `.<known extension>`. A scan from dot to dot (`indexOf`), linear and much cheaper than a
 * regular expression over the whole text.
 */
function filePaths(text: string): string[] {
  const found = new Set<string>();
  for (let dot = text.indexOf("."); dot !== -1 && found.size < MAX_PATHS; dot = text.indexOf(".", dot + 1)) {
    let end = dot + 1;
    while (end < text.length && isWordChar(text.charCodeAt(end))) end++;
    if (end === dot + 1 || end - dot > 7 || !PATH_EXTENSIONS.has(text.slice(dot + 1, end))) continue;
    const next = text.charCodeAt(end);
    if (next === 45 || next === 64 || next === 47 || (next === 46 && isWordChar(text.charCodeAt(end + 1))))
      continue;
    const before = text.charCodeAt(dot - 1);
    if (!(isWordChar(before) || before === 45)) continue;
    let start = dot - 1;
    while (start > 0 && isPathChar(text.charCodeAt(start - 1))) start--;
    const path = text.slice(start, end).replace(/^\.\//, "");
    if (!path.includes("/") && LIBRARY_NAME.test(path)) continue;
    found.add(path);
  }
  return [...found];
}

function listPaths(paths: readonly string[]): string {
  const shown = paths.slice(0, 3).map(cite).join(", ");
  return paths.length > 3 ? `${shown}, ...` : shown;
}

/** The instruction text, capped: leading system/developer messages plus those met near the task. */
function instructionText(items: readonly ConversationItem[], nearTask: readonly string[]): string {
  const parts: string[] = [];
  let total = 0;
  const add = (text: string): void => {
    if (total >= INSTRUCTIONS_TOTAL_CHARS) return;
    const part = text.slice(0, Math.min(INSTRUCTION_CHARS, INSTRUCTIONS_TOTAL_CHARS - total));
    parts.push(part);
    total += part.length;
  };
  for (const text of nearTask) add(text);
  for (let i = 0; i < Math.min(items.length, LEADING_INSTRUCTION_ITEMS); i++) {
    const item = items[i];
    if (item !== undefined && item.type === "message" && isInstruction(item)) add(item.text);
  }
  return parts.join("\n").toLowerCase();
}

/** Distinct task texts whose regular-expression results are remembered (see `taskText`). */
const TASK_MEMO_ENTRIES = 256;
const taskMemo = new Map<string, TaskText>();
/** Distinct situations (tool-result counts…) remembered per task text. */
const MAX_DECISIONS_PER_TASK = 16;

/**
 * What the rules read from the task text, each computed on first use and remembered with the text:
 * a coding agent's tool loop routes the same task (its latest user message) on every turn, and the
 * keyword expressions were most of what routing cost per request. Results depend on the text only.
 */
class TaskText {
  readonly trimmed: string;
  readonly #matches = new Map<RegExp, RegExpExecArray | null>();
  readonly #trimmedMatches = new Map<RegExp, RegExpExecArray | null>();
  #paths: string[] | undefined;
  #codeOnly: boolean | undefined;
  /** Decisions made for this text, by the few other facts they read (see `routeRequest`). */
  readonly decisions = new Map<string, RouteDecision>();

  constructor(readonly text: string) {
    this.trimmed = text.trim();
  }

  /** `pattern.exec(text)`, remembered (patterns here have no `g` flag: exec keeps no state). */
  exec(pattern: RegExp): RegExpExecArray | null {
    let match = this.#matches.get(pattern);
    if (match === undefined) this.#matches.set(pattern, (match = pattern.exec(this.text)));
    return match;
  }

  /** `pattern.exec(trimmed)`, remembered. */
  execTrimmed(pattern: RegExp): RegExpExecArray | null {
    let match = this.#trimmedMatches.get(pattern);
    if (match === undefined) this.#trimmedMatches.set(pattern, (match = pattern.exec(this.trimmed)));
    return match;
  }

  paths(): string[] {
    return (this.#paths ??= filePaths(this.text));
  }

  codeOnly(): boolean {
    return (this.#codeOnly ??= looksLikeCodeOnly(this.trimmed));
  }
}

/** The remembered analysis of `text`, most recently used last. */
function taskText(text: string): TaskText {
  let task = taskMemo.get(text);
  if (task) taskMemo.delete(text);
  else {
    task = new TaskText(text);
    if (taskMemo.size >= TASK_MEMO_ENTRIES) taskMemo.delete(taskMemo.keys().next().value!);
  }
  taskMemo.set(text, task);
  return task;
}

/** Chooses the tier for a `model: "auto"` request. Deterministic; bounded work on any input. */
export function routeRequest(input: RouteInput): RouteDecision {
  const { items } = input;
  if (input.fim === true) {
    return decide("spark", "inline_completion", "Inline completion: a fill-in-the-middle request.");
  }

  // Walk back from the end: count the current task's tool results, find its user message(s).
  let toolResults = 0;
  let walkCapped = false;
  const context: string[] = [];
  const taskParts: string[] = [];
  let i = items.length - 1;
  for (let walked = 0; i >= 0; i--, walked++) {
    if (walked >= MAX_WALK_ITEMS) {
      walkCapped = true;
      break;
    }
    const item = items[i];
    if (item === undefined) continue;
    if (item.type === "tool_result") toolResults++;
    else if (item.type !== "message" || item.role === "assistant") continue;
    else if (item.role !== "user" || isContext(item.text)) context.push(item.text);
    else {
      taskParts.push(clip(item.text));
      break;
    }
  }
  // User messages directly before it belong to the same turn (within the scan budget).
  let taskChars = taskParts[0]?.length ?? 0;
  for (let j = i - 1; j >= 0 && taskParts.length > 0 && taskChars < TASK_HEAD_CHARS; j--) {
    const item = items[j];
    if (item === undefined || item.type !== "message" || item.role !== "user") break;
    if (isContext(item.text)) context.push(item.text);
    else {
      const part = clip(item.text);
      taskParts.push(part);
      taskChars += part.length;
    }
  }
  const task = taskText(clip(taskParts.reverse().join("\n")).toLowerCase());
  const trimmed = task.trimmed;
  // Beyond the text, a decision reads only these facts, unless a weak security word makes the
  // instructions count: then it is made afresh. Otherwise the task's earlier decision stands.
  const situation =
    task.exec(WEAK_SECURITY) === null
      ? `${toolResults}|${walkCapped ? 1 : 0}|${input.prediction ? 1 : 0}|${taskParts.length === 0 ? 0 : 1}`
      : undefined;
  const known = situation === undefined ? undefined : task.decisions.get(situation);
  if (known) return known;
  const decision = ((): RouteDecision => {
    // 1. Security-sensitive work.
    const strong = task.exec(STRONG_SECURITY);
    if (strong !== null) {
      return decide(
        "deep",
        "security_sensitive",
        `Security-sensitive task: the request mentions "${cite(strong[0])}".`,
      );
    }
    const weak = task.exec(WEAK_SECURITY);
    if (weak !== null) {
      const setting = SECURITY_CONTEXT.exec(instructionText(items, context));
      if (setting !== null) {
        return decide(
          "deep",
          "security_sensitive",
          `Security-sensitive task: the request mentions "${cite(weak[0])}" and the instructions set a security context ("${cite(setting[0])}").`,
        );
      }
    }

    // 2. Long autonomous run.
    if (toolResults >= LONG_RUN_TOOL_RESULTS) {
      const count = walkCapped ? `at least ${toolResults}` : String(toolResults);
      return decide(
        "deep",
        "long_autonomous_run",
        `Long autonomous run: ${count} tool results since the last user message (threshold ${LONG_RUN_TOOL_RESULTS}).`,
      );
    }
    const autonomy = task.exec(AUTONOMY);
    if (autonomy !== null) {
      return decide(
        "deep",
        "long_autonomous_run",
        `Long autonomous run: the request asks to "${cite(autonomy[0])}".`,
      );
    }

    // 3. Multi-file refactor.
    const refactor = task.exec(REFACTOR_VERB);
    const change = refactor ?? task.exec(CHANGE_VERB);
    const paths = change !== null ? task.paths() : [];
    if (change !== null && !(paths.length <= 1 && task.exec(LOCAL_SCOPE) !== null)) {
      const scope =
        task.exec(WIDE_SCOPE) ?? (refactor !== null && paths.length !== 1 ? task.exec(ITEM_SCOPE) : null);
      if (scope !== null) {
        return decide(
          "deep",
          "multi_file_refactor",
          `Multi-file refactor: "${cite(change[0])}" with multi-file scope "${cite(scope[0])}".`,
        );
      }
    }
    if (change !== null && paths.length >= MULTI_FILE_PATHS) {
      return decide(
        "deep",
        "multi_file_refactor",
        `Multi-file change: "${cite(change[0])}" over ${paths.length} distinct file paths (${listPaths(paths)}).`,
      );
    }

    // 4. Interactive work: spark.
    if (input.prediction !== undefined && input.prediction.length > 0) {
      return decide("spark", "inline_completion", "Inline completion: the client sent a predicted output.");
    }
    if (toolResults > 0) {
      return decide(
        "spark",
        "short_tool_loop",
        `Short tool loop: ${plural(toolResults, "tool result")} since the last user message (below ${LONG_RUN_TOOL_RESULTS}).`,
      );
    }
    if (taskParts.length === 0) {
      return decide(
        "spark",
        "default_interactive",
        walkCapped
          ? `No user message in the last ${MAX_WALK_ITEMS} items and no deep signal; interactive default.`
          : "No user message and no deep signal; interactive default.",
      );
    }
    const fim = task.exec(FIM_MARKER);
    if (fim !== null) {
      return decide(
        "spark",
        "inline_completion",
        `Inline completion: fill-in-the-middle marker "${cite(fim[0])}".`,
      );
    }
    if (trimmed.length <= SHORT_PROMPT_CHARS) {
      const ask = task.execTrimmed(COMPLETION_ASK);
      if (ask !== null) {
        return decide(
          "spark",
          "inline_completion",
          `Inline completion: short prompt asking to "${cite(ask[0])}" (${trimmed.length} chars).`,
        );
      }
      if (task.codeOnly()) {
        return decide(
          "spark",
          "inline_completion",
          `Inline completion: short code-only prompt (${trimmed.length} chars) with no instructions.`,
        );
      }
    }
    const polite = task.execTrimmed(POLITE_REQUEST);
    const politeChange = polite?.[1] !== undefined && CHANGE_VERB.test(polite[1]);
    if (!politeChange) {
      const opener = task.execTrimmed(QUESTION_START);
      if (opener !== null) {
        return decide(
          "spark",
          "question",
          `Question: the request starts with "${cite(opener[0])}" and asks no deep work.`,
        );
      }
      if (task.exec(QUESTION_LINE_END) !== null) {
        return decide("spark", "question", `Question: the request asks a question ("?") and no deep work.`);
      }
    }
    if (change !== null && paths.length <= 1) {
      const where = paths.length === 1 ? `in ${cite(paths[0] ?? "")}` : "with no other file named";
      return decide("spark", "single_file_edit", `Single-file edit: "${cite(change[0])}" ${where}.`);
    }
    if (change !== null) {
      return decide(
        "spark",
        "default_interactive",
        `Small edit: "${cite(change[0])}" over ${paths.length} file paths (below ${MULTI_FILE_PATHS}); no deep signal.`,
      );
    }
    return decide(
      "spark",
      "default_interactive",
      "No deep signal (security, long run, multi-file refactor) in the request; interactive default.",
    );
  })();
  if (situation !== undefined && task.decisions.size < MAX_DECISIONS_PER_TASK)
    task.decisions.set(situation, decision);
  return decision;
}

/** A short prompt that is code and nothing else (no sentence of prose around it). */
function looksLikeCodeOnly(text: string): boolean {
  if (CHANGE_VERB.exec(text)?.index === 0) return false; // "use crypto.randomUUID() for ids" is an ask
  const body = text.startsWith("```") ? text.replace(/^```[\w-]*\n?|```$/g, "") : text;
  if (body.includes("```") || PROSE_RUN.test(body.replace(/(?:\/\/|#).*$/gm, ""))) return false;
  const symbols = body.match(CODE_SYMBOLS)?.length ?? 0;
  return symbols >= 2 && symbols / Math.max(body.length, 1) >= 0.04;
}
