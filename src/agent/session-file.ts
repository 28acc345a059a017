/**
 * Saved sessions, for `spark resume`: one JSON Lines file per session in `DATA_DIR/sessions/`.
 * The first line describes the session; then each line appends transcript items, or replaces the
 * whole transcript (`reset`, after `/new` or a compaction). Appends are small synchronous writes,
 * so a crash loses at most the line being written; a torn last line is skipped on load.
 */
import {
  appendFileSync,
  closeSync,
  constants,
  fstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { messageText, type InputItem } from "./agent.js";

export interface SessionMeta {
  type: "session";
  id: string;
  created_at: string;
  cwd: string;
  model: string;
}

/**
 * Reads a saved file that must be a regular file. Opened non-blocking and checked before reading,
 * so a FIFO (or a device) given a saved file's name cannot hang the reader; throws for those.
 */
export function readRegularFile(path: string): string {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NONBLOCK);
  try {
    if (!fstatSync(fd).isFile()) throw new Error(`${path} is not a regular file`);
    return readFileSync(fd, "utf8");
  } finally {
    closeSync(fd);
  }
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** Transcript items of a line, or undefined when they are not a list of items. */
function itemsOf(line: Record<string, unknown>): InputItem[] | undefined {
  const items = line.items;
  return Array.isArray(items) && items.every(isObject) ? (items as InputItem[]) : undefined;
}

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
  static open(
    dataDir: string,
    id: string | undefined,
  ): { file: SessionFile; transcript: InputItem[]; skipped: number } {
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
    // A line that is not what it should be (torn, hand-edited, another program's) is skipped, not
    // allowed to hide the whole session; `skipped` counts them.
    let skipped = 0;
    for (const line of readRegularFile(path).split("\n")) {
      if (line.trim() === "") continue;
      let parsed: unknown;
      try {
        parsed = JSON.parse(line);
      } catch {
        skipped++;
        continue;
      }
      if (!isObject(parsed)) {
        skipped++;
        continue;
      }
      const items = itemsOf(parsed);
      if (
        parsed.type === "session" &&
        typeof parsed.id === "string" &&
        typeof parsed.cwd === "string" &&
        typeof parsed.model === "string"
      ) {
        meta = {
          type: "session",
          id: parsed.id,
          created_at: typeof parsed.created_at === "string" ? parsed.created_at : "",
          cwd: parsed.cwd,
          model: parsed.model,
        };
      } else if (parsed.type === "items" && items) transcript.push(...items);
      else if (parsed.type === "reset" && items) transcript = [...items];
      else skipped++;
    }
    if (!meta) throw new Error(`${path} is not a Spark session file (no session line)`);
    return { file: new SessionFile(path, meta), transcript, skipped };
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
        try {
          const lines = readRegularFile(join(dir, name)).split("\n", 3);
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

  /**
   * Writes the whole file again: the session line and `items` as the transcript. After a write
   * failed (a full disk, a removed sessions directory) the file may lack lines; this makes it whole.
   */
  rewrite(items: readonly InputItem[]): void {
    mkdirSync(join(this.path, ".."), { recursive: true, mode: 0o700 });
    // Beside it, then renamed over it: a write that fails half-way leaves the old file as it was.
    const temporary = `${this.path}.${process.pid}.tmp`;
    try {
      writeFileSync(
        temporary,
        `${JSON.stringify(this.meta)}\n${JSON.stringify({ type: "reset", items })}\n`,
        {
          mode: 0o600,
        },
      );
      renameSync(temporary, this.path);
    } catch (error) {
      rmSync(temporary, { force: true });
      throw error;
    }
  }
}
