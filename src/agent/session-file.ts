/**
 * Saved sessions, for `spark resume`: one JSON Lines file per session in `DATA_DIR/sessions/`.
 * The first line describes the session; then each line appends transcript items, or replaces the
 * whole transcript (`reset`, after `/new` or a compaction). Appends are small synchronous writes,
 * so a crash loses at most the line being written; a torn last line is skipped on load.
 */
import { appendFileSync, mkdirSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { messageText, type InputItem } from "./agent.js";

export interface SessionMeta {
  type: "session";
  id: string;
  created_at: string;
  cwd: string;
  model: string;
}

type SessionLine =
  SessionMeta | { type: "items"; items: InputItem[] } | { type: "reset"; items: InputItem[] };

export class SessionFile {
  private constructor(
    readonly path: string,
    readonly meta: SessionMeta,
  ) {}

  static create(dataDir: string, meta: Omit<SessionMeta, "type" | "id" | "created_at">): SessionFile {
    const dir = join(dataDir, "sessions");
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const created = new Date();
    const id = `${created.toISOString().replace(/[-:]/g, "").replace(/\..*/, "")}-${Math.random().toString(36).slice(2, 8)}`;
    const full: SessionMeta = { type: "session", id, created_at: created.toISOString(), ...meta };
    const file = new SessionFile(join(dir, `${id}.jsonl`), full);
    appendFileSync(file.path, `${JSON.stringify(full)}\n`, { mode: 0o600 });
    return file;
  }

  /** Opens a saved session by id (or unique id prefix), or the newest one when `id` is undefined. */
  static open(dataDir: string, id: string | undefined): { file: SessionFile; transcript: InputItem[] } {
    const dir = join(dataDir, "sessions");
    let names: string[] = [];
    try {
      names = readdirSync(dir).filter((name) => name.endsWith(".jsonl"));
    } catch {
      // no sessions yet
    }
    let name: string | undefined;
    if (id === undefined) {
      name = names
        .map((n) => ({ n, mtime: statSync(join(dir, n)).mtimeMs }))
        .sort((a, b) => b.mtime - a.mtime || b.n.localeCompare(a.n))[0]?.n;
      if (!name) throw new Error(`no saved sessions in ${dir}; start one with \`spark\` or \`spark exec\``);
    } else {
      const matches = names.filter((n) => n.startsWith(id));
      if (matches.length === 0)
        throw new Error(`no saved session "${id}" in ${dir} (see \`spark resume --list\`)`);
      if (matches.length > 1)
        throw new Error(`"${id}" matches ${matches.length} sessions; give more of the id`);
      name = matches[0]!;
    }
    const path = join(dir, name);
    let meta: SessionMeta | undefined;
    let transcript: InputItem[] = [];
    for (const line of readFileSync(path, "utf8").split("\n")) {
      if (line.trim() === "") continue;
      let parsed: SessionLine;
      try {
        parsed = JSON.parse(line) as SessionLine;
      } catch {
        continue;
      }
      if (parsed.type === "session") meta = parsed;
      else if (parsed.type === "items") transcript.push(...parsed.items);
      else if (parsed.type === "reset") transcript = [...parsed.items];
    }
    if (!meta) throw new Error(`${path} is not a Spark session file (no session line)`);
    return { file: new SessionFile(path, meta), transcript };
  }

  /** Saved sessions, newest first. */
  static list(dataDir: string): { id: string; created_at: string; cwd: string; firstMessage: string }[] {
    const dir = join(dataDir, "sessions");
    let names: string[];
    try {
      names = readdirSync(dir).filter((name) => name.endsWith(".jsonl"));
    } catch {
      return [];
    }
    return names
      .map((name) => {
        const lines = readFileSync(join(dir, name), "utf8").split("\n", 3);
        try {
          const meta = JSON.parse(lines[0] ?? "") as SessionMeta;
          const items = lines[1] ? ((JSON.parse(lines[1]) as { items?: InputItem[] }).items ?? []) : [];
          const first = items.find((item) => item.role === "user");
          return {
            id: meta.id,
            created_at: meta.created_at,
            cwd: meta.cwd,
            firstMessage: messageText(first),
          };
        } catch {
          return undefined;
        }
      })
      .filter((entry) => entry !== undefined)
      .sort((a, b) => b.created_at.localeCompare(a.created_at));
  }

  append(items: readonly InputItem[]): void {
    if (items.length === 0) return;
    appendFileSync(this.path, `${JSON.stringify({ type: "items", items })}\n`);
  }

  reset(items: readonly InputItem[]): void {
    appendFileSync(this.path, `${JSON.stringify({ type: "reset", items })}\n`);
  }
}
