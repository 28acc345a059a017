/**
 * Usage errors that say what to do next, briefly.
 *
 * An unknown option, command or a bad value prints commander's one-line error and a one-line hint
 * naming the command's `--help` (not the whole help: 117 lines scrolled the error away), exit 2.
 *
 * A mistyped subcommand is not a prompt: `spark srve` would otherwise open the TUI (and maybe
 * download a model) to send "srve" to it. A single word of three or more letters within two edits
 * (insertions, deletions, substitutions, swaps of two neighbours) of a subcommand's name is taken for
 * that subcommand mistyped; one edit for names under five letters (exec, keys, app…), so that short
 * words such as "yes" or "exit" stay prompts. Several words, or anything but letters, stay a prompt.
 */

import type { Command } from "commander";

/**
 * Every command below `command` (itself included) answers a usage error with a one-line hint and
 * exit status 2 (as bad settings do); `--help` and `--version` exit 0.
 */
export function shortUsageErrors(command: Command, path = command.name()): void {
  command
    .showHelpAfterError(`(see \`${path} --help\`)`)
    .exitOverride((error) => process.exit(error.exitCode === 0 ? 0 : 2));
  for (const sub of command.commands) shortUsageErrors(sub, `${path} ${sub.name()}`);
}

/** Edits between `a` and `b` (optimal string alignment: a swap of two neighbours is one edit). */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[][] = Array.from({ length: rows }, (_, i) =>
    Array.from({ length: cols }, (_, j) => (i === 0 ? j : j === 0 ? i : 0)),
  );
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1])
        best = Math.min(best, d[i - 2]![j - 2]! + 1);
      d[i]![j] = best;
    }
  }
  return d[a.length]![b.length]!;
}

/**
 * The subcommand `prompt` looks like a typo of, or undefined when it reads as a prompt. The
 * closest name wins; among equally close ones, the first in `names`.
 */
export function mistypedSubcommand(prompt: string, names: readonly string[]): string | undefined {
  if (!/^[A-Za-z]{3,}$/.test(prompt)) return undefined;
  const word = prompt.toLowerCase();
  let best: { name: string; distance: number } | undefined;
  for (const name of names) {
    const distance = editDistance(word, name);
    if (distance <= (name.length >= 5 ? 2 : 1) && (best === undefined || distance < best.distance))
      best = { name, distance };
  }
  return best?.name;
}
