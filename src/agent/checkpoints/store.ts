/**
 * What the checkpoints' stores share (checkpoints.ts): the versions a path can have, a checkpoint,
 * the store seam (a git repository's objects, git-store.ts, or a folder of Spark's, folder-store.ts),
 * the limits, and the manifest saved with each checkpoint.
 */

/** What a path held at one moment. */
export type Version =
  | { kind: "file"; id: string; mode: number }
  | { kind: "absent" }
  /** Not stored (too large, or the store is full): such a file cannot be put back. */
  | { kind: "unrecorded"; reason: string };

/** One turn's checkpoint: the touched paths (workspace-relative, posix) as they were before it. */
export interface Checkpoint {
  turn: number;
  files: Map<string, Version>;
}

/** Files larger than this are not stored (an undo then says it cannot restore them). */
export const MAX_FILE_BYTES = 16 * 1024 * 1024;
/** Files scanned around a command; past this, the rest of the workspace is not watched. */
export const MAX_SCAN_FILES = 50_000;
/** What one session may store (a folder store refuses more; a git store drops its oldest checkpoints). */
export const MAX_STORE_BYTES = 512 * 1024 * 1024;
/** Checkpoints kept per session (the oldest are dropped: no undo that far back). */
export const MAX_CHECKPOINTS = 100;
/** Sessions' checkpoints (refs or folders) untouched this long are removed when a session opens. */
export const STALE_MS = 14 * 24 * 3600 * 1000;
/** A file modified this recently may change again within the same timestamp: read every time. */
export const RACY_NS = 3_000_000_000n;

/** A file to store: its bytes are read through the confined layer by `read` (checkpoints.ts). */
export interface StoreFile {
  /** Workspace-relative posix path. */
  rel: string;
  mode: number;
  /** The file's bytes now; undefined when it vanished or is no regular file any more. */
  read: () => Promise<Buffer | undefined>;
}

/** Where the contents are kept: a git repository's objects, or a folder of Spark's. */
export interface Store {
  readonly kind: "git" | "folder";
  /** Where it keeps them: the session's bare repository, or its folder. */
  readonly location: string;
  /**
   * Stores the files and returns their versions: `absent` for a file that vanished meanwhile,
   * `unrecorded` for one that could not be stored (the store is full).
   */
  put(files: readonly StoreFile[]): Promise<Version[]>;
  get(id: string): Promise<Buffer>;
  /**
   * Keeps a finished checkpoint (its earlier contents stay reachable) and drops the oldest beyond
   * the limits; returns the turns dropped to stay within `MAX_STORE_BYTES` (those can no longer be
   * undone). `live` are the stored contents still in use elsewhere (the scan's cache, what `/redo`
   * would put back): never dropped.
   */
  save(checkpoint: Checkpoint, live: ReadonlySet<string>): Promise<number[]>;
  /** The highest turn saved for this session before (a resumed session numbers on from it). */
  lastTurn(): Promise<number>;
  /** The checkpoints saved for this session before, oldest first (unreadable ones skipped). */
  load(): Promise<Checkpoint[]>;
  /** Removes everything saved for this session. */
  clear(): Promise<void>;
}

/** The manifest of a checkpoint, as saved (the commit message in git, `TURN.json` in a folder). */
export function manifest(checkpoint: Checkpoint): string {
  const files: Record<string, Version> = {};
  for (const [rel, version] of checkpoint.files) files[rel] = version;
  return JSON.stringify({ spark_checkpoint: 1, turn: checkpoint.turn, files }, null, 1);
}

/** A saved manifest read back; undefined when it is not one. */
export function parseManifest(text: string): Checkpoint | undefined {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null) return undefined;
  const { turn, files } = parsed as { turn?: unknown; files?: unknown };
  if (typeof turn !== "number" || !Number.isInteger(turn) || typeof files !== "object" || files === null)
    return undefined;
  const map = new Map<string, Version>();
  for (const [rel, value] of Object.entries(files as Record<string, unknown>)) {
    const v = value as { kind?: unknown; id?: unknown; mode?: unknown; reason?: unknown } | null;
    // Only paths inside the workspace, as the manifest's writer spelled them.
    if (rel === "" || rel.startsWith("/") || rel.split("/").includes("..")) return undefined;
    if (v?.kind === "absent") map.set(rel, { kind: "absent" });
    else if (v?.kind === "file" && typeof v.id === "string" && typeof v.mode === "number")
      map.set(rel, { kind: "file", id: v.id, mode: v.mode & 0o7777 });
    else if (v?.kind === "unrecorded")
      map.set(rel, { kind: "unrecorded", reason: typeof v.reason === "string" ? v.reason : "not kept" });
    else return undefined;
  }
  return { turn, files: map };
}

/** `fn` over `items`, at most `limit` at once, results in order. */
export async function mapLimit<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T) => Promise<R>,
): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++;
      out[index] = await fn(items[index]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
