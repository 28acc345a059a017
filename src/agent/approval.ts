/**
 * When the agent may run a command or apply a patch without asking the user (mirrors Codex CLI).
 *
 * Modes:
 * - `never`: never asks. Commands run in the sandbox when there is one; a model request to run
 *   outside it (escalation) is ignored and the command runs sandboxed anyway. Without a sandbox
 *   commands run unconfined: the user chose not to be asked.
 * - `on-request` (default): commands run in the sandbox without asking. It asks when the model
 *   requests escalation, and, when there is no sandbox, for every command that is not known-safe.
 * - `untrusted`: only known-safe commands (read-only, see `isKnownSafeCommand`) run without asking;
 *   everything else asks, as does any escalation request.
 * - Non-interactive runs (`spark exec`) cannot ask: every "ask" becomes "refuse", with a reason that
 *   tells the model the command needs the user's approval and the user to pass `--approval never`.
 *
 * "run" means: run with the default placement (in the sandbox when there is one). After the user
 * approves an "ask" the caller runs the command as the model requested it (outside the sandbox when
 * escalation was requested).
 *
 * Patches (file edits already confined to the workspace by the file tools) run in `never` and
 * `on-request` and ask in `untrusted`.
 */

export type ApprovalMode = "never" | "on-request" | "untrusted";

export type ApprovalDecision =
  { action: "run" } | { action: "ask"; reason: string } | { action: "refuse"; reason: string };

export interface CommandContext {
  /** A sandbox is available and will confine the command. */
  sandboxed: boolean;
  /** The model asked to run the command outside the sandbox. */
  escalationRequested: boolean;
  /** A user is there to answer an approval prompt. */
  interactive: boolean;
}

const SHELLS = new Set(["bash", "sh"]);
const SHELL_FLAGS = new Set(["-c", "-lc"]);
const MAX_SCRIPT_DEPTH = 4;

const ANY_ARGS = new Set([
  "ls",
  "cat",
  "head",
  "tail",
  "wc",
  "pwd",
  "echo",
  "grep",
  "which",
  "stat",
  "true",
  "nl",
  "cut",
]);

const FIND_UNSAFE = new Set([
  "-exec",
  "-execdir",
  "-ok",
  "-okdir",
  "-delete",
  "-fls",
  "-fprint",
  "-fprint0",
  "-fprintf",
]);

const GIT_READ_ONLY = new Set(["status", "diff", "log", "show"]);
const GIT_BRANCH_LISTING_FLAGS = new Set([
  "-a",
  "--all",
  "-r",
  "--remotes",
  "-v",
  "-vv",
  "--verbose",
  "--show-current",
  "--no-color",
  "--color",
  "--list",
  "-l",
]);

function isShortCluster(arg: string): boolean {
  return arg.length > 1 && arg.startsWith("-") && !arg.startsWith("--");
}

function hasLongOption(args: string[], names: string[]): boolean {
  return args.some((arg) => names.some((name) => arg === name || arg.startsWith(`${name}=`)));
}

function hasShortOption(args: string[], letter: string): boolean {
  return args.some((arg) => isShortCluster(arg) && arg.slice(1).includes(letter));
}

function isSafeGit(args: string[]): boolean {
  const [sub, ...rest] = args;
  if (sub === undefined) return false;
  if (GIT_READ_ONLY.has(sub)) return !hasLongOption(rest, ["--output", "--ext-diff"]);
  if (sub !== "branch") return false;
  const listing = rest.includes("--list") || rest.includes("-l");
  return rest.every((arg) => GIT_BRANCH_LISTING_FLAGS.has(arg) || (listing && !arg.startsWith("-")));
}

function isSafeSed(args: string[]): boolean {
  const [flag, script, ...files] = args;
  return (
    flag === "-n" &&
    script !== undefined &&
    /^\d+(,\d+)?p$/.test(script) &&
    files.every((file) => !file.startsWith("-"))
  );
}

function isSafeArgv(argv: string[], depth: number): boolean {
  const [program, ...args] = argv;
  if (program === undefined) return false;
  if (SHELLS.has(program)) {
    const [flag, script] = args;
    return (
      args.length === 2 &&
      flag !== undefined &&
      SHELL_FLAGS.has(flag) &&
      script !== undefined &&
      isSafeScript(script, depth + 1)
    );
  }
  if (ANY_ARGS.has(program)) return true;
  switch (program) {
    case "rg":
      return !hasLongOption(args, ["--pre", "--hostname-bin", "--search-zip"]) && !hasShortOption(args, "z");
    case "find":
      return !args.some((arg) => FIND_UNSAFE.has(arg));
    case "sed":
      return isSafeSed(args);
    case "git":
      return isSafeGit(args);
    case "file":
      return !hasLongOption(args, ["--compile"]) && !hasShortOption(args, "C");
    case "tree":
      return !hasShortOption(args, "o") && !hasShortOption(args, "R");
    case "sort":
      return !hasLongOption(args, ["--output", "--compress-program"]) && !hasShortOption(args, "o");
    case "uniq":
      return args.filter((arg) => !arg.startsWith("-")).length <= 1;
    default:
      return false;
  }
}

type Token = { kind: "word"; value: string } | { kind: "op"; value: "&&" | "||" | ";" | "|" };

/** Characters that, unquoted, mean something other than a plain word: all make a script unsafe. */
const UNQUOTED_SPECIAL = new Set(["<", ">", "(", ")", "$", "`", "*", "?", "[", "{", "#", "!"]);

/**
 * Splits a shell script into plain words and the operators `&&`, `||`, `;` and `|`, honouring
 * quotes and backslashes. Anything else (redirections, expansions, globs, subshells, background
 * jobs, comments) returns undefined: not a script we can judge.
 */
function tokenize(script: string): Token[] | undefined {
  const tokens: Token[] = [];
  let word = "";
  let inWord = false;
  const endWord = () => {
    if (inWord) tokens.push({ kind: "word", value: word });
    word = "";
    inWord = false;
  };
  for (let i = 0; i < script.length; i++) {
    const c = script[i]!;
    const next = script[i + 1];
    if (c === " " || c === "\t") {
      endWord();
    } else if (c === "\n") {
      endWord();
      tokens.push({ kind: "op", value: ";" });
    } else if (c === "'") {
      const close = script.indexOf("'", i + 1);
      if (close < 0) return undefined;
      word += script.slice(i + 1, close);
      inWord = true;
      i = close;
    } else if (c === '"') {
      inWord = true;
      let j = i + 1;
      for (; j < script.length && script[j] !== '"'; j++) {
        const d = script[j]!;
        if (d === "$" || d === "`") return undefined;
        if (d === "\\") {
          const escaped = script[j + 1];
          if (escaped === undefined) return undefined;
          if ('$`"\\'.includes(escaped)) {
            word += escaped;
            j++;
          } else if (escaped === "\n") {
            j++;
          } else {
            word += d;
          }
        } else {
          word += d;
        }
      }
      if (j >= script.length) return undefined;
      i = j;
    } else if (c === "\\") {
      if (next === undefined) return undefined;
      if (next !== "\n") {
        word += next;
        inWord = true;
      }
      i++;
    } else if (c === "&") {
      if (next !== "&") return undefined;
      endWord();
      tokens.push({ kind: "op", value: "&&" });
      i++;
    } else if (c === "|") {
      if (next === "&") return undefined;
      endWord();
      tokens.push({ kind: "op", value: next === "|" ? "||" : "|" });
      if (next === "|") i++;
    } else if (c === ";") {
      if (next === ";") return undefined;
      endWord();
      tokens.push({ kind: "op", value: ";" });
    } else if (UNQUOTED_SPECIAL.has(c)) {
      return undefined;
    } else {
      word += c;
      inWord = true;
    }
  }
  endWord();
  return tokens;
}

function isSafeScript(script: string, depth: number): boolean {
  if (depth > MAX_SCRIPT_DEPTH) return false;
  const tokens = tokenize(script);
  if (tokens === undefined) return false;
  while (
    tokens.length > 0 &&
    tokens[tokens.length - 1]!.kind === "op" &&
    tokens[tokens.length - 1]!.value === ";"
  ) {
    tokens.pop();
  }
  if (tokens.length === 0) return false;
  let command: string[] = [];
  for (const token of tokens) {
    if (token.kind === "word") {
      command.push(token.value);
      continue;
    }
    if (command.length === 0 || !isSafeArgv(command, depth)) return false;
    command = [];
  }
  return command.length > 0 && isSafeArgv(command, depth);
}

/**
 * Read-only commands that may run without asking in `untrusted` mode. `bash -lc`/`bash -c`/`sh -c`
 * scripts qualify when they are plain words joined by `&&`, `||`, `;` and `|` and every command in
 * them qualifies. When in doubt: not safe.
 */
export function isKnownSafeCommand(argv: string[]): boolean {
  return isSafeArgv(argv, 0);
}

function needsApproval(reason: string, interactive: boolean): ApprovalDecision {
  if (interactive) return { action: "ask", reason };
  return {
    action: "refuse",
    reason:
      `${reason}, so it needs the user's approval, which is not possible in non-interactive mode ` +
      "(spark exec). Do not retry it; find another way or tell the user. The user can allow such " +
      "commands with `--approval never`.",
  };
}

export function decideCommand(mode: ApprovalMode, argv: string[], context: CommandContext): ApprovalDecision {
  if (mode === "never") return { action: "run" };
  const safe = isKnownSafeCommand(argv);
  if (context.escalationRequested) {
    return needsApproval("The command asks to run outside the sandbox", context.interactive);
  }
  if (mode === "untrusted") {
    if (safe) return { action: "run" };
    return needsApproval(
      "In untrusted mode only known read-only commands run without approval",
      context.interactive,
    );
  }
  if (context.sandboxed || safe) return { action: "run" };
  return needsApproval(
    "There is no sandbox and the command is not known to be read-only",
    context.interactive,
  );
}

export function decidePatch(mode: ApprovalMode, context: { interactive: boolean }): ApprovalDecision {
  if (mode !== "untrusted") return { action: "run" };
  return needsApproval("In untrusted mode file edits need approval", context.interactive);
}
