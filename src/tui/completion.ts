/**
 * Tab completion in the composer: the word before the caret is completed as a /command, as a tier
 * after `/tier`, or as an `@path` of the workspace's files. `complete` only finds the candidates and
 * their common start; the app puts it in the composer and lists the candidates.
 *
 * `WorkspaceFiles` is the workspace as completion and `@` attachments see it, also before the
 * server is up (neither needs a server): its files are listed once (as `list_files` sees them:
 * .gitignore and secrets skipped) and listed again after anything that may have changed them.
 */
import type { Workspace } from "../agent/files/workspace.js";

export interface Completion {
  /** The word completed (without its `/` or `@`). */
  prefix: string;
  /** The candidates that start with it, in the order of their source. */
  matches: string[];
  /** What replaces `prefix`: the matches' common start, a space after a single complete one. */
  text: string;
}

export interface CompletionSources {
  /** The commands' names and the custom prompts'. */
  commands(): string[];
  tiers(): string[];
  files: WorkspaceFiles;
}

/** Undefined when the word before the caret is nothing to complete (Tab then queues the message). */
export async function complete(before: string, sources: CompletionSources): Promise<Completion | undefined> {
  let word: RegExpExecArray | null;
  let candidates: string[];
  let prefix: string;
  if ((word = /^\/([\w.-]*)$/.exec(before))) {
    prefix = word[1]!;
    candidates = sources.commands();
  } else if ((word = /^\/tier\s+(\S*)$/.exec(before))) {
    prefix = word[1]!;
    candidates = sources.tiers();
  } else if ((word = /(?:^|\s)@(\S*)$/.exec(before))) {
    prefix = word[1]!;
    candidates = await sources.files.under(prefix);
  } else return undefined;
  const matches = candidates.filter((c) => c.startsWith(prefix));
  if (matches.length === 0) return { prefix, matches, text: prefix };
  const common = matches.reduce((a, b) => {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    return a.slice(0, i);
  });
  // A single match is complete: a space after it (a path that is a folder keeps going).
  return { prefix, matches, text: matches.length === 1 && !common.endsWith("/") ? `${common} ` : common };
}

export class WorkspaceFiles {
  #files: Promise<string[]> | undefined;

  /**
   * `connected`: the session's workspace once there is one (a `--worktree` session's is its
   * worktree); before that the workspace is opened at `cwd`.
   */
  constructor(
    private readonly connected: () => Workspace | undefined,
    private readonly cwd: string | undefined,
  ) {}

  /** The workspace, also before the server is up; undefined when it cannot be opened. */
  async workspace(): Promise<Workspace | undefined> {
    const connected = this.connected();
    if (connected) return connected;
    try {
      const { Workspace } = await import("../agent/files/workspace.js");
      return await Workspace.open(this.cwd ?? process.cwd());
    } catch {
      return undefined;
    }
  }

  /**
   * Completions for `@prefix`: the workspace's files under the prefix's folder, a folder shown once
   * as `dir/`.
   */
  async under(prefix: string): Promise<string[]> {
    const workspace = await this.workspace();
    if (!workspace) return [];
    const { listFiles } = await import("../agent/files/file-tools.js");
    this.#files ??= listFiles(workspace, { limit: 20_000 }).then(
      (list) => list.files,
      () => [],
    );
    const dir = prefix.slice(0, prefix.lastIndexOf("/") + 1);
    const out = new Set<string>();
    for (const file of await this.#files) {
      if (!file.startsWith(dir)) continue;
      const slash = file.indexOf("/", dir.length);
      out.add(slash < 0 ? file : file.slice(0, slash + 1));
    }
    return [...out].sort();
  }

  /** The files may have changed (a turn, /undo, /pick, /discard): the next completion lists them again. */
  forget(): void {
    this.#files = undefined;
  }
}
