/**
 * The confined file layer's rules as properties (fast-check): generated workspaces of files,
 * directories, FIFOs and links (inside, outside, into protected names, at secrets, dangling, chains,
 * `..` escapes), every operation of the layer run on generated paths, links swapped between
 * operations and, in half the runs, by a concurrent process during them. After every run: nothing
 * outside the root and nothing in `.git` or the home secrets changed, no read returned a secret, every
 * failure was a ToolError, and nothing blocked (a FIFO opened for reading would hang the test).
 */
import assert from "node:assert/strict";
import { spawn, type ChildProcess } from "node:child_process";
import { execFileSync } from "node:child_process";
import { lstatSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { mkdir, mkdtemp, rm, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, test } from "node:test";
import fc from "fast-check";
import { ConfinedRoot, ToolError } from "../src/agent/fs/confined.js";

const temps: string[] = [];
after(async () => {
  await Promise.all(temps.map((dir) => rm(dir, { recursive: true, force: true })));
});

const SECRETS = ["SECRET-OUTSIDE", "SECRET-SSH-KEY", "SECRET-DOTENV"];
const NAMES = ["a", "b", "sub", "deep", ".git", ".env", "home", "x.txt"];

/** Where a generated link points. */
const linkTarget = fc.constantFrom(
  "OUTSIDE", // absolute, out of the root
  "OUTSIDE/secret.txt",
  "../outside/secret.txt",
  "/",
  ".git/hooks/pre-commit",
  ".git/hooks",
  ".git",
  "home/.ssh/id_rsa",
  "home/.ssh",
  ".env",
  "a",
  "sub",
  "sub/a",
  "missing/file",
  "pipe",
  "..",
  "loop",
);

type Entry =
  | { kind: "file"; path: string }
  | { kind: "dir"; path: string }
  | { kind: "fifo"; path: string }
  | { kind: "link"; path: string; target: string };

const relPath = fc
  .array(fc.constantFrom(...NAMES, ".."), { minLength: 1, maxLength: 3 })
  .map((parts) => parts.join("/"));
const entryPath = fc
  .array(fc.constantFrom("a", "b", "sub", "deep", "x.txt", "loop", "pipe"), { minLength: 1, maxLength: 3 })
  .map((parts) => parts.join("/"));

/** Swaps (by the test's own commands) touch top-level names only: `rm -rf a/b` would follow a link `a`. */
const topName = fc.constantFrom("a", "b", "sub", "deep", "x.txt", "loop", "pipe");

const entry: fc.Arbitrary<Entry> = fc.oneof(
  fc.record({ kind: fc.constant("file" as const), path: entryPath }),
  fc.record({ kind: fc.constant("dir" as const), path: entryPath }),
  fc.record({ kind: fc.constant("fifo" as const), path: entryPath }),
  fc.record({ kind: fc.constant("link" as const), path: entryPath, target: linkTarget }),
);

type Operation =
  | {
      op: "readFile" | "readFileSync" | "stat" | "locate" | "readdir" | "readlink" | "walkTree";
      path: string;
    }
  | { op: "writeFile"; path: string; final: "entry" | "follow" }
  | { op: "remove"; path: string; recursive: boolean }
  | { op: "mkdir" | "chmod" | "utimes"; path: string }
  | { op: "symlink"; path: string; target: string }
  | { op: "swap"; path: string; target: string };

const operation: fc.Arbitrary<Operation> = fc.oneof(
  fc.record({
    op: fc.constantFrom(
      "readFile" as const,
      "readFileSync" as const,
      "stat" as const,
      "locate" as const,
      "readdir" as const,
      "readlink" as const,
      "walkTree" as const,
    ),
    path: relPath,
  }),
  fc.record({
    op: fc.constant("writeFile" as const),
    path: relPath,
    final: fc.constantFrom("entry" as const, "follow" as const),
  }),
  fc.record({ op: fc.constant("remove" as const), path: relPath, recursive: fc.boolean() }),
  fc.record({ op: fc.constantFrom("mkdir" as const, "chmod" as const, "utimes" as const), path: relPath }),
  fc.record({ op: fc.constant("symlink" as const), path: relPath, target: linkTarget }),
  // Not the layer: the model's own command swapping an entry for a link between operations.
  fc.record({ op: fc.constant("swap" as const), path: topName, target: linkTarget }),
);

/** Every file under `dir` with its bytes (links by target, FIFOs by kind, modes included). */
function snapshot(dir: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (rel: string): void => {
    const abs = rel === "" ? dir : path.join(dir, rel);
    for (const name of readdirSync(abs)) {
      const child = rel === "" ? name : `${rel}/${name}`;
      const info = lstatSync(path.join(dir, child));
      const mode = (info.mode & 0o7777).toString(8);
      if (info.isSymbolicLink()) out[child] = `link ${readlinkSync(path.join(dir, child))}`;
      else if (info.isDirectory()) {
        out[child] = `dir ${mode}`;
        walk(child);
      } else if (info.isFile()) out[child] = `file ${mode} ${readFileSync(path.join(dir, child), "utf8")}`;
      else out[child] = "other";
    }
  };
  walk("");
  return out;
}

async function build(
  entries: readonly Entry[],
): Promise<{ top: string; root: string; outside: string; home: string }> {
  const top = await mkdtemp(path.join(tmpdir(), "spark-confined-prop-"));
  temps.push(top);
  const root = path.join(top, "ws");
  const outside = path.join(top, "outside");
  const home = path.join(root, "home");
  await mkdir(path.join(root, ".git", "hooks"), { recursive: true });
  await writeFile(path.join(root, ".git", "config"), "[core]\n");
  await mkdir(path.join(home, ".ssh"), { recursive: true });
  await writeFile(path.join(home, ".ssh", "id_rsa"), SECRETS[1]!);
  await writeFile(path.join(root, ".env"), SECRETS[2]!);
  await mkdir(outside);
  await writeFile(path.join(outside, "secret.txt"), SECRETS[0]!);
  for (const item of entries) {
    const abs = path.join(root, item.path);
    try {
      await mkdir(path.dirname(abs), { recursive: true });
      if (item.kind === "file") await writeFile(abs, `content of ${item.path}`, { flag: "wx" });
      else if (item.kind === "dir") await mkdir(abs);
      else if (item.kind === "fifo") execFileSync("mkfifo", [abs], { stdio: "ignore" });
      else await symlink(item.target.replace(/^OUTSIDE/, outside), abs);
    } catch {
      // A generated path that collides with an earlier entry: the earlier one stays.
    }
  }
  return { top, root, outside, home };
}

async function swap(root: string, outside: string, rel: string, target: string): Promise<void> {
  const abs = path.join(root, rel);
  await rm(abs, { recursive: true, force: true }).catch(() => undefined);
  await mkdir(path.dirname(abs), { recursive: true }).catch(() => undefined);
  await symlink(target.replace(/^OUTSIDE/, outside), abs).catch(() => undefined);
}

/** A process that keeps swapping `rel` between a directory and a link out (or into .git). */
function swapper(root: string, outside: string, rel: string, target: string): ChildProcess {
  const link = target.replace(/^OUTSIDE/, outside);
  return spawn(
    "bash",
    [
      "-c",
      `cd ${JSON.stringify(root)} || exit; while :; do rm -rf -- ${JSON.stringify(rel)}; mkdir -p -- ${JSON.stringify(rel)}; ` +
        `rm -rf -- ${JSON.stringify(rel)}; ln -sfn -- ${JSON.stringify(link)} ${JSON.stringify(rel)}; done`,
    ],
    { stdio: "ignore" },
  );
}

async function run(ws: ConfinedRoot, root: string, outside: string, op: Operation): Promise<Buffer[]> {
  const read: Buffer[] = [];
  switch (op.op) {
    case "readFile":
      read.push(await ws.readFile(op.path));
      break;
    case "readFileSync":
      read.push(ws.readFileSync(op.path));
      break;
    case "stat":
      await ws.stat(op.path);
      break;
    case "locate":
      await ws.locate(op.path);
      break;
    case "readdir":
      await ws.readdir(op.path);
      break;
    case "readlink":
      await ws.readlink(op.path);
      break;
    case "walkTree":
      await ws.walkTree(op.path, async (_entry, open) => {
        const handle = await open();
        if (handle === undefined) return;
        try {
          read.push(await handle.readFile());
        } finally {
          await handle.close();
        }
      });
      break;
    case "writeFile":
      await ws.writeFile(op.path, "written by the model", { final: op.final });
      break;
    case "remove":
      await ws.remove(op.path, { recursive: op.recursive });
      break;
    case "mkdir":
      await ws.mkdir(op.path);
      break;
    case "chmod":
      await ws.chmod(op.path, 0o777);
      break;
    case "utimes":
      await ws.utimes(op.path, new Date(0), new Date(0));
      break;
    case "symlink":
      await ws.symlink(op.path, op.target.replace(/^OUTSIDE/, outside));
      break;
    case "swap":
      await swap(root, outside, op.path, op.target);
      break;
  }
  return read;
}

/** What a run counts: operations tried, and how many each kind of refusal stopped. */
export const tally = { runs: 0, operations: 0, refused: new Map<string, number>() };

test(
  "no write outside the root or into a protected name, no read of a secret, nothing blocks, every refusal a ToolError",
  { timeout: 600_000 },
  async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(entry, { maxLength: 12 }),
        fc.array(operation, { minLength: 1, maxLength: 25 }),
        fc.option(fc.record({ path: topName, target: linkTarget }), { nil: undefined }),
        async (entries, operations, concurrent) => {
          const { root, outside, home } = await build(entries);
          const guarded = () => ({
            outside: snapshot(outside),
            git: snapshot(path.join(root, ".git")),
            ssh: snapshot(path.join(home, ".ssh")),
          });
          const before = guarded();
          const ws = await ConfinedRoot.open(root, { home });
          const racer = concurrent ? swapper(root, outside, concurrent.path, concurrent.target) : undefined;
          tally.runs++;
          try {
            for (const op of operations) {
              tally.operations++;
              let read: Buffer[] = [];
              try {
                read = await run(ws, root, outside, op);
              } catch (error) {
                assert.ok(
                  error instanceof ToolError,
                  `${JSON.stringify(op)} failed with ${String(error)} (${(error as { code?: string }).code}), not a ToolError`,
                );
                tally.refused.set(error.code, (tally.refused.get(error.code) ?? 0) + 1);
              }
              for (const bytes of read) {
                for (const secret of SECRETS) {
                  assert.ok(!bytes.toString("utf8").includes(secret), `${JSON.stringify(op)} read ${secret}`);
                }
              }
            }
          } finally {
            racer?.kill("SIGKILL");
          }
          assert.deepEqual(guarded(), before, "outside, .git and ~/.ssh as they were");
        },
      ),
      { numRuns: Number(process.env.SPARK_PROPERTY_RUNS ?? 60) },
    );
    assert.ok(tally.operations > 0);
  },
);
