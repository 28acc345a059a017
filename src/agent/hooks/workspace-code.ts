/**
 * Whether a hook's command runs code that the agent can write. Hooks run on the host, outside the
 * sandbox, in the workspace; the sandboxed agent can write the workspace. So a hook that runs a
 * script there (`./scripts/guard.sh`, `"$CLAUDE_PROJECT_DIR"/.claude/hooks/x.sh`), the project's
 * own scripts (`npm run lint`: package.json; `make`: the Makefile; `cargo`, `pytest`, `eslint`…:
 * build files, plugins, conftest.py, config files that are code) or an interpreter (`python3`,
 * `node`: they import modules from the working directory) would let the agent run anything on the
 * host at the next hook. Such a hook is refused unless the user's config trusts it
 * (`"trustWorkspace": true` on that hook); a hook that runs a program outside the workspace
 * (`logger -t spark`, `~/bin/guard.sh`, `/usr/local/bin/check`) runs as before.
 *
 * The judgement reads the command as the shell would split it (simple commands between `;`, `&&`,
 * `||`, `|`, `&`, newlines, `$(…)` and backquotes; `bash -c '…'` is read inside), looks at each
 * command's program (after variable assignments and wrappers such as `env`, `timeout 5`, `nice`)
 * and at the paths among its words (a path in the workspace, or one built from a variable other
 * than `$HOME`, such as `$SPARK_PROJECT_DIR/…`, is not cleared). It errs on the side of refusing: a hook it cannot clear asks the
 * user to say `trustWorkspace`, never the other way round.
 */
import { homedir } from "node:os";
import path from "node:path";

/** Programs that run code the project holds: its scripts, build files, plugins or config code. */
const PROJECT_RUNNERS = new Set([
  "npm",
  "npx",
  "pnpm",
  "pnpx",
  "yarn",
  "bun",
  "bunx",
  "corepack",
  "make",
  "gmake",
  "just",
  "task",
  "cargo",
  "go",
  "gradle",
  "mvn",
  "ant",
  "sbt",
  "lein",
  "mix",
  "rake",
  "bundle",
  "composer",
  "dotnet",
  "cmake",
  "ninja",
  "meson",
  "bazel",
  "tox",
  "nox",
  "pytest",
  "py.test",
  "poetry",
  "pipenv",
  "uv",
  "hatch",
  "pdm",
  "pre-commit",
  "husky",
  "lint-staged",
  "eslint",
  "prettier",
  "jest",
  "vitest",
  "mocha",
  "webpack",
  "vite",
  "rollup",
  "babel",
  "phpunit",
  "rspec",
]);

/** Interpreters: they run a script they are given, and import modules from the working directory. */
const INTERPRETERS = /^(python[0-9.]*|pypy[0-9.]*|node|nodejs|deno|tsx|ts-node|ruby|perl|php|lua|Rscript)$/;

const SHELLS = new Set(["bash", "sh", "zsh", "dash", "ksh", "fish"]);

/** Wrappers whose own options come first and whose operand is the program to run. */
const WRAPPERS = new Set([
  "env",
  "exec",
  "command",
  "nice",
  "nohup",
  "time",
  "timeout",
  "xargs",
  "sudo",
  "stdbuf",
  "ionice",
  "setsid",
  "flock",
  "chronic",
]);

/**
 * Why `command` (run by `bash -c` in `workspace`) runs code the agent can write, or undefined when
 * it runs only programs outside the workspace.
 */
export function workspaceCodeOf(command: string, workspace: string): string | undefined {
  return judge(command, path.resolve(workspace), 0);
}

function judge(command: string, workspace: string, depth: number): string | undefined {
  if (depth > 3) return "it nests shells too deeply to check";
  for (const words of simpleCommands(command)) {
    const reason = judgeSimple(words, workspace, depth);
    if (reason !== undefined) return reason;
  }
  return undefined;
}

function judgeSimple(words: string[], workspace: string, depth: number): string | undefined {
  let i = 0;
  // Variable assignments, then wrappers and their options (`timeout 5`, `env -i`, `nice -n 5`).
  while (i < words.length && /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[i]!)) i++;
  while (i < words.length && WRAPPERS.has(words[i]!)) {
    i++;
    while (
      i < words.length &&
      (words[i]!.startsWith("-") ||
        /^[0-9.]+[smhd]?$/.test(words[i]!) ||
        /^[A-Za-z_][A-Za-z0-9_]*=/.test(words[i]!))
    )
      i++;
  }
  const program = words[i];
  if (program === undefined) return undefined;
  const args = words.slice(i + 1);
  const name = path.basename(program);
  // A program named by a path, or by a variable (`"$CLAUDE_PROJECT_DIR"/hooks/x.sh`, `$SPARK_PROJECT_DIR/…`).
  if (program.includes("/") || program.includes("$")) {
    if (inWorkspace(program, workspace)) return `it runs ${program}, a file in the workspace`;
  } else if (program === "." || program === "source") {
    return `it sources ${args[0] ?? "a file"} into the shell`;
  }
  if (/^(gradlew|mvnw)$/.test(name) || PROJECT_RUNNERS.has(name))
    return `${name} runs code from the workspace (its scripts, build files, plugins or config)`;
  if (INTERPRETERS.test(name)) return `${name} runs in the workspace and imports modules from it`;
  if (SHELLS.has(name)) {
    const inline = args.indexOf("-c");
    if (inline >= 0)
      return args[inline + 1] === undefined ? undefined : judge(args[inline + 1]!, workspace, depth + 1);
    const script = args.find((arg) => !arg.startsWith("-"));
    return script === undefined
      ? `${name} reads commands from its input`
      : `${name} runs the script ${script} from the workspace`;
  }
  // A path in the workspace among the arguments (a config, a script another program runs).
  for (const arg of args) {
    if (arg.includes("/") && !arg.startsWith("-") && inWorkspace(arg, workspace))
      return `it passes ${arg}, a path in the workspace, to ${name}`;
  }
  return undefined;
}

/** Whether a path word (relative to the workspace, `~/…`, or absolute) lies in the workspace. */
function inWorkspace(word: string, workspace: string): boolean {
  const home = /^(~|\$HOME|\$\{HOME\})\//.exec(word);
  const expanded = home ? path.join(homedir(), word.slice(home[0].length)) : word;
  if (expanded.includes("$")) return true; // another variable: cannot tell, so not cleared
  const resolved = path.resolve(workspace, expanded);
  const relative = path.relative(workspace, resolved);
  return relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative));
}

/**
 * The words of each simple command in `command`, quotes removed; the text of `$(…)` and backquotes
 * is read as commands of its own.
 */
export function simpleCommands(command: string): string[][] {
  const result: string[][] = [];
  let words: string[] = [];
  let word = "";
  let inWord = false;
  const endWord = (): void => {
    if (inWord) words.push(word);
    word = "";
    inWord = false;
  };
  const endCommand = (): void => {
    endWord();
    if (words.length > 0) result.push(words);
    words = [];
  };
  for (let i = 0; i < command.length; i++) {
    const c = command[i]!;
    if (c === "'") {
      const end = command.indexOf("'", i + 1);
      word += command.slice(i + 1, end < 0 ? undefined : end);
      inWord = true;
      i = end < 0 ? command.length : end;
    } else if (c === '"') {
      let j = i + 1;
      while (j < command.length && command[j] !== '"') j += command[j] === "\\" ? 2 : 1;
      const inner = command.slice(i + 1, j);
      // Command substitutions inside double quotes run too.
      for (const sub of substitutions(inner)) result.push(...simpleCommands(sub));
      word += inner;
      inWord = true;
      i = j;
    } else if (c === "\\") {
      word += command[i + 1] ?? "";
      inWord = true;
      i++;
    } else if (c === "$" && command[i + 1] === "(") {
      const end = closing(command, i + 1);
      result.push(...simpleCommands(command.slice(i + 2, end)));
      word += command.slice(i, end + 1);
      inWord = true;
      i = end;
    } else if (c === "`") {
      const end = command.indexOf("`", i + 1);
      result.push(...simpleCommands(command.slice(i + 1, end < 0 ? undefined : end)));
      inWord = true;
      i = end < 0 ? command.length : end;
    } else if (/[;&|\n()]/.test(c)) {
      endCommand();
    } else if (/\s/.test(c)) {
      endWord();
    } else {
      word += c;
      inWord = true;
    }
  }
  endCommand();
  return result;
}

function substitutions(text: string): string[] {
  const found: string[] = [];
  for (let i = 0; i < text.length; i++) {
    if (text[i] === "$" && text[i + 1] === "(") {
      const end = closing(text, i + 1);
      found.push(text.slice(i + 2, end));
      i = end;
    } else if (text[i] === "`") {
      const end = text.indexOf("`", i + 1);
      found.push(text.slice(i + 1, end < 0 ? undefined : end));
      i = end < 0 ? text.length : end;
    }
  }
  return found;
}

/** The index of the `)` that closes the `(` at `open`, or the end of the text. */
function closing(text: string, open: number): number {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    if (text[i] === "(") depth++;
    else if (text[i] === ")" && --depth === 0) return i;
  }
  return text.length;
}
