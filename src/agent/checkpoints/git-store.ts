/**
 * The checkpoints' store in a git work tree (checkpoints.ts): contents as blobs of the repository's
 * object database, a checkpoint as a commit under a private ref.
 */
import { rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { neutralGit } from "../neutral-git.js";
import {
  MAX_CHECKPOINTS,
  MAX_FILE_BYTES,
  STALE_MS,
  manifest,
  parseManifest,
  type Checkpoint,
  type Store,
  type StoreFile,
  type Version,
} from "./store.js";

/**
 * Contents in the repository's object database. Blobs are written by `hash-object -w --no-filters`
 * (git reads the files itself, no clean filter runs); a checkpoint is a commit whose tree holds the
 * earlier contents at their paths, made in a temporary index (never the user's) and kept under
 * `refs/spark/checkpoints/SESSION/TURN`.
 */
export class GitStore implements Store {
  readonly kind = "git";
  readonly #prefix: string;
  #parent: string | undefined;

  constructor(
    private readonly root: string,
    session: string,
  ) {
    this.#prefix = `refs/spark/checkpoints/${session}/`;
  }

  async put(files: readonly StoreFile[]): Promise<Version[]> {
    const ids: (string | undefined)[] = [];
    for (let start = 0; start < files.length; start += 500) {
      const batch = files.slice(start, start + 500).map((f) => f.abs);
      try {
        ids.push(...(await this.#hash(batch)));
      } catch {
        // A file vanished (or cannot be read): one at a time, the missing ones absent.
        for (const file of batch) {
          ids.push(
            await this.#hash([file]).then(
              (one) => one[0],
              () => undefined,
            ),
          );
        }
      }
    }
    return files.map((file, index) => {
      const id = ids[index];
      return id === undefined ? { kind: "absent" } : { kind: "file", id, mode: file.mode };
    });
  }

  async #hash(files: readonly string[]): Promise<string[]> {
    const stdout = await neutralGit(
      this.root,
      ["hash-object", "-w", "--no-filters", "--", ...files],
      64 * 1024 * 1024,
    );
    const ids = stdout.toString("utf8").trim().split("\n");
    if (ids.length !== files.length) throw new Error("git hash-object gave a different number of ids");
    return ids;
  }

  get(id: string): Promise<Buffer> {
    return neutralGit(this.root, ["cat-file", "blob", id], MAX_FILE_BYTES + 1024);
  }

  async save(checkpoint: Checkpoint): Promise<void> {
    const index = path.join(
      tmpdir(),
      `spark-checkpoint-${process.pid}-${Math.random().toString(36).slice(2)}`,
    );
    try {
      const entries = [...checkpoint.files].flatMap(([rel, version]) =>
        version.kind === "file"
          ? [`${version.mode & 0o111 ? "100755" : "100644"} ${version.id}\t${rel}\0`]
          : [],
      );
      const env = { GIT_INDEX_FILE: index };
      const git = (args: string[], input?: string): Promise<Buffer> =>
        neutralGit(this.root, args, 1024 * 1024, { env, ...(input === undefined ? {} : { input }) });
      // `--index-info` paths are relative to the repository's top, `rel` to the workspace root.
      const prefix = (await git(["rev-parse", "--show-prefix"])).toString("utf8").trim();
      await git(
        ["update-index", "-z", "--index-info"],
        entries.map((e) => e.replace("\t", `\t${prefix}`)).join(""),
      );
      const tree = (await git(["write-tree"])).toString("utf8").trim();
      const commit = (
        await neutralGit(
          this.root,
          [
            "-c",
            "user.name=Spark",
            "-c",
            "user.email=spark@localhost",
            "commit-tree",
            tree,
            ...(this.#parent ? ["-p", this.#parent] : []),
            "-F",
            "-",
          ],
          1024 * 1024,
          { input: `spark checkpoint: turn ${checkpoint.turn}\n\n${manifest(checkpoint)}\n` },
        )
      )
        .toString("utf8")
        .trim();
      await neutralGit(this.root, ["update-ref", `${this.#prefix}${checkpoint.turn}`, commit]);
      this.#parent = commit;
      // The oldest beyond the cap go (their blobs with them, at git's next gc).
      const turns = await this.#turns();
      for (const turn of turns.slice(0, Math.max(0, turns.length - MAX_CHECKPOINTS))) {
        await neutralGit(this.root, ["update-ref", "-d", `${this.#prefix}${turn}`]).catch(() => undefined);
      }
    } finally {
      await rm(index, { force: true });
    }
  }

  async lastTurn(): Promise<number> {
    return (await this.#turns()).at(-1) ?? 0;
  }

  async clear(): Promise<void> {
    for (const turn of await this.#turns()) {
      await neutralGit(this.root, ["update-ref", "-d", `${this.#prefix}${turn}`]).catch(() => undefined);
    }
    this.#parent = undefined;
  }

  async load(): Promise<Checkpoint[]> {
    const out: Checkpoint[] = [];
    for (const turn of await this.#turns()) {
      const ref = `${this.#prefix}${turn}`;
      const message = await neutralGit(this.root, ["log", "-1", "--format=%B", ref]).catch(() => undefined);
      const text = message?.toString("utf8") ?? "";
      const checkpoint = parseManifest(text.slice(text.indexOf("{")));
      if (checkpoint?.turn === turn) {
        out.push(checkpoint);
        this.#parent = (await neutralGit(this.root, ["rev-parse", ref])).toString("utf8").trim();
      }
    }
    return out;
  }

  async #turns(): Promise<number[]> {
    const refs = await neutralGit(this.root, ["for-each-ref", "--format=%(refname)", this.#prefix]).catch(
      () => Buffer.alloc(0),
    );
    return refs
      .toString("utf8")
      .split("\n")
      .map((ref) => Number(ref.slice(this.#prefix.length)))
      .filter((n) => Number.isInteger(n) && n > 0)
      .sort((a, b) => a - b);
  }

  /** Removes the checkpoint refs of every session untouched for `STALE_MS`. */
  async prune(): Promise<void> {
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
