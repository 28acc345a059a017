/**
 * Where the llama.cpp engine gets its GGUF file: `--model`, then `SPARK_MODEL`, then the cache, then a
 * verified download of the default model into the cache. Every failure is a `SparkError` whose message
 * names the path or URL and says how to fix it, because this is the first thing a new user runs into.
 */
import { createHash, type Hash } from "node:crypto";
import { createReadStream } from "node:fs";
import { mkdir, open, rename, rm, stat, type FileHandle } from "node:fs/promises";
import { homedir } from "node:os";
import path from "node:path";
import { EnvHttpProxyAgent, fetch, type Dispatcher, type Response } from "undici";
import { SparkError } from "../../protocol/errors.js";

export interface DefaultModel {
  url: string;
  fileName: string;
  /** Hex sha256 of the file; when absent the server-provided checksum (if any) is used. */
  sha256?: string;
  sizeBytes?: number;
  description: string;
}

export const DEFAULT_MODEL: DefaultModel = {
  url: "https://huggingface.co/Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF/resolve/main/qwen2.5-coder-0.5b-instruct-q8_0.gguf",
  fileName: "qwen2.5-coder-0.5b-instruct-q8_0.gguf",
  // Hugging Face LFS oid of this file (revision ebb2015119c907b064c512bf053e945850b5875f).
  sha256: "e1a77721fa97d412f121878223eec81fb4ae6f271e18f922d746711f67b344d1",
  sizeBytes: 675_710_848,
  description: "Qwen2.5-Coder-0.5B-Instruct Q8_0 (~676 MB)",
};

export interface DownloadProgress {
  receivedBytes: number;
  totalBytes?: number;
}

export type ProgressCallback = (p: DownloadProgress) => void;

export function defaultCacheDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env.SPARK_CACHE_DIR) return path.resolve(expandHome(env.SPARK_CACHE_DIR, env));
  if (env.XDG_CACHE_HOME) return path.join(path.resolve(env.XDG_CACHE_HOME), "spark", "models");
  return path.join(env.HOME || homedir(), ".cache", "spark", "models");
}

export interface ResolveModelOptions {
  /** From `--model`. */
  explicitPath?: string;
  /** From `SPARK_MODEL`. */
  envPath?: string;
  cacheDir: string;
  defaultModel: DefaultModel;
  /** Whether the default model may be downloaded when nothing else is found. */
  download: boolean;
  progress?: ProgressCallback;
  signal?: AbortSignal;
}

export interface ResolvedModel {
  path: string;
  source: "flag" | "env" | "cache" | "download";
}

export async function resolveModelPath(options: ResolveModelOptions): Promise<ResolvedModel> {
  if (options.explicitPath) {
    const file = path.resolve(expandHome(options.explicitPath));
    await assertGgufFile(file, "--model");
    return { path: file, source: "flag" };
  }
  if (options.envPath) {
    const file = path.resolve(expandHome(options.envPath));
    await assertGgufFile(file, "SPARK_MODEL");
    return { path: file, source: "env" };
  }
  const cached = path.join(options.cacheDir, options.defaultModel.fileName);
  if (await exists(cached)) {
    await assertGgufFile(cached, "cache");
    return { path: cached, source: "cache" };
  }
  if (!options.download) {
    throw SparkError.invalid(
      `No model file found and automatic download is disabled. ${howToPointAtAFile(cached)}`,
      "model",
      "model_not_found",
    );
  }
  await downloadModel(options.defaultModel.url, cached, {
    ...(options.defaultModel.sha256 !== undefined && { sha256: options.defaultModel.sha256 }),
    ...(options.progress && { progress: options.progress }),
    ...(options.signal && { signal: options.signal }),
  });
  return { path: cached, source: "download" };
}

export interface DownloadOptions {
  /** Expected hex sha256; overrides any checksum the server announces. */
  sha256?: string;
  progress?: ProgressCallback;
  signal?: AbortSignal;
}

/**
 * Downloads `url` to `destination` via `destination.part`, verifying sha256 (given, else announced by
 * the server as a 64-hex `x-linked-etag`/`etag`, as Hugging Face does for LFS files) before an atomic
 * rename. The .part file is removed on abort and on checksum mismatch; after a network failure it is
 * kept only when `sha256` is given, so the next call can resume it with a Range request (the final
 * checksum still guards the joined result).
 */
export async function downloadModel(url: string, destination: string, options: DownloadOptions = {}) {
  const { signal, progress } = options;
  signal?.throwIfAborted();
  const part = `${destination}.part`;
  const expected = options.sha256?.toLowerCase();
  const resumable = expected !== undefined;
  await mkdir(path.dirname(destination), { recursive: true });

  let offset = resumable ? await sizeOf(part) : 0;
  let hash = createHash("sha256");
  try {
    if (offset > 0) await hashFile(part, hash, signal);

    let got = await get(url, offset, destination, signal);
    if (offset > 0 && got.response.status === 416) {
      await got.response.body?.cancel();
      // Already complete (interrupted before the rename)?
      if (hash.copy().digest("hex") === expected) {
        await rename(part, destination);
        return;
      }
      // Not a prefix the server can continue (e.g. the file changed upstream): start over.
      offset = 0;
      hash = createHash("sha256");
      got = await get(url, 0, destination, signal);
    }
    const { response, announcedSha256 } = got;
    if (response.status !== 200 && response.status !== 206) {
      await response.body?.cancel();
      throw downloadFailed(url, destination, `the server answered HTTP ${response.status}`);
    }
    if (response.status === 206 && rangeStart(response) !== offset) {
      await response.body?.cancel();
      throw downloadFailed(url, destination, "the server answered with an unexpected byte range");
    }
    if (response.status === 200 && offset > 0) {
      offset = 0;
      hash = createHash("sha256");
    }
    const checksum = expected ?? announcedSha256;
    const length = Number(response.headers.get("content-length") ?? NaN);
    const totalBytes = Number.isFinite(length) ? offset + length : undefined;

    let received = offset;
    const file = await open(part, offset > 0 ? "a" : "w");
    try {
      progress?.({ receivedBytes: received, ...(totalBytes !== undefined && { totalBytes }) });
      if (response.body) {
        try {
          for await (const chunk of response.body) {
            hash.update(chunk);
            await file.write(chunk);
            received += chunk.byteLength;
            progress?.({ receivedBytes: received, ...(totalBytes !== undefined && { totalBytes }) });
          }
        } catch (error) {
          if (signal?.aborted) throw error;
          throw downloadFailed(url, destination, `the connection failed mid-download (${describe(error)})`);
        }
      }
      if (totalBytes !== undefined && received !== totalBytes) {
        throw downloadFailed(url, destination, `received ${received} of ${totalBytes} bytes`);
      }
      await file.sync();
    } finally {
      await file.close();
    }

    const actual = hash.digest("hex");
    if (checksum !== undefined && actual !== checksum) {
      await rm(part, { force: true });
      throw new SparkError(
        502,
        "server_error",
        "model_checksum_mismatch",
        `The file downloaded from ${url} is corrupt or not the expected one: sha256 ${actual}, expected ${checksum}. ` +
          `It was deleted; try again, or download it yourself and pass it with \`spark serve --model /path/to/model.gguf\`.`,
      );
    }
    await rename(part, destination);
  } catch (error) {
    const keepForResume = resumable && !signal?.aborted && isCode(error, "model_download_failed");
    if (!keepForResume) await rm(part, { force: true });
    if (signal?.aborted) throw signal.reason;
    throw error;
  }
}

/** Draws download progress on `stream`: one redrawn line on a TTY, a line per ~10% otherwise. */
export function progressBar(
  stream: NodeJS.WriteStream = process.stderr,
): ProgressCallback & { done(): void } {
  const started = Date.now();
  let startBytes: number | undefined;
  let last: DownloadProgress | undefined;
  let lastDraw = 0;
  let lastStep = -1;
  const mb = (n: number) => (n / 1e6).toFixed(1);
  const line = ({ receivedBytes: got, totalBytes: total }: DownloadProgress) => {
    const seconds = Math.max((Date.now() - started) / 1000, 0.001);
    const speed = `${mb((got - (startBytes ?? 0)) / seconds)} MB/s`;
    if (!total) return `${mb(got)} MB  ${speed}`;
    const ratio = Math.min(got / total, 1);
    const bar = "#".repeat(Math.round(ratio * 24)).padEnd(24, "-");
    return `[${bar}] ${(ratio * 100).toFixed(0).padStart(3)}%  ${mb(got)}/${mb(total)} MB  ${speed}`;
  };
  const step = (p: DownloadProgress) =>
    p.totalBytes ? Math.floor((p.receivedBytes / p.totalBytes) * 10) : Math.floor(p.receivedBytes / 1e8);

  const update = (p: DownloadProgress) => {
    startBytes ??= p.receivedBytes;
    last = p;
    if (stream.isTTY) {
      const now = Date.now();
      if (now - lastDraw < 100) return;
      lastDraw = now;
      stream.write(`\r${line(p)}\x1b[K`);
    } else if (step(p) > lastStep) {
      lastStep = step(p);
      stream.write(`${line(p)}\n`);
    }
  };
  return Object.assign(update, {
    done() {
      if (!last) return;
      if (stream.isTTY) stream.write(`\r${line(last)}\x1b[K\n`);
      else if (step(last) !== lastStep || lastStep < 0) stream.write(`${line(last)}\n`);
      last = undefined;
    },
  });
}

// ---------------------------------------------------------------------------------------------------

const SHA256_HEX = /^[0-9a-f]{64}$/;

let proxyAgent: Dispatcher | undefined;

/**
 * GETs `url` following redirects by hand, because Hugging Face puts the file's sha256 (`x-linked-etag`)
 * on the redirect, not on the CDN response that carries the bytes.
 */
async function get(url: string, offset: number, destination: string, signal: AbortSignal | undefined) {
  let current = url;
  let announcedSha256: string | undefined;
  if (
    process.env.HTTPS_PROXY ||
    process.env.https_proxy ||
    process.env.HTTP_PROXY ||
    process.env.http_proxy
  ) {
    proxyAgent ??= new EnvHttpProxyAgent();
  }
  for (let hop = 0; hop <= 10; hop++) {
    let response: Response;
    try {
      response = await fetch(current, {
        redirect: "manual",
        headers: offset > 0 ? { range: `bytes=${offset}-` } : {},
        ...(signal && { signal }),
        ...(proxyAgent && { dispatcher: proxyAgent }),
      });
    } catch (error) {
      if (signal?.aborted) throw signal.reason;
      throw downloadFailed(url, destination, describe(error));
    }
    announcedSha256 ??= checksumHeader(response, "x-linked-etag");
    const location = response.headers.get("location");
    if (response.status >= 300 && response.status < 400 && location) {
      await response.body?.cancel();
      current = new URL(location, current).href;
      continue;
    }
    announcedSha256 ??= checksumHeader(response, "etag");
    return { response, announcedSha256 };
  }
  throw downloadFailed(url, destination, "too many redirects");
}

function checksumHeader(response: Response, name: string): string | undefined {
  const value = response.headers.get(name)?.replace(/^W\//, "").replace(/^"|"$/g, "").toLowerCase();
  return value !== undefined && SHA256_HEX.test(value) ? value : undefined;
}

function rangeStart(response: Response): number | undefined {
  const match = /^bytes (\d+)-/.exec(response.headers.get("content-range") ?? "");
  return match?.[1] !== undefined ? Number(match[1]) : undefined;
}

async function hashFile(file: string, hash: Hash, signal: AbortSignal | undefined) {
  for await (const chunk of createReadStream(file, signal ? { signal } : {})) hash.update(chunk as Buffer);
}

function downloadFailed(url: string, destination: string, reason: string): SparkError {
  return new SparkError(
    502,
    "server_error",
    "model_download_failed",
    `Could not download the model from ${url}: ${reason}. ${howToPointAtAFile(destination)}`,
  );
}

function howToPointAtAFile(cachePath: string): string {
  return (
    "To use a GGUF model file you already have, run `spark serve --model /path/to/model.gguf`, " +
    `or set SPARK_MODEL=/path/to/model.gguf, or put the file at ${cachePath}.`
  );
}

/** Checks that `file` is a readable regular file starting with the GGUF magic. */
async function assertGgufFile(file: string, origin: "--model" | "SPARK_MODEL" | "cache"): Promise<void> {
  const from = origin === "cache" ? "the model cache" : origin;
  const fix =
    origin === "cache"
      ? "Delete it so Spark downloads the default model again, or pass a model with `--model`."
      : `Point ${origin} at a llama.cpp GGUF model file (*.gguf).`;
  const invalid = (what: string) =>
    SparkError.invalid(`Model file ${file} (from ${from}) ${what}. ${fix}`, "model", "invalid_model_file");

  let handle: FileHandle;
  try {
    const info = await stat(file);
    if (!info.isFile()) throw invalid("is not a regular file");
    handle = await open(file, "r");
  } catch (error) {
    if (error instanceof SparkError) throw error;
    if (isErrno(error, "ENOENT") || isErrno(error, "ENOTDIR")) {
      throw SparkError.invalid(
        `Model file not found: ${file} (from ${from}). ${fix}`,
        "model",
        "model_not_found",
      );
    }
    throw invalid(`cannot be read (${describe(error)})`);
  }
  try {
    const magic = Buffer.alloc(4);
    const { bytesRead } = await handle.read(magic, 0, 4, 0);
    if (bytesRead < 4 || magic.toString("latin1") !== "GGUF") {
      throw invalid("is not a GGUF file (it does not start with the GGUF magic bytes)");
    }
  } finally {
    await handle.close();
  }
}

function expandHome(p: string, env: NodeJS.ProcessEnv = process.env): string {
  if (p === "~") return env.HOME || homedir();
  if (p.startsWith("~/")) return path.join(env.HOME || homedir(), p.slice(2));
  return p;
}

async function exists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  );
}

async function sizeOf(file: string): Promise<number> {
  return stat(file).then(
    (s) => (s.isFile() ? s.size : 0),
    () => 0,
  );
}

/** Network errors from undici hide the useful part (ECONNREFUSED, ENOTFOUND …) in `cause`. */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause;
  if (cause instanceof Error) {
    const code = (cause as NodeJS.ErrnoException).code;
    return code && !cause.message.includes(code) ? `${code}: ${cause.message}` : cause.message;
  }
  return error.message;
}

function isErrno(error: unknown, code: string): boolean {
  return error instanceof Error && (error as NodeJS.ErrnoException).code === code;
}

function isCode(error: unknown, code: string): boolean {
  return error instanceof SparkError && error.code === code;
}
