/**
 * The checkpoints' store outside git (checkpoints.ts): contents as files named by their SHA-256 in
 * Spark's own folder, a manifest per checkpoint.
 */
import { createHash } from "node:crypto";
import { mkdir, readdir, readFile, rename, rm, stat, utimes, writeFile } from "node:fs/promises";
import path from "node:path";
import {
  MAX_CHECKPOINTS,
  MAX_STORE_BYTES,
  STALE_MS,
  manifest,
  mapLimit,
  parseManifest,
  type Checkpoint,
  type Store,
  type StoreFile,
  type Version,
} from "./store.js";

/** Contents as files named by their SHA-256 in Spark's own folder, for workspaces outside git. */
export class FolderStore implements Store {
  readonly kind = "folder";

  get location(): string {
    return this.dir;
  }
  #bytes = 0;
  /** The objects stored (their names). */
  readonly #known = new Set<string>();

  private constructor(
    private readonly dir: string,
    /** The session's cap (`MAX_STORE_BYTES` unless a test says less). */
    readonly maxBytes: number,
  ) {}

  static async open(dir: string, maxBytes = MAX_STORE_BYTES): Promise<FolderStore> {
    await mkdir(path.join(dir, "objects"), { recursive: true });
    const store = new FolderStore(dir, maxBytes);
    for (const name of await readdir(path.join(dir, "objects")).catch(() => [])) {
      if (/^[0-9a-f]{64}$/.test(name)) store.#known.add(name);
      store.#bytes += (await stat(path.join(dir, "objects", name)).catch(() => ({ size: 0 }))).size;
    }
    // Marks the session as in use (stale sessions are pruned by their folder's time).
    const now = new Date();
    await utimes(dir, now, now).catch(() => undefined);
    return store;
  }

  put(files: readonly StoreFile[]): Promise<Version[]> {
    return mapLimit(files, 16, async (file): Promise<Version> => {
      const bytes = await file.read();
      if (!bytes) return { kind: "absent" };
      const id = createHash("sha256").update(bytes).digest("hex");
      const target = path.join(this.dir, "objects", id);
      if (this.#known.has(id)) return { kind: "file", id, mode: file.mode };
      if (this.#bytes + bytes.length > this.maxBytes) {
        return {
          kind: "unrecorded",
          reason: `the session's checkpoints reached ${this.maxBytes / 2 ** 20} MiB`,
        };
      }
      this.#bytes += bytes.length;
      this.#known.add(id);
      // Written under a temporary name and renamed: an object is whole or absent.
      const temp = `${target}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
      try {
        await writeFile(temp, bytes, { flag: "wx" });
        await rename(temp, target);
      } catch (error) {
        this.#known.delete(id);
        this.#bytes -= bytes.length;
        await rm(temp, { force: true });
        throw error;
      }
      return { kind: "file", id, mode: file.mode };
    });
  }

  get(id: string): Promise<Buffer> {
    if (!/^[0-9a-f]{64}$/.test(id)) throw new Error(`not a checkpoint object: ${id}`);
    return readFile(path.join(this.dir, "objects", id));
  }

  async save(checkpoint: Checkpoint): Promise<number[]> {
    await writeFile(path.join(this.dir, `${checkpoint.turn}.json`), manifest(checkpoint));
    const turns = await this.#turns();
    for (const turn of turns.slice(0, Math.max(0, turns.length - MAX_CHECKPOINTS))) {
      await rm(path.join(this.dir, `${turn}.json`), { force: true });
    }
    return [];
  }

  async lastTurn(): Promise<number> {
    return (await this.#turns()).at(-1) ?? 0;
  }

  async clear(): Promise<void> {
    await rm(this.dir, { recursive: true, force: true });
    this.#known.clear();
    this.#bytes = 0;
    await mkdir(path.join(this.dir, "objects"), { recursive: true });
  }

  async load(): Promise<Checkpoint[]> {
    const out: Checkpoint[] = [];
    for (const turn of await this.#turns()) {
      const text = await readFile(path.join(this.dir, `${turn}.json`), "utf8").catch(() => "");
      const checkpoint = parseManifest(text);
      if (checkpoint?.turn === turn) out.push(checkpoint);
    }
    return out;
  }

  async #turns(): Promise<number[]> {
    return (await readdir(this.dir).catch(() => []))
      .map((name) => (/^(\d+)\.json$/.exec(name) ? Number(name.slice(0, -5)) : 0))
      .filter((n) => n > 0)
      .sort((a, b) => a - b);
  }
}

/** Removes the session folders under `base` untouched for `STALE_MS` (never `keep`). */
export async function pruneFolders(base: string, keep: string): Promise<void> {
  const cutoff = Date.now() - STALE_MS;
  for (const name of await readdir(base).catch(() => [])) {
    if (name === keep) continue;
    const info = await stat(path.join(base, name)).catch(() => undefined);
    if (info?.isDirectory() && info.mtimeMs < cutoff) {
      await rm(path.join(base, name), { recursive: true, force: true });
    }
  }
}
