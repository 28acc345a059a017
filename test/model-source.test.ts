import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { copyFile, mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import {
  defaultCacheDir,
  downloadModel,
  progressBar,
  resolveModelPath,
  type DefaultModel,
  type DownloadProgress,
} from "../src/engines/llama/model-source.js";
import { SparkError } from "../src/protocol/errors.js";

const MODEL_PATH =
  process.env.SPARK_TEST_MODEL ??
  fileURLToPath(new URL("../../shared/models/tiny-random-llama.gguf", import.meta.url));
const modelMissing = !existsSync(MODEL_PATH);

type Handler = (req: IncomingMessage, res: ServerResponse) => void;

/** Starts a real HTTP server on 127.0.0.1:0 for the duration of `fn`. */
async function withServer<T>(handler: Handler, fn: (base: string) => Promise<T>): Promise<T> {
  const server: Server = createServer(handler);
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  try {
    return await fn(`http://127.0.0.1:${port}`);
  } finally {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

/** Serves `body` with Content-Length and honours `Range: bytes=N-`. */
function serveBytes(body: Buffer, headers: Record<string, string> = {}): Handler {
  return (req, res) => {
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? "");
    const start = range?.[1] !== undefined ? Number(range[1]) : 0;
    if (start >= body.length && start > 0) {
      res.writeHead(416).end();
      return;
    }
    const slice = body.subarray(start);
    res.writeHead(range ? 206 : 200, {
      "content-type": "application/octet-stream",
      "content-length": String(slice.length),
      ...(range && { "content-range": `bytes ${start}-${body.length - 1}/${body.length}` }),
      ...headers,
    });
    res.end(slice);
  };
}

/** Sends full headers and the first half of the body, then kills the socket. */
function dropMidBody(body: Buffer): Handler {
  return (_req, res) => {
    res.writeHead(200, { "content-length": String(body.length) });
    res.write(body.subarray(0, Math.floor(body.length / 2)), () => setTimeout(() => res.destroy(), 20));
  };
}

async function expectSparkError(promise: Promise<unknown>, code: string): Promise<SparkError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof SparkError, `expected SparkError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    return error;
  }
  assert.fail(`expected a SparkError with code ${code}`);
}

let tmp: string;
before(async () => {
  tmp = await mkdtemp(path.join(tmpdir(), "spark-model-source-"));
});
after(async () => {
  await rm(tmp, { recursive: true, force: true });
});

async function freshDir(): Promise<string> {
  return mkdtemp(path.join(tmp, "case-"));
}

describe("downloadModel", { skip: modelMissing && `test model not found at ${MODEL_PATH}` }, () => {
  let model: Buffer;
  let sha256: string;
  before(async () => {
    model = await readFile(MODEL_PATH);
    sha256 = createHash("sha256").update(model).digest("hex");
  });

  test("downloads with the given sha256 and reports increasing progress", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "sub", "model.gguf");
    const seen: DownloadProgress[] = [];
    await withServer(serveBytes(model), (base) =>
      downloadModel(`${base}/model.gguf`, dest, { sha256, progress: (p) => seen.push(p) }),
    );
    assert.ok((await readFile(dest)).equals(model));
    assert.equal(existsSync(`${dest}.part`), false);
    assert.ok(seen.length >= 2);
    for (let i = 1; i < seen.length; i++) {
      assert.ok(seen[i]!.receivedBytes >= seen[i - 1]!.receivedBytes);
    }
    assert.deepEqual(seen.at(-1), { receivedBytes: model.length, totalBytes: model.length });
  });

  test("verifies against a server-provided x-linked-etag checksum", async () => {
    const dir = await freshDir();
    const good = path.join(dir, "good.gguf");
    await withServer(serveBytes(model, { "x-linked-etag": `"${sha256}"` }), (base) =>
      downloadModel(`${base}/m`, good),
    );
    assert.ok((await readFile(good)).equals(model));

    const bad = path.join(dir, "bad.gguf");
    await withServer(serveBytes(model, { "x-linked-etag": `"${"0".repeat(64)}"` }), (base) =>
      expectSparkError(downloadModel(`${base}/m`, bad), "model_checksum_mismatch"),
    );
    assert.deepEqual(await readdir(dir), ["good.gguf"]);
  });

  test("a wrong sha256 leaves neither the file nor the .part behind", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "model.gguf");
    const error = await withServer(serveBytes(model), (base) =>
      expectSparkError(
        downloadModel(`${base}/m`, dest, { sha256: "f".repeat(64) }),
        "model_checksum_mismatch",
      ),
    );
    assert.match(error.message, /sha256/);
    assert.deepEqual(await readdir(dir), []);
  });

  test("follows a 302 redirect and takes the checksum announced on it (Hugging Face style)", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "model.gguf");
    const serve = serveBytes(model, { etag: '"not-a-sha"' });
    const paths: string[] = [];
    await withServer(
      (req, res) => {
        paths.push(req.url ?? "");
        if (req.url === "/resolve/main/model.gguf") {
          res.writeHead(302, { location: "/cdn/blob?sig=1", "x-linked-etag": `"${sha256}"` }).end();
        } else serve(req, res);
      },
      (base) => downloadModel(`${base}/resolve/main/model.gguf`, dest),
    );
    assert.deepEqual(paths, ["/resolve/main/model.gguf", "/cdn/blob?sig=1"]);
    assert.ok((await readFile(dest)).equals(model));
  });

  test("a connection dropped mid-body fails without a file at the destination", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "model.gguf");
    const error = await withServer(dropMidBody(model), (base) =>
      expectSparkError(downloadModel(`${base}/m`, dest), "model_download_failed"),
    );
    assert.match(error.message, /--model/);
    assert.deepEqual(await readdir(dir), [], "no checksum known, so nothing is kept for resuming");
  });

  test("with a known sha256 a dropped download is resumed with a Range request", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "model.gguf");
    await withServer(dropMidBody(model), (base) =>
      expectSparkError(downloadModel(`${base}/m`, dest, { sha256 }), "model_download_failed"),
    );
    assert.equal(existsSync(dest), false);
    assert.ok(existsSync(`${dest}.part`));

    const ranges: (string | undefined)[] = [];
    const seen: DownloadProgress[] = [];
    const serve = serveBytes(model);
    await withServer(
      (req, res) => {
        ranges.push(req.headers.range);
        serve(req, res);
      },
      (base) => downloadModel(`${base}/m`, dest, { sha256, progress: (p) => seen.push(p) }),
    );
    assert.equal(ranges.length, 1);
    assert.match(ranges[0] ?? "", /^bytes=[1-9]\d*-$/);
    assert.ok(seen[0]!.receivedBytes > 0);
    assert.deepEqual(seen.at(-1), { receivedBytes: model.length, totalBytes: model.length });
    assert.ok((await readFile(dest)).equals(model));
    assert.deepEqual(await readdir(dir), ["model.gguf"]);
  });

  test("a resumed .part that does not match is discarded by the checksum", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "model.gguf");
    await writeFile(`${dest}.part`, Buffer.alloc(1000, 7));
    await withServer(serveBytes(model), (base) =>
      expectSparkError(downloadModel(`${base}/m`, dest, { sha256 }), "model_checksum_mismatch"),
    );
    assert.deepEqual(await readdir(dir), []);
  });

  test("a complete .part left before the rename is verified and kept", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "model.gguf");
    await writeFile(`${dest}.part`, model);
    const statuses: number[] = [];
    const serve = serveBytes(model);
    await withServer(
      (req, res) => {
        res.on("finish", () => statuses.push(res.statusCode));
        serve(req, res);
      },
      (base) => downloadModel(`${base}/m`, dest, { sha256 }),
    );
    assert.deepEqual(statuses, [416]);
    assert.ok((await readFile(dest)).equals(model));
    assert.deepEqual(await readdir(dir), ["model.gguf"]);
  });

  test("HTTP 404 fails with the status in the message", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "model.gguf");
    const error = await withServer(
      (_req, res) => res.writeHead(404).end("nope"),
      (base) => expectSparkError(downloadModel(`${base}/missing.gguf`, dest), "model_download_failed"),
    );
    assert.match(error.message, /404/);
    assert.match(error.message, /missing\.gguf/);
    assert.deepEqual(await readdir(dir), []);
  });

  test("aborting via the signal removes the .part file", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "model.gguf");
    const controller = new AbortController();
    await withServer(
      (_req, res) => {
        // Half the body, then stall until the client gives up.
        res.writeHead(200, { "content-length": String(model.length) });
        res.write(model.subarray(0, Math.floor(model.length / 2)));
      },
      async (base) => {
        const download = downloadModel(`${base}/m`, dest, {
          sha256,
          signal: controller.signal,
          progress: (p) => {
            if (p.receivedBytes > 0) controller.abort();
          },
        });
        await assert.rejects(
          download,
          (error: unknown) => error instanceof Error && error.name === "AbortError",
        );
      },
    );
    assert.deepEqual(await readdir(dir), []);
  });
});

describe("downloadModel without a server", () => {
  test("connection refused gives a helpful model_download_failed", async () => {
    const dir = await freshDir();
    const dest = path.join(dir, "model.gguf");
    const url = await withServer(
      () => undefined,
      async (base) => `${base}/model.gguf`,
    ); // the port is closed now
    const error = await expectSparkError(downloadModel(url, dest), "model_download_failed");
    assert.ok(error.message.includes(`Could not download the model from ${url}`), error.message);
    assert.match(error.message, /ECONNREFUSED/);
    assert.match(error.message, /spark serve --model \/path\/to\/model\.gguf/);
    assert.match(error.message, /SPARK_MODEL=\/path\/to\/model\.gguf/);
    assert.ok(error.message.includes(dest));
    assert.deepEqual(await readdir(dir), []);
  });
});

describe("resolveModelPath", { skip: modelMissing && `test model not found at ${MODEL_PATH}` }, () => {
  test("order: flag > env > cache > download", async () => {
    const dir = await freshDir();
    const flag = path.join(dir, "flag.gguf");
    const env = path.join(dir, "env.gguf");
    const cacheDir = path.join(dir, "cache");
    await copyFile(MODEL_PATH, flag);
    await copyFile(MODEL_PATH, env);
    const model = await readFile(MODEL_PATH);

    await withServer(serveBytes(model), async (base) => {
      const defaultModel: DefaultModel = {
        url: `${base}/default.gguf`,
        fileName: "default.gguf",
        sha256: createHash("sha256").update(model).digest("hex"),
        description: "test",
      };
      const common = { cacheDir, defaultModel, download: true };

      assert.deepEqual(await resolveModelPath({ ...common, explicitPath: flag, envPath: env }), {
        path: flag,
        source: "flag",
      });
      assert.deepEqual(await resolveModelPath({ ...common, envPath: env }), { path: env, source: "env" });

      const cached = path.join(cacheDir, "default.gguf");
      assert.deepEqual(await resolveModelPath(common), { path: cached, source: "download" });
      assert.ok((await readFile(cached)).equals(model));
      assert.deepEqual(await resolveModelPath(common), { path: cached, source: "cache" });

      await rm(cached);
      const error = await expectSparkError(
        resolveModelPath({ ...common, download: false }),
        "model_not_found",
      );
      assert.ok(error.message.includes(cached));
      assert.match(error.message, /--model/);
    });
  });
});

describe("resolveModelPath file checks", () => {
  const defaultModel: DefaultModel = {
    url: "http://127.0.0.1:9/x.gguf",
    fileName: "x.gguf",
    description: "-",
  };

  test("a non-GGUF explicit file is invalid_model_file", async () => {
    const dir = await freshDir();
    const file = path.join(dir, "model.bin");
    await writeFile(file, "this is not a model");
    const error = await expectSparkError(
      resolveModelPath({ explicitPath: file, cacheDir: dir, defaultModel, download: false }),
      "invalid_model_file",
    );
    assert.equal(error.status, 400);
    assert.ok(error.message.includes(file));
    assert.match(error.message, /GGUF/);
  });

  test("a directory or a missing path is rejected with the path and its origin", async () => {
    const dir = await freshDir();
    await expectSparkError(
      resolveModelPath({ explicitPath: dir, cacheDir: dir, defaultModel, download: false }),
      "invalid_model_file",
    );
    const missing = path.join(dir, "nope.gguf");
    const error = await expectSparkError(
      resolveModelPath({ envPath: missing, cacheDir: dir, defaultModel, download: false }),
      "model_not_found",
    );
    assert.ok(error.message.includes(missing));
    assert.match(error.message, /SPARK_MODEL/);
  });

  test("an explicit path wins even when it is broken (no silent fallback)", async () => {
    const dir = await freshDir();
    await mkdir(path.join(dir, "cache"));
    await expectSparkError(
      resolveModelPath({
        explicitPath: path.join(dir, "missing.gguf"),
        envPath: MODEL_PATH,
        cacheDir: path.join(dir, "cache"),
        defaultModel,
        download: false,
      }),
      "model_not_found",
    );
  });
});

describe("defaultCacheDir", () => {
  test("SPARK_CACHE_DIR, then XDG_CACHE_HOME, then ~/.cache", () => {
    assert.equal(defaultCacheDir({ SPARK_CACHE_DIR: "/a/b", XDG_CACHE_HOME: "/x", HOME: "/h" }), "/a/b");
    assert.equal(defaultCacheDir({ XDG_CACHE_HOME: "/x", HOME: "/h" }), "/x/spark/models");
    assert.equal(defaultCacheDir({ HOME: "/h" }), "/h/.cache/spark/models");
  });
});

describe("progressBar", () => {
  function fakeStream(isTTY: boolean) {
    const writes: string[] = [];
    const stream = { isTTY, write: (s: string) => writes.push(s) > 0 } as unknown as NodeJS.WriteStream;
    return { stream, writes };
  }

  test("prints about one line per 10% when not a TTY", () => {
    const { stream, writes } = fakeStream(false);
    const bar = progressBar(stream);
    for (let i = 0; i <= 1000; i++) bar({ receivedBytes: i * 1000, totalBytes: 1_000_000 });
    bar.done();
    assert.equal(writes.length, 11);
    assert.ok(writes.every((w) => w.endsWith("\n") && !w.includes("\r")));
    assert.match(writes.at(-1)!, /100%.*1\.0\/1\.0 MB.*MB\/s/);
  });

  test("redraws a single line with \\r on a TTY", () => {
    const { stream, writes } = fakeStream(true);
    const bar = progressBar(stream);
    bar({ receivedBytes: 0, totalBytes: 2_000_000 });
    bar({ receivedBytes: 2_000_000, totalBytes: 2_000_000 });
    bar.done();
    assert.ok(writes.every((w) => w.startsWith("\r")));
    assert.ok(writes.at(-1)!.endsWith("\n"));
    assert.match(writes.at(-1)!, /100%/);
  });
});
