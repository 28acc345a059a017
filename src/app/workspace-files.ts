/**
 * `@` in the composer (the app in a browser and in the VS Code pane alike): the workspace's file
 * names, matched as the user types, and the files a message names with `@path` attached to it.
 *
 * The list is what git tracks plus untracked files it does not ignore (in a repository), else a walk
 * that skips dot-folders and node_modules; read at most every few seconds. Only a path from that
 * list is ever attached, so `@` cannot reach outside the workspace or into ignored secrets; and the
 * file is read through the confined layer (a link out, a FIFO, a secret or a `.env` file is not
 * attached).
 */
import { ConfinedRoot, readPrefix } from "../agent/fs/confined.js";
import { neutralGit } from "../agent/sandbox/neutral-git.js";

/** Files listed at most (a huge tree is cut, not walked for ever). */
const MAX_FILES = 50_000;
/** A listing is reused this long. */
const FRESH_MS = 5_000;
/** Matches answered per query. */
const MAX_MATCHES = 20;
/** Files attached per message, and the bytes of each (a larger one is cut, and says so). */
const MAX_ATTACHED = 5;
const MAX_ATTACHED_BYTES = 64 * 1024;
/** `@path` at the start or after a space; the path is what `match` offers. */
const MENTION = /(^|\s)@([\w@.+/-]+[\w])/g;

export class WorkspaceFiles {
  #listed: { at: number; files: Promise<string[]> } | undefined;
  #confined: Promise<ConfinedRoot> | undefined;

  constructor(private readonly root: string) {}

  #files(): Promise<ConfinedRoot> {
    this.#confined ??= ConfinedRoot.open(this.root);
    this.#confined.catch(() => (this.#confined = undefined));
    return this.#confined;
  }

  /** Paths containing `query` (case-insensitive), those whose name starts with it first. */
  async match(query: string): Promise<string[]> {
    const files = await this.list();
    const needle = query.toLowerCase();
    const scored: { path: string; score: number }[] = [];
    for (const path of files) {
      const lower = path.toLowerCase();
      const at = lower.indexOf(needle);
      if (at < 0) continue;
      const name = lower.slice(lower.lastIndexOf("/") + 1);
      const score = name.startsWith(needle) ? 0 : name.includes(needle) ? 1 : 2;
      scored.push({ path, score: score * 10_000 + path.length });
    }
    scored.sort((a, b) => a.score - b.score || a.path.localeCompare(b.path));
    return scored.slice(0, MAX_MATCHES).map((entry) => entry.path);
  }

  /**
   * `text` with the files it names as `@path` attached after it (fenced, each at most 64 KiB);
   * names that are not workspace files stay as they are, attached nothing.
   */
  async attach(text: string): Promise<string> {
    const named = [...text.matchAll(MENTION)].map((match) => match[2]!);
    if (named.length === 0) return text;
    const files = new Set(await this.list());
    const attached: string[] = [];
    for (const path of new Set(named)) {
      if (!files.has(path) || attached.length >= MAX_ATTACHED) continue;
      let content: Buffer;
      let size: number;
      try {
        ({ content, size } = await (
          await this.#files()
        ).withFile(path, {}, async ({ handle, info }) => ({
          content: await readPrefix(handle, MAX_ATTACHED_BYTES),
          size: info.size,
        })));
      } catch {
        continue;
      }
      if (content.includes(0)) continue; // binary
      const cut = size > MAX_ATTACHED_BYTES;
      const body = content.toString("utf8");
      const fence = body.includes("```") ? "~~~~" : "```";
      attached.push(
        `\`${path}\`${cut ? ` (first ${MAX_ATTACHED_BYTES / 1024} KiB of ${size} bytes)` : ""}:\n` +
          `${fence}\n${body}${body.endsWith("\n") ? "" : "\n"}${fence}`,
      );
    }
    return attached.length === 0 ? text : `${text}\n\n${attached.join("\n\n")}`;
  }

  /** The workspace's files, relative with forward slashes. */
  list(): Promise<string[]> {
    const now = Date.now();
    if (this.#listed && now - this.#listed.at < FRESH_MS) return this.#listed.files;
    const files = this.#read();
    this.#listed = { at: now, files };
    files.catch(() => (this.#listed = undefined));
    return files;
  }

  async #read(): Promise<string[]> {
    try {
      const out = await neutralGit(
        this.root,
        ["ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        64 * 1024 * 1024,
      );
      return [...new Set(out.toString("utf8").split("\0").filter(Boolean))].slice(0, MAX_FILES);
    } catch {
      return this.#walk();
    }
  }

  async #walk(): Promise<string[]> {
    const files: string[] = [];
    try {
      const root = await this.#files();
      await root.walkTree(
        ".",
        (entry) => {
          if (entry.kind === "file" && !entry.name.startsWith(".") && files.length < MAX_FILES)
            files.push(entry.rel);
        },
        (entry) => !entry.name.startsWith(".") && entry.name !== "node_modules" && files.length < MAX_FILES,
      );
    } catch {
      // The workspace cannot be read: no names to offer.
    }
    return files.sort();
  }
}
