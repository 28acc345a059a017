/**
 * The checkpoints' store in a git work tree (checkpoints.ts): a bare repository of Spark's own per
 * session, `SPARK_HOME/checkpoints/git/<repository>-<hash>/<session>.git`, whose object database
 * borrows the user's (`objects/info/alternates`), so a file already in the user's repository costs
 * nothing and the user's `.git` never grows: its refs, objects, index and HEAD are never written.
 *
 * - Contents are written by `git fast-import` from bytes the confined layer read (never by git
 *   reading a path a command could swap for a link meanwhile); `fastimport.unpackLimit` keeps them
 *   loose, and blobs the user's repository already has are not written again.
 * - A checkpoint is a commit whose tree holds the earlier contents at their workspace-relative paths,
 *   made in a temporary index, under `refs/spark/checkpoints/TURN`; the manifest is its message.
 * - At most `MAX_STORE_BYTES` per session (as the folder store): past it the oldest checkpoints are
 *   dropped (no undo that far back; `dropped` remembers up to which turn) and the contents no kept
 *   checkpoint and nothing live needs are pruned (the repository is Spark's, so `git prune` there
 *   touches nothing of the user's).
 * - Session repositories untouched for `STALE_MS` are removed when a session of the same
 *   repository opens; refs an earlier version kept in the user's repository
 *   (`refs/spark/checkpoints/…`) are removed once as stale.
 */
import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rm, stat, utimes } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { writeFileAtomic } from "../fs/spark-data.js";
import { neutralGit } from "../sandbox/neutral-git.js";
import {
  MAX_CHECKPOINTS,
  MAX_FILE_BYTES,
  MAX_STORE_BYTES,
  STALE_MS,
  manifest,
  parseManifest,
  type Checkpoint,
  type Store,
  type StoreFile,
  type Version,
} from "./store.js";

/** Bytes sent to one `git fast-import`. */
const IMPORT_BATCH_BYTES = 64 * 1024 * 1024;
const REFS = "refs/spark/checkpoints/";
const LIVE_REF = "refs/spark/live";

export class GitStore implements Store {
  readonly kind = "git";

  get location(): string {
    return this.repo;
  }

  private constructor(
    /** The workspace root (git runs there, for the user's repository). */
    private readonly root: string,
    /** The session's own bare repository. */
    readonly repo: string,
    /** The session's cap (`MAX_STORE_BYTES` unless a test says less). */
    readonly maxBytes: number,
  ) {}

  /**
   * The store of session `session` for the workspace `root` (in a git work tree), its repository
   * made on first use under `home/checkpoints/git`; stale sessions of the same repository removed.
   */
  static async open(
    root: string,
    session: string,
    home: string,
    maxBytes = MAX_STORE_BYTES,
  ): Promise<GitStore> {
    const objects = (await neutralGit(root, ["rev-parse", "--path-format=absolute", "--git-common-dir"]))
      .toString("utf8")
      .trim();
    const key = createHash("sha1").update(objects).digest("hex").slice(0, 8);
    const folder = path.join(
      home,
      "checkpoints",
      "git",
      `${path.basename(path.dirname(objects)) || "repo"}-${key}`,
    );
    await pruneStale(folder, `${session}.git`);
    const repo = path.join(folder, `${session}.git`);
    if (!(await stat(path.join(repo, "HEAD")).catch(() => undefined))) {
      await mkdir(folder, { recursive: true, mode: 0o700 });
      await neutralGit(root, ["init", "--bare", "--quiet", repo]);
    }
    await writeFileAtomic(
      path.join(repo, "objects", "info", "alternates"),
      `${path.join(objects, "objects")}\n`,
    );
    const now = new Date();
    await utimes(repo, now, now).catch(() => undefined);
    return new GitStore(root, repo, maxBytes);
  }

  /** git in the session's repository (the user's objects borrowed, never written). */
  #git(
    args: string[],
    max = 1024 * 1024,
    options: { env?: Record<string, string>; input?: string | Buffer } = {},
  ): Promise<Buffer> {
    return neutralGit(this.root, args, max, {
      ...(options.input === undefined ? {} : { input: options.input }),
      env: { GIT_DIR: this.repo, ...options.env },
    });
  }

  async put(files: readonly StoreFile[]): Promise<Version[]> {
    const out: Version[] = new Array<Version>(files.length);
    let batch: { index: number; bytes: Buffer; mode: number }[] = [];
    let size = 0;
    const flush = async (): Promise<void> => {
      if (batch.length === 0) return;
      const parts: Buffer[] = [];
      batch.forEach((item, n) => {
        parts.push(
          Buffer.from(`blob\nmark :${n + 1}\ndata ${item.bytes.length}\n`),
          item.bytes,
          Buffer.from("\n"),
        );
      });
      parts.push(Buffer.from(batch.map((_, n) => `get-mark :${n + 1}\n`).join("")));
      const ids = (
        await this.#git(
          ["-c", "fastimport.unpackLimit=2147483647", "fast-import", "--quiet"],
          64 * 1024 * 1024,
          {
            input: Buffer.concat(parts),
          },
        )
      )
        .toString("utf8")
        .trim()
        .split("\n");
      if (ids.length !== batch.length) throw new Error("git fast-import gave a different number of ids");
      batch.forEach((item, n) => (out[item.index] = { kind: "file", id: ids[n]!, mode: item.mode }));
      batch = [];
      size = 0;
    };
    for (const [index, file] of files.entries()) {
      const bytes = await file.read();
      if (bytes === undefined) {
        out[index] = { kind: "absent" };
        continue;
      }
      batch.push({ index, bytes, mode: file.mode });
      size += bytes.length;
      if (size >= IMPORT_BATCH_BYTES) await flush();
    }
    await flush();
    return out;
  }

  get(id: string): Promise<Buffer> {
    return this.#git(["cat-file", "blob", id], MAX_FILE_BYTES + 1024);
  }

  /** A commit of `entries` (`MODE ID\tPATH`) with `message`, built in a temporary index. */
  async #commit(entries: string[], message: string): Promise<string> {
    const index = path.join(
      tmpdir(),
      `spark-checkpoint-${process.pid}-${Math.random().toString(36).slice(2)}`,
    );
    try {
      const env = { GIT_INDEX_FILE: index };
      await this.#git(["update-index", "-z", "--index-info"], 1024 * 1024, {
        env,
        input: entries.map((e) => `${e}\0`).join(""),
      });
      const tree = (await this.#git(["write-tree"], 1024 * 1024, { env })).toString("utf8").trim();
      return (
        await this.#git(
          ["-c", "user.name=Spark", "-c", "user.email=spark@localhost", "commit-tree", tree, "-F", "-"],
          1024 * 1024,
          { input: message },
        )
      )
        .toString("utf8")
        .trim();
    } finally {
      await rm(index, { force: true });
    }
  }

  async save(checkpoint: Checkpoint, live: ReadonlySet<string>): Promise<number[]> {
    const entries = [...checkpoint.files].flatMap(([rel, version]) =>
      version.kind === "file" ? [`${version.mode & 0o111 ? "100755" : "100644"} ${version.id}\t${rel}`] : [],
    );
    // No parent: each checkpoint stands alone, so dropping one frees what only it kept.
    const commit = await this.#commit(
      entries,
      `spark checkpoint: turn ${checkpoint.turn}\n\n${manifest(checkpoint)}\n`,
    );
    await this.#git(["update-ref", `${REFS}${checkpoint.turn}`, commit]);
    // The oldest beyond the count go; then, past the bytes, the oldest until it fits.
    const turns = await this.#turns();
    for (const turn of turns.slice(0, Math.max(0, turns.length - MAX_CHECKPOINTS))) await this.#drop(turn);
    const dropped: number[] = [];
    if ((await this.#bytes()) <= this.maxBytes) return dropped;
    await this.#keepLive(live);
    for (const turn of (await this.#turns()).slice(0, -1)) {
      await this.#drop(turn);
      dropped.push(turn);
      await this.#git(["prune", "--expire=now"], 16 * 1024 * 1024);
      if ((await this.#bytes()) <= this.maxBytes) break;
    }
    if (dropped.length > 0)
      await writeFileAtomic(path.join(this.repo, "spark-dropped"), `${dropped.at(-1)}\n`);
    return dropped;
  }

  /** The last turn dropped for the cap (no undo to it or before it); 0 when none. */
  async droppedUpTo(): Promise<number> {
    const text = await readFile(path.join(this.repo, "spark-dropped"), "utf8").catch(() => "0");
    return Number(text.trim()) || 0;
  }

  /** A ref to a commit holding every live content, so that `git prune` keeps them. */
  async #keepLive(live: ReadonlySet<string>): Promise<void> {
    const entries = [...live].map((id, n) => `100644 ${id}\tlive/${n}`);
    const commit = await this.#commit(entries, "spark: contents in use\n");
    await this.#git(["update-ref", LIVE_REF, commit]);
  }

  async #drop(turn: number): Promise<void> {
    await this.#git(["update-ref", "-d", `${REFS}${turn}`]).catch(() => undefined);
  }

  /** Bytes of the session repository's own objects (`git count-objects`). */
  async #bytes(): Promise<number> {
    const out = (await this.#git(["count-objects", "-v"])).toString("utf8");
    const kib = (name: string): number => Number(new RegExp(`^${name}: (\\d+)$`, "m").exec(out)?.[1] ?? 0);
    return (kib("size") + kib("size-pack")) * 1024;
  }

  async lastTurn(): Promise<number> {
    return (await this.#turns()).at(-1) ?? 0;
  }

  async clear(): Promise<void> {
    await rm(this.repo, { recursive: true, force: true });
    await neutralGit(this.root, ["init", "--bare", "--quiet", this.repo]);
  }

  async load(): Promise<Checkpoint[]> {
    const out: Checkpoint[] = [];
    for (const turn of await this.#turns()) {
      const ref = `${REFS}${turn}`;
      const message = await this.#git(["log", "-1", "--format=%B", ref]).catch(() => undefined);
      const text = message?.toString("utf8") ?? "";
      const checkpoint = parseManifest(text.slice(text.indexOf("{")));
      if (checkpoint?.turn === turn) out.push(checkpoint);
    }
    return out;
  }

  async #turns(): Promise<number[]> {
    const refs = await this.#git(["for-each-ref", "--format=%(refname)", REFS]).catch(() => Buffer.alloc(0));
    return refs
      .toString("utf8")
      .split("\n")
      .map((ref) => Number(ref.slice(REFS.length)))
      .filter((n) => Number.isInteger(n) && n > 0)
      .sort((a, b) => a - b);
  }

  /** Removes the checkpoint refs an earlier version kept in the user's repository, once stale. */
  async pruneLegacyRefs(): Promise<void> {
    const lines = await neutralGit(this.root, [
      "for-each-ref",
      "--format=%(refname) %(committerdate:unix)",
      "refs/spark/checkpoints/",
    ]).catch(() => Buffer.alloc(0));
    const cutoff = (Date.now() - STALE_MS) / 1000;
    for (const line of lines.toString("utf8").split("\n")) {
      const [ref, date] = line.split(" ");
      if (ref && Number(date) < cutoff) {
        await neutralGit(this.root, ["update-ref", "-d", ref]).catch(() => undefined);
      }
    }
  }
}

/** Removes the session repositories in `folder` untouched for `STALE_MS` (never `keep`). */
async function pruneStale(folder: string, keep: string): Promise<void> {
  const cutoff = Date.now() - STALE_MS;
  for (const name of await readdir(folder).catch((): string[] => [])) {
    if (name === keep || !name.endsWith(".git")) continue;
    const info = await stat(path.join(folder, name)).catch(() => undefined);
    if (info?.isDirectory() && info.mtimeMs < cutoff)
      await rm(path.join(folder, name), { recursive: true, force: true });
  }
}
