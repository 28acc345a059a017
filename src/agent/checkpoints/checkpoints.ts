/**
 * Checkpoints: every turn records the files it touched as they were before it changed them, so that
 * `/undo` (and the app's "Undo turn") can put them back and `/redo` can undo the undo.
 *
 * What a turn touched:
 * - files the file tools write (`apply_patch`, `edit_file`): recorded by name just before the write;
 * - files a command (or an MCP tool) changed: the workspace is scanned before and after each one
 *   (the files `list_files` sees: .gitignore'd ones, `.git` and the home directory's secrets are not
 *   part of it); a stat cache means only files whose size, times or inode moved are read again.
 *   Every file's content is stored before the command runs, since any of them may be the one it
 *   changes.
 *
 * Where the contents go (exact bytes, so binary files too), read through the confined file layer
 * (a file swapped for a link or a FIFO while it is stored is not followed, not waited on):
 * - in a git work tree, into a bare repository of Spark's own per session that borrows the user's
 *   objects (git-store.ts): the user's `.git` is never written; each turn's checkpoint is a commit
 *   of the files' earlier contents under `refs/spark/checkpoints/TURN` (the manifest, with the files
 *   the turn created, is its message).
 * - outside git, into `SPARK_HOME/checkpoints/SESSION/` (`objects/SHA256` and `TURN.json`).
 * Either way at most `MAX_STORE_BYTES` per session: the folder store refuses more (an undo says it
 * cannot restore those files), the git store drops its oldest checkpoints (`/undo` of such a turn
 * says it can no longer be undone). Sessions untouched for `STALE_MS` are removed when one opens.
 *
 * Restores go through the confined layer too: the last component is never followed (a link left
 * where a file was is replaced, never written through) and protected names are never written.
 *
 * Only the files are restored: what a command did elsewhere (a database, a network call, a process)
 * cannot be undone.
 */
import type { BigIntStats } from "node:fs";
import path from "node:path";
import { sparkHome } from "../context/spark-home.js";
import { listFiles } from "../files/file-tools.js";
import { isGitWorkTree } from "../sandbox/neutral-git.js";
import type { Workspace } from "../files/workspace.js";
import { FolderStore, pruneFolders } from "./folder-store.js";
import { GitStore } from "./git-store.js";
import {
  MAX_CHECKPOINTS,
  MAX_FILE_BYTES,
  MAX_SCAN_FILES,
  MAX_STORE_BYTES,
  RACY_NS,
  mapLimit,
  type Checkpoint,
  type Store,
  type StoreFile,
  type Version,
} from "./store.js";

export { MAX_FILE_BYTES, type Checkpoint, type Version } from "./store.js";

/** What an undo or a redo did to one file. */
export interface FileRestore {
  path: string;
  action: "restored" | "recreated" | "removed" | "skipped";
  /** Why a file was skipped. */
  reason?: string;
}

export interface RestoreResult {
  /** The turns undone or redone, in ascending order. */
  turns: number[];
  files: FileRestore[];
}

/** The calls the agent and its tools make (tools/context.ts `ToolContext.checkpoints`). */
export interface TurnRecorder {
  beginTurn(): void;
  /** Before a file tool writes these workspace paths. */
  beforeWrite(paths: readonly string[]): Promise<void>;
  /** Around a command (or anything else that may change any file). */
  beforeCommand(): Promise<void>;
  afterCommand(): Promise<void>;
  endTurn(): Promise<Checkpoint | undefined>;
}

interface StatKey {
  size: bigint;
  mtimeNs: bigint;
  ctimeNs: bigint;
  ino: bigint;
}

export class Checkpoints implements TurnRecorder {
  readonly #workspace: Workspace;
  readonly #store: Store;
  #turn = 0;
  /** The turn running: its touched paths and their versions before it. */
  #current: Map<string, Version> | undefined;
  readonly #done: Checkpoint[] = [];
  /** Undos that `/redo` can take back: the checkpoints undone and what the files held before the undo. */
  readonly #undone: { checkpoints: Checkpoint[]; before: Map<string, Version> }[] = [];
  /** The last turn whose checkpoint was dropped to keep within `MAX_STORE_BYTES` (0: none). */
  #droppedUpTo = 0;
  /** The session's cap on what its store keeps. */
  #cap = MAX_STORE_BYTES;
  /** The last scan: each file's stat and stored version. */
  #scan = new Map<string, Scanned>();
  #beforeCommand: Map<string, Scanned> | undefined;
  /** The background scan a session's first turn starts. */
  #warming: Promise<unknown> | undefined;
  /** The store's own folder when it lies in the workspace (never scanned). */
  readonly #exclude: string | undefined;

  private constructor(
    workspace: Workspace,
    store: Store,
    exclude: string | undefined,
    turn: number,
    saved: Checkpoint[],
  ) {
    this.#workspace = workspace;
    this.#store = store;
    this.#exclude = exclude;
    this.#turn = turn;
    this.#done.push(...saved.slice(-MAX_CHECKPOINTS));
  }

  /**
   * The checkpoints of session `session` (a name of letters, digits, `-` and `_`; others are
   * replaced) in `workspace`: in its git repository when it is in a work tree, else in
   * `home/checkpoints` (default `sparkHome()`).
   */
  static async open(
    workspace: Workspace,
    session: string,
    home = sparkHome(),
    options: { maxStoreBytes?: number } = {},
  ): Promise<Checkpoints> {
    const cap = options.maxStoreBytes ?? MAX_STORE_BYTES;
    const name = session.replace(/[^A-Za-z0-9_-]/g, "-").slice(0, 100) || "session";
    let store: Store;
    let exclude: string | undefined;
    let droppedUpTo = 0;
    if (await isGitWorkTree(workspace.root)) {
      const git = await GitStore.open(workspace.root, name, path.resolve(home), cap);
      await git.pruneLegacyRefs();
      droppedUpTo = await git.droppedUpTo();
      store = git;
    } else {
      const base = path.join(path.resolve(home), "checkpoints");
      await pruneFolders(base, name);
      store = await FolderStore.open(path.join(base, name), cap);
      exclude = path.relative(workspace.root, base);
      if (exclude.startsWith("..") || path.isAbsolute(exclude)) exclude = undefined;
    }
    // A resumed session (`spark resume`, an app task after a restart) can undo its earlier turns.
    const saved = await store.load().catch(() => []);
    const checkpoints = new Checkpoints(workspace, store, exclude, await store.lastTurn(), saved);
    checkpoints.#droppedUpTo = droppedUpTo;
    checkpoints.#cap = cap;
    return checkpoints;
  }

  /** `git` when the checkpoints are refs of the workspace's repository, `folder` otherwise. */
  get kind(): "git" | "folder" {
    return this.#store.kind;
  }

  /** Where the store keeps them (the session's bare repository, or its folder). */
  get location(): string {
    return this.#store.location;
  }

  /** The number of the turn running or last run (1 for a session's first). */
  get turn(): number {
    return this.#turn;
  }

  /** The checkpoints that can be undone, oldest first. */
  get checkpoints(): readonly Checkpoint[] {
    return this.#done;
  }

  /** The turns the next `/redo` would put back (empty when there is nothing to redo). */
  get redoable(): number[] {
    return this.#undone.at(-1)?.checkpoints.map((c) => c.turn) ?? [];
  }

  /**
   * A turn starts. The first one also scans the workspace in the background (while the model
   * answers), so that the first command does not wait for every file to be stored.
   */
  beginTurn(): void {
    this.#turn++;
    this.#current = new Map();
    if (this.#scan.size === 0 && !this.#warming) {
      this.#warming = this.#scanWorkspace()
        .catch(() => undefined)
        .finally(() => (this.#warming = undefined));
    }
  }

  /** Never throws: a file that cannot be stored is recorded as such (an undo says it cannot restore it). */
  async beforeWrite(paths: readonly string[]): Promise<void> {
    const current = this.#current ?? this.#startImplicitTurn();
    const fresh: string[] = [];
    for (const p of paths) {
      let abs: string;
      try {
        abs = await this.#workspace.resolve(p, "write");
      } catch {
        continue; // the tool refuses it itself
      }
      const rel = this.#workspace.relative(abs);
      if (!current.has(rel) && !fresh.includes(rel)) fresh.push(rel);
    }
    try {
      for (const [rel, version] of await this.#versionsOf(fresh)) current.set(rel, version);
    } catch (error) {
      const reason = `its content could not be saved: ${(error as Error).message}`;
      for (const rel of fresh) current.set(rel, { kind: "unrecorded", reason });
    }
  }

  /** Never throws: a scan that fails leaves the command's changes unrecorded (the command still runs). */
  async beforeCommand(): Promise<void> {
    if (!this.#current) this.#startImplicitTurn();
    await this.#warming;
    this.#beforeCommand = await this.#scanWorkspace().catch(() => undefined);
  }

  async afterCommand(): Promise<void> {
    const before = this.#beforeCommand;
    const current = this.#current;
    this.#beforeCommand = undefined;
    if (!before || !current) return;
    const after = await this.#scanWorkspace().catch(() => undefined);
    if (!after) return;
    for (const rel of new Set([...before.keys(), ...after.keys()])) {
      if (current.has(rel)) continue;
      const was = before.get(rel);
      const now = after.get(rel);
      if (!was || !now || !sameScanned(was, now)) current.set(rel, was?.version ?? { kind: "absent" });
    }
  }

  /**
   * Ends the turn: drops the paths it left as they were and keeps the rest as its checkpoint, which
   * is returned (undefined when the turn changed no file). A new checkpoint ends what `/redo` could do.
   */
  async endTurn(): Promise<Checkpoint | undefined> {
    const current = this.#current;
    this.#current = undefined;
    this.#beforeCommand = undefined;
    if (!current || current.size === 0) return undefined;
    const now = await this.#versionsOf([...current.keys()]);
    const files = new Map<string, Version>();
    for (const [rel, before] of [...current].sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0))) {
      if (!sameVersion(before, now.get(rel) ?? { kind: "absent" })) files.set(rel, before);
    }
    if (files.size === 0) return undefined;
    const checkpoint: Checkpoint = { turn: this.#turn, files };
    this.#done.push(checkpoint);
    if (this.#done.length > MAX_CHECKPOINTS) this.#done.splice(0, this.#done.length - MAX_CHECKPOINTS);
    this.#undone.length = 0;
    const dropped = await this.#store.save(checkpoint, this.#live());
    if (dropped.length > 0) {
      const gone = new Set(dropped);
      this.#done.splice(0, this.#done.length, ...this.#done.filter((c) => !gone.has(c.turn)));
      this.#droppedUpTo = Math.max(this.#droppedUpTo, ...dropped);
    }
    return checkpoint;
  }

  /**
   * Puts the files back as they were before the last turn that changed files, or before turn `turn`
   * (every later turn undone with it). Throws `CheckpointError` "nothing_to_undo" when there is no
   * such checkpoint, "busy" while a turn runs.
   */
  async undo(turn?: number): Promise<RestoreResult> {
    if (this.#current) throw new CheckpointError("busy", "a turn is running: undo once it ends");
    if (turn !== undefined && turn <= this.#droppedUpTo) throw this.#dropped(turn);
    const last = this.#done.at(-1);
    if (!last) {
      if (this.#droppedUpTo > 0) throw this.#dropped(this.#droppedUpTo);
      throw new CheckpointError("nothing_to_undo", "no turn of this session changed files");
    }
    const from = turn ?? last.turn;
    const undone = this.#done.filter((c) => c.turn >= from);
    if (undone.length === 0) {
      throw new CheckpointError(
        "nothing_to_undo",
        `no turn from ${from} on changed files (the last that did is turn ${last.turn})`,
      );
    }
    // Each path goes back to its version before the earliest undone turn that touched it.
    const target = new Map<string, Version>();
    for (const checkpoint of [...undone].reverse()) {
      for (const [rel, version] of checkpoint.files) target.set(rel, version);
    }
    const before = await this.#versionsOf([...target.keys()]);
    const files = await this.#restore(target);
    this.#done.splice(this.#done.length - undone.length);
    this.#undone.push({ checkpoints: undone, before });
    this.#scan.clear();
    return { turns: undone.map((c) => c.turn), files };
  }

  /** Why turn `turn` can no longer be undone: its checkpoint went to keep the store within its cap. */
  #dropped(turn: number): CheckpointError {
    const oldest = this.#done[0]?.turn;
    return new CheckpointError(
      "nothing_to_undo",
      `turn ${turn} can no longer be undone: this session keeps at most ${this.#cap / 2 ** 20} MiB of ` +
        `checkpoints and dropped the oldest (turns up to ${this.#droppedUpTo})` +
        (oldest === undefined ? "" : `; the oldest turn that can be undone is ${oldest}`),
    );
  }

  /** The stored contents still in use: the scan's cache, the turn running, what /redo would restore. */
  #live(): Set<string> {
    const ids = new Set<string>();
    const add = (version: Version | undefined): void => {
      if (version?.kind === "file") ids.add(version.id);
    };
    for (const scanned of this.#scan.values()) add(scanned.version);
    for (const version of this.#current?.values() ?? []) add(version);
    for (const undo of this.#undone) for (const version of undo.before.values()) add(version);
    return ids;
  }

  /** Takes back the last undo: the files as they were just before it. "nothing_to_redo" when none. */
  async redo(): Promise<RestoreResult> {
    if (this.#current) throw new CheckpointError("busy", "a turn is running: redo once it ends");
    const last = this.#undone.pop();
    if (!last) throw new CheckpointError("nothing_to_redo", "nothing was undone since the last turn");
    const files = await this.#restore(last.before);
    this.#done.push(...last.checkpoints);
    this.#scan.clear();
    return { turns: last.checkpoints.map((c) => c.turn), files };
  }

  /**
   * Forgets every checkpoint of the session and removes what was saved for it (the files it
   * changed were thrown away: a task's worktree discarded, the task deleted).
   */
  async clear(): Promise<void> {
    this.#done.length = 0;
    this.#undone.length = 0;
    this.#scan.clear();
    await this.#store.clear();
  }

  /** Writes each version back; an unrecorded one is skipped and said so. */
  async #restore(target: Map<string, Version>): Promise<FileRestore[]> {
    const out: FileRestore[] = [];
    for (const [rel, version] of [...target].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
      try {
        const done = await this.#restoreOne(rel, version);
        if (done) out.push(done);
      } catch (error) {
        // Outside the workspace now (a symlinked folder), a folder in its place…: said, and the rest goes on.
        out.push({ path: rel, action: "skipped", reason: errorMessage(error) });
      }
    }
    return out;
  }

  /**
   * Puts one path back; undefined when it already is as it was. Through the confined layer with the
   * last component never followed: a link the turn left where a file was is replaced by the file,
   * never written through (a link to `.git/hooks/pre-commit` must not become a hook), and protected
   * names are never written by a restore.
   */
  async #restoreOne(rel: string, version: Version): Promise<FileRestore | undefined> {
    if (version.kind === "unrecorded") return { path: rel, action: "skipped", reason: version.reason };
    const workspace = this.#workspace;
    const entry = await workspace.stat(rel, { final: "entry" });
    if (version.kind === "absent") {
      if (!entry) return undefined;
      if (entry.isDirectory()) return { path: rel, action: "skipped", reason: "a directory is there now" };
      await workspace.remove(rel);
      return { path: rel, action: "removed" };
    }
    const bytes = await this.#store.get(version.id);
    if (entry?.isFile() && (entry.mode & 0o7777) === version.mode) {
      const current = await workspace
        .readFile(rel, { final: "entry", maxBytes: MAX_FILE_BYTES, allowEnvFiles: true })
        .catch(() => undefined);
      if (current?.equals(bytes)) return undefined;
    }
    await workspace.writeFile(rel, bytes, { mode: version.mode, final: "entry" });
    return { path: rel, action: entry ? "restored" : "recreated" };
  }

  /** A turn no one began (a tool run outside the agent's turns): counted like one. */
  #startImplicitTurn(): Map<string, Version> {
    this.beginTurn();
    return this.#current!;
  }

  /** The versions of these workspace paths now, their contents stored (read through the confined layer). */
  async #versionsOf(rels: readonly string[]): Promise<Map<string, Version>> {
    const out = new Map<string, Version>();
    const toStore: StoreFile[] = [];
    for (const rel of rels) {
      const info = await this.#workspace.stat(rel, { final: "entry" }).catch(() => undefined);
      if (!info) out.set(rel, { kind: "absent" });
      else if (!info.isFile()) out.set(rel, { kind: "unrecorded", reason: "not a regular file" });
      else if (info.size > MAX_FILE_BYTES) out.set(rel, tooLarge(info.size));
      else toStore.push(this.#storeFile(rel, info.mode & 0o7777));
    }
    const versions = await this.#store.put(toStore);
    toStore.forEach((file, index) => out.set(file.rel, versions[index] ?? { kind: "absent" }));
    return out;
  }

  /**
   * A file to store, its bytes read through the confined layer when the store asks: a regular file
   * only (a link swapped in meanwhile is not followed, a FIFO not waited on), at most `MAX_FILE_BYTES`.
   */
  #storeFile(rel: string, mode: number): StoreFile {
    return {
      rel,
      mode,
      read: () =>
        this.#workspace
          .readFile(rel, { final: "entry", maxBytes: MAX_FILE_BYTES, allowEnvFiles: true })
          .catch(() => undefined),
    };
  }

  /**
   * Every file of the workspace with its version now: files whose stat is as at the last scan keep
   * their stored version, the others are stored again.
   */
  async #scanWorkspace(): Promise<Map<string, Scanned>> {
    const listed = await listFiles(this.#workspace, { limit: MAX_SCAN_FILES });
    const next = new Map<string, Scanned>();
    const toStore: (StoreFile & { key: StatKey })[] = [];
    const now = BigInt(Date.now()) * 1_000_000n;
    const exclude = this.#exclude;
    const rels = listed.files.filter(
      (rel) => exclude === undefined || (rel !== exclude && !rel.startsWith(`${exclude}/`)),
    );
    // Stat data by directory, each walked to once through the confined layer.
    const byDir = new Map<string, string[]>();
    for (const rel of rels) {
      const slash = rel.lastIndexOf("/");
      const dir = slash < 0 ? "" : rel.slice(0, slash);
      byDir.set(dir, [...(byDir.get(dir) ?? []), rel.slice(slash + 1)]);
    }
    const stats = new Map<string, BigIntStats>();
    await mapLimit([...byDir], 8, async ([dir, names]) => {
      const found = await this.#workspace.statEntries(dir, names).catch(() => new Map<string, BigIntStats>());
      for (const [name, info] of found) stats.set(dir === "" ? name : `${dir}/${name}`, info);
    });
    for (const rel of rels) {
      const info = stats.get(rel);
      if (!info?.isFile()) continue; // symlinks are not followed, vanished files are not there
      const key: StatKey = { size: info.size, mtimeNs: info.mtimeNs, ctimeNs: info.ctimeNs, ino: info.ino };
      const known = this.#scan.get(rel);
      if (known && sameKey(known.key, key) && now - key.mtimeNs > RACY_NS && now - key.ctimeNs > RACY_NS) {
        next.set(rel, known);
      } else if (info.size > BigInt(MAX_FILE_BYTES)) {
        next.set(rel, { key, version: tooLarge(Number(info.size)) });
      } else toStore.push({ ...this.#storeFile(rel, Number(info.mode & 0o7777n)), key });
    }
    const versions = await this.#store.put(toStore);
    toStore.forEach((file, index) => {
      const version = versions[index];
      if (version && version.kind !== "absent") next.set(file.rel, { key: file.key, version });
    });
    this.#scan = next;
    return next;
  }
}

/** An undo or redo that cannot be done; `code` is "busy", "nothing_to_undo" or "nothing_to_redo". */
export class CheckpointError extends Error {
  override readonly name = "CheckpointError";
  constructor(
    readonly code: "busy" | "nothing_to_undo" | "nothing_to_redo",
    message: string,
  ) {
    super(message);
  }
}

/** "restored a.txt, removed b.txt, re-created c.txt" (and the skipped ones with why). */
export function describeRestore(result: RestoreResult): string {
  if (result.files.length === 0) return "no file needed a change";
  const words: Record<FileRestore["action"], string> = {
    restored: "restored",
    recreated: "re-created",
    removed: "removed",
    skipped: "could not restore",
  };
  const parts: string[] = [];
  for (const action of ["restored", "recreated", "removed", "skipped"] as const) {
    const files = result.files.filter((f) => f.action === action);
    if (files.length === 0) continue;
    const names = files.map((f) => (f.reason ? `${f.path} (${f.reason})` : f.path));
    parts.push(`${words[action]} ${names.join(", ")}`);
  }
  return parts.join("; ");
}

/** The paths a patch (the `apply_patch` format) writes: its files and their `*** Move to:` targets. */
export function patchPaths(patch: string): string[] {
  return [...patch.matchAll(/^\*\*\* (?:Add File|Update File|Delete File|Move to): *(.+)$/gm)].map((m) =>
    m[1]!.trim(),
  );
}

/** "turn 3" or "turns 2–4". */
export function describeTurns(turns: readonly number[]): string {
  if (turns.length === 1) return `turn ${turns[0]}`;
  return `turns ${turns[0]}–${turns.at(-1)}`;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function tooLarge(size: number): Version {
  return { kind: "unrecorded", reason: `${size} bytes, over the ${MAX_FILE_BYTES / 1024 / 1024} MiB kept` };
}

interface Scanned {
  key: StatKey;
  version: Version;
}

/** Same content and mode; a file too large to store is compared by its stat. */
function sameScanned(a: Scanned, b: Scanned): boolean {
  if (a.version.kind === "unrecorded" && b.version.kind === "unrecorded") return sameKey(a.key, b.key);
  return sameVersion(a.version, b.version);
}

function sameKey(a: StatKey, b: StatKey): boolean {
  return a.size === b.size && a.mtimeNs === b.mtimeNs && a.ctimeNs === b.ctimeNs && a.ino === b.ino;
}

function sameVersion(a: Version, b: Version): boolean {
  if (a.kind === "file" && b.kind === "file") return a.id === b.id && a.mode === b.mode;
  // An unrecorded file cannot be compared: counted as changed, so an undo says it cannot restore it.
  return a.kind === b.kind && a.kind === "absent";
}
