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
 * `on-request` and ask in `untrusted`. A patch that writes a protected path (`.git`, agent and editor
 * settings: see protected-paths.ts), whose contents would run outside the sandbox later, always
 * needs the user's yes: it asks in `on-request` and `untrusted`, and is refused in `never` (which
 * never asks) and in non-interactive runs, whatever the mode.
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

/*
 * Known-safe commands are decided from what a program can do, not from how its dangerous options are
 * spelled: GNU getopt accepts any unambiguous abbreviation of a long option (`sort --outp=F` is
 * `--output=F`), short options cluster (`-uo F`) and take attached values (`-oF`), and an operand can
 * be an output (`uniq IN OUT`). So:
 *
 * - ANY_ARGS holds programs none of whose options writes a file, runs another program or talks to
 *   anything but the terminal (checked against their GNU manuals): any arguments are fine.
 * - OPTION_SPECS holds programs that are read-only only with some options: every option must be one
 *   known to be read-only, spelled exactly (an abbreviation or an unknown option is not safe), values
 *   are skipped where the program takes them, and operands are counted where one can be an output.
 * - `find` and `sed -n Np` have their own grammars below.
 * - git is never known-safe: even `git status` runs programs named in the repository's config
 *   (core.fsmonitor, diff drivers and textconv, pagers, gpg for signed commits), and that config is
 *   whatever the workspace holds. Codex made the same call.
 * - When in doubt: not safe, so the user is asked.
 */
const ANY_ARGS = new Set([
  "basename",
  "cat",
  "cd",
  "cut",
  "dirname",
  "du",
  "echo",
  "false",
  "grep",
  "head",
  "id",
  "ls",
  "nl",
  "pwd",
  "readlink",
  "realpath",
  "rev",
  "seq",
  "stat",
  "tac",
  "tail",
  "tr",
  "true",
  "uname",
  "wc",
  "which",
  "whoami",
]);

interface OptionSpec {
  /** Short options without a value. */
  flags: string;
  /** Short options that take a value (attached, `-k2`, or the next word, `-k 2`). */
  valued?: string;
  /**
   * Whether a valued short option may be followed by more letters of its cluster as its value
   * (getopt) or must end its cluster and take the next word (tree's own parser: `-Lo X Y` is `-L X
   * -o Y` there, so a valued letter inside a cluster is refused).
   */
  attachedValues?: boolean;
  /** Long options without a value, exact. */
  long?: readonly string[];
  /** Long options that take a value (`--name=V` or `--name V`), exact. */
  longValued?: readonly string[];
  /** Long options whose value is optional: only `--name` or `--name=V`. */
  longOptional?: readonly string[];
  /** The most operands allowed, where an extra operand is an output file. */
  maxOperands?: number;
}

const OPTION_SPECS: Record<string, OptionSpec> = {
  // Not -o/--output (writes), --compress-program (runs a program), -T/--temporary-directory (writes).
  sort: {
    flags: "bdfgiMhnRrVcCmsuz",
    valued: "ktS",
    long: [
      "--ignore-leading-blanks",
      "--dictionary-order",
      "--ignore-case",
      "--general-numeric-sort",
      "--ignore-nonprinting",
      "--month-sort",
      "--human-numeric-sort",
      "--numeric-sort",
      "--random-sort",
      "--reverse",
      "--version-sort",
      "--merge",
      "--stable",
      "--unique",
      "--zero-terminated",
      "--debug",
      "--help",
      "--version",
    ],
    longValued: [
      "--key",
      "--field-separator",
      "--buffer-size",
      "--parallel",
      "--sort",
      "--random-source",
      "--files0-from",
    ],
    longOptional: ["--check"],
  },
  // `uniq [OPTION]... [INPUT [OUTPUT]]`: a second operand (even after `-` for stdin) is truncated.
  uniq: {
    flags: "cdDiuz",
    valued: "fsw",
    long: ["--count", "--repeated", "--ignore-case", "--unique", "--zero-terminated", "--help", "--version"],
    longValued: ["--skip-fields", "--skip-chars", "--check-chars"],
    longOptional: ["--all-repeated", "--group"],
    maxOperands: 1,
  },
  // Not -C/--compile (writes magic.mgc), -z/-Z (runs decompressors), -S (turns off file's own
  // seccomp sandbox), -p (writes access times back).
  file: {
    flags: "bcdEhikLlNnrsv0",
    valued: "eFfmP",
    long: [
      "--brief",
      "--checking-printout",
      "--debug",
      "--no-dereference",
      "--dereference",
      "--mime",
      "--mime-type",
      "--mime-encoding",
      "--keep-going",
      "--list",
      "--no-pad",
      "--no-buffer",
      "--raw",
      "--special-files",
      "--apple",
      "--extension",
      "--print0",
      "--help",
      "--version",
    ],
    longValued: [
      "--exclude",
      "--exclude-quiet",
      "--separator",
      "--files-from",
      "--magic-file",
      "--parameter",
    ],
  },
  // Not -o (writes its output to a file), -R and -H (with -R, writes 00Tree.html into every directory),
  // --fromfile.
  tree: {
    flags: "adlfxiqNQpugshDFvtcUrCnASJX",
    valued: "LPI",
    attachedValues: false,
    long: [
      "--dirsfirst",
      "--noreport",
      "--inodes",
      "--device",
      "--si",
      "--du",
      "--prune",
      "--matchdirs",
      "--gitignore",
      "--ignore-case",
      "--metafirst",
      "--nolinks",
      "--help",
      "--version",
    ],
    longValued: ["--charset", "--filelimit", "--timefmt", "--sort"],
  },
  // Not --pre/--pre-glob and -z/--search-zip (run other programs on the files) or --hostname-bin.
  rg: {
    flags: "abcFHhIiLlNnopqsSUuVvwx0.",
    valued: "ABCdEefgjMmrTt",
    long: [
      "--after-context",
      "--auto-hybrid-regex",
      "--binary",
      "--block-buffered",
      "--byte-offset",
      "--case-sensitive",
      "--column",
      "--count",
      "--count-matches",
      "--crlf",
      "--debug",
      "--files",
      "--files-with-matches",
      "--files-without-match",
      "--fixed-strings",
      "--follow",
      "--glob-case-insensitive",
      "--heading",
      "--help",
      "--hidden",
      "--ignore-case",
      "--include-zero",
      "--invert-match",
      "--json",
      "--line-buffered",
      "--line-number",
      "--line-regexp",
      "--max-columns-preview",
      "--mmap",
      "--multiline",
      "--multiline-dotall",
      "--no-column",
      "--no-config",
      "--no-filename",
      "--no-heading",
      "--no-hidden",
      "--no-ignore",
      "--no-ignore-dot",
      "--no-ignore-exclude",
      "--no-ignore-files",
      "--no-ignore-global",
      "--no-ignore-parent",
      "--no-ignore-vcs",
      "--no-line-number",
      "--no-messages",
      "--no-mmap",
      "--no-require-git",
      "--no-unicode",
      "--null",
      "--null-data",
      "--one-file-system",
      "--only-matching",
      "--passthru",
      "--pcre2",
      "--pretty",
      "--quiet",
      "--smart-case",
      "--sort-files",
      "--stats",
      "--text",
      "--trim",
      "--type-list",
      "--unrestricted",
      "--version",
      "--vimgrep",
      "--with-filename",
      "--word-regexp",
    ],
    longValued: [
      "--after-context",
      "--before-context",
      "--color",
      "--colors",
      "--context",
      "--context-separator",
      "--dfa-size-limit",
      "--encoding",
      "--engine",
      "--field-context-separator",
      "--field-match-separator",
      "--file",
      "--glob",
      "--iglob",
      "--ignore-file",
      "--max-columns",
      "--max-count",
      "--max-depth",
      "--max-filesize",
      "--path-separator",
      "--regex-size-limit",
      "--regexp",
      "--replace",
      "--sort",
      "--sortr",
      "--threads",
      "--type",
      "--type-add",
      "--type-clear",
      "--type-not",
    ],
  },
};

/** Whether `args` are all options of `spec` (exactly spelled) and operands within its limit. */
function fitsSpec(args: readonly string[], spec: OptionSpec): boolean {
  let operands = 0;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    if (arg === "--") {
      operands += args.length - i - 1;
      break;
    }
    if (arg.startsWith("--")) {
      const eq = arg.indexOf("=");
      const name = eq < 0 ? arg : arg.slice(0, eq);
      if (spec.longValued?.includes(name)) {
        if (eq < 0) i++;
      } else if (spec.longOptional?.includes(name)) {
        // `--name` or `--name=V`; the next word is never its value.
      } else if (!(eq < 0 && spec.long?.includes(name))) {
        return false;
      }
    } else if (arg.startsWith("-") && arg !== "-") {
      for (let k = 1; k < arg.length; k++) {
        const letter = arg[k]!;
        if (spec.flags.includes(letter)) continue;
        if (!spec.valued?.includes(letter)) return false;
        if (k === arg.length - 1) i++;
        else if (spec.attachedValues === false) return false;
        break;
      }
    } else {
      operands++;
    }
  }
  return spec.maxOperands === undefined || operands <= spec.maxOperands;
}

/** find's expression words that only test or print, with how many arguments each takes. */
const FIND_PRIMARIES: Record<string, number> = {
  "-H": 0,
  "-L": 0,
  "-P": 0,
  "-D": 1,
  "!": 0,
  "(": 0,
  ")": 0,
  ",": 0,
  "-not": 0,
  "-a": 0,
  "-and": 0,
  "-o": 0,
  "-or": 0,
  "-print": 0,
  "-print0": 0,
  "-printf": 1,
  "-ls": 0,
  "-prune": 0,
  "-quit": 0,
  "-true": 0,
  "-false": 0,
  "-empty": 0,
  "-nouser": 0,
  "-nogroup": 0,
  "-readable": 0,
  "-writable": 0,
  "-executable": 0,
  "-depth": 0,
  "-xdev": 0,
  "-mount": 0,
  "-follow": 0,
  "-noleaf": 0,
  "-daystart": 0,
  "-ignore_readdir_race": 0,
  "-noignore_readdir_race": 0,
  "-warn": 0,
  "-nowarn": 0,
  "-help": 0,
  "--help": 0,
  "-version": 0,
  "--version": 0,
  "-name": 1,
  "-iname": 1,
  "-path": 1,
  "-ipath": 1,
  "-wholename": 1,
  "-iwholename": 1,
  "-regex": 1,
  "-iregex": 1,
  "-regextype": 1,
  "-lname": 1,
  "-ilname": 1,
  "-type": 1,
  "-xtype": 1,
  "-size": 1,
  "-perm": 1,
  "-user": 1,
  "-group": 1,
  "-uid": 1,
  "-gid": 1,
  "-links": 1,
  "-inum": 1,
  "-samefile": 1,
  "-newer": 1,
  "-anewer": 1,
  "-cnewer": 1,
  "-mtime": 1,
  "-mmin": 1,
  "-atime": 1,
  "-amin": 1,
  "-ctime": 1,
  "-cmin": 1,
  "-used": 1,
  "-maxdepth": 1,
  "-mindepth": 1,
  "-fstype": 1,
  "-context": 1,
};

/**
 * find runs programs (-exec, -ok…), deletes (-delete) and writes files (-fprint…); its primaries are
 * never abbreviated, so every word that looks like one must be a known test or printing action.
 */
function isSafeFind(args: readonly string[]): boolean {
  for (let i = 0; i < args.length; i++) {
    const arg = args[i]!;
    const arity = Object.hasOwn(FIND_PRIMARIES, arg)
      ? FIND_PRIMARIES[arg]!
      : /^-newer[aBcmt][aBcmt]$/.test(arg)
        ? 1
        : /^-O\d$/.test(arg)
          ? 0
          : undefined;
    if (arity !== undefined) i += arity;
    else if (arg.startsWith("-")) return false;
  }
  return true;
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
  if (program === "find") return isSafeFind(args);
  if (program === "sed") return isSafeSed(args);
  const spec = Object.hasOwn(OPTION_SPECS, program) ? OPTION_SPECS[program] : undefined;
  return spec !== undefined && fitsSpec(args, spec);
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

export interface PatchContext {
  /** A user is there to answer an approval prompt. */
  interactive: boolean;
  /** The protected paths (workspace-relative) the patch writes, if any. */
  protectedPaths?: readonly string[];
}

export function decidePatch(mode: ApprovalMode, context: PatchContext): ApprovalDecision {
  const touched = context.protectedPaths ?? [];
  if (touched.length > 0) {
    const reason =
      `The patch writes ${touched.join(", ")}, a protected path: what is written there runs outside ` +
      "the sandbox later (git config and hooks, agent and editor settings)";
    if (context.interactive && mode !== "never") return { action: "ask", reason };
    const why = context.interactive
      ? "approval mode `never` does not ask"
      : "that is not possible in non-interactive mode (spark exec)";
    return {
      action: "refuse",
      reason:
        `${reason}, so it needs the user's approval, and ${why}. Do not retry it or write it another ` +
        "way; tell the user the exact change so they can make it themselves.",
    };
  }
  if (mode !== "untrusted") return { action: "run" };
  return needsApproval("In untrusted mode file edits need approval", context.interactive);
}

export interface McpToolContext {
  /** The MCP server of the tool. */
  server: string;
  /** The server is marked `trusted` in the config. */
  trusted: boolean;
  /** A user is there to answer an approval prompt. */
  interactive: boolean;
}

/**
 * A call of an MCP server's tool. What such a tool does is the server's business, outside the
 * sandbox: it runs without asking only when the user marked its server `trusted`; otherwise it asks
 * (`on-request`, `untrusted`), and where no one can be asked (`never`, `spark exec`) it is refused.
 */
export function decideMcpTool(mode: ApprovalMode, context: McpToolContext): ApprovalDecision {
  if (context.trusted) return { action: "run" };
  const reason = `MCP server "${context.server}" is not trusted, so its tools run only with the user's approval`;
  if (context.interactive && mode !== "never") return { action: "ask", reason };
  const why = context.interactive
    ? "approval mode `never` does not ask"
    : "that is not possible in non-interactive mode (spark exec)";
  return {
    action: "refuse",
    reason:
      `${reason}, and ${why}. Do not retry it; find another way or tell the user. The user can set ` +
      `"trusted": true on the server in the config file's mcpServers to let its tools run.`,
  };
}
