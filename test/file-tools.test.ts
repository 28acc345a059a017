/**
 * The read-only file tools on real temporary directories: `readFile` windows (offset, limit, totals,
 * large and binary files), `listFiles` honouring root and nested .gitignore files with negations while
 * skipping .git and never following symlinked directories, `searchFiles` with regex, glob, case,
 * limits and clear errors, and the workspace boundary (`..`, absolute paths, symlink escapes).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { symlink } from "node:fs/promises";
import path from "node:path";
import { describe, test } from "node:test";
import { workspaceFixture, type WorkspaceFixture } from "./helpers/workspace.js";
import { listFiles, readFile, searchFiles } from "../src/agent/files/file-tools.js";
import { ToolError, Workspace } from "../src/agent/files/workspace.js";

type Fixture = WorkspaceFixture;

function fixture(files: Record<string, string | Buffer>): Promise<Fixture> {
  return workspaceFixture("spark-file-tools-", files, {
    "secret.txt": "TOKEN=outside\n",
    "dir/inner.txt": "TOKEN=outside-dir\n",
  });
}

async function rejectsWith(promise: Promise<unknown>, code: string, ...fragments: string[]): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof ToolError, `expected a ToolError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    for (const fragment of fragments)
      assert.ok(error.message.includes(fragment), `${fragment} not in: ${error.message}`);
    return true;
  });
}

const numbered = (n: number): string =>
  Array.from({ length: n }, (_, k) => `line ${k + 1}`).join("\n") + "\n";

describe("readFile", () => {
  test("returns a window of lines with the total and whether more follow", async () => {
    const { ws } = await fixture({
      "f.txt": numbered(10),
      "crlf.txt": "a\r\nb\r\n",
      "empty.txt": "",
      "nonl.txt": "x\ny",
    });
    assert.deepEqual(await readFile(ws, { path: "f.txt" }), {
      text: numbered(10).trimEnd(),
      totalLines: 10,
      truncated: false,
    });
    assert.deepEqual(await readFile(ws, { path: "f.txt", offset: 3, limit: 2 }), {
      text: "line 3\nline 4",
      totalLines: 10,
      truncated: true,
    });
    assert.deepEqual(await readFile(ws, { path: "f.txt", offset: 9 }), {
      text: "line 9\nline 10",
      totalLines: 10,
      truncated: false,
    });
    assert.deepEqual(await readFile(ws, { path: "crlf.txt" }), {
      text: "a\nb",
      totalLines: 2,
      truncated: false,
    });
    assert.deepEqual(await readFile(ws, { path: "empty.txt" }), {
      text: "",
      totalLines: 0,
      truncated: false,
    });
    assert.deepEqual(await readFile(ws, { path: "nonl.txt" }), {
      text: "x\ny",
      totalLines: 2,
      truncated: false,
    });
    await rejectsWith(
      readFile(ws, { path: "f.txt", offset: 11 }),
      "invalid_argument",
      "offset 11",
      "10 lines",
    );
    await rejectsWith(readFile(ws, { path: "f.txt", limit: 0 }), "invalid_argument", "limit");
    await rejectsWith(readFile(ws, { path: "f.txt", offset: 1.5 }), "invalid_argument", "offset");
  });

  test("reads the first lines of a large file by default and counts all of them", async () => {
    const { ws } = await fixture({
      "big.txt": numbered(200_000),
      "long.txt": `${"x".repeat(5000)}\nshort\n`,
    });
    const result = await readFile(ws, { path: "big.txt" });
    assert.equal(result.totalLines, 200_000);
    assert.equal(result.truncated, true);
    assert.equal(result.text.split("\n").length, 2000);
    assert.equal(result.text.split("\n")[1999], "line 2000");
    const tail = await readFile(ws, { path: "big.txt", offset: 199_999 });
    assert.equal(tail.text, "line 199999\nline 200000");
    const long = await readFile(ws, { path: "long.txt" });
    assert.equal(long.truncated, true);
    assert.equal(long.text.split("\n")[0]?.length, 2001);
  });

  test("refuses binary files, directories and missing files", async () => {
    const { ws } = await fixture({
      "img.png": Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0x01]),
      "dir/a.txt": "a\n",
    });
    await rejectsWith(readFile(ws, { path: "img.png" }), "not_a_file", "binary");
    await rejectsWith(readFile(ws, { path: "dir" }), "not_a_file", "directory");
    await rejectsWith(readFile(ws, { path: "nope.txt" }), "not_found", "nope.txt");
  });

  test("refuses paths outside the workspace, including through symlinks", async () => {
    const { ws, root, outside } = await fixture({ "a.txt": "a\n", "sub/b.txt": "b\n" });
    await symlink(path.join(outside, "secret.txt"), path.join(root, "link.txt"));
    await symlink(path.join(outside, "dir"), path.join(root, "linkdir"));
    for (const p of [
      "../outside/secret.txt",
      "sub/../../outside/secret.txt",
      path.join(outside, "secret.txt"),
      "/etc/passwd",
      "link.txt",
      "linkdir/inner.txt",
    ]) {
      await rejectsWith(
        readFile(ws, { path: p }),
        "outside_workspace",
        p,
        `file tools only work inside the workspace ${ws.root}`,
      );
    }
    await rejectsWith(readFile(ws, { path: "../missing.txt" }), "outside_workspace");
    assert.equal((await readFile(ws, { path: "sub/../a.txt" })).text, "a");
    assert.equal((await readFile(ws, { path: path.join(root, "sub", "b.txt") })).text, "b");
  });
});

describe("FIFOs and .env files (the confined layer)", () => {
  test("readFile refuses a FIFO at once and a .env file; search and list pass over both without blocking", async () => {
    const { ws, root } = await fixture({
      "a.txt": "TOKEN=plain\n",
      ".env": "TOKEN=dotenv\n",
      ".env.example": "TOKEN=\n",
    });
    execFileSync("mkfifo", [path.join(root, "pipe.txt")]);
    await symlink("pipe.txt", path.join(root, "pipe-link.txt"));
    await rejectsWith(readFile(ws, { path: "pipe.txt" }), "not_a_file", "FIFO");
    await rejectsWith(readFile(ws, { path: "pipe-link.txt" }), "not_a_file", "FIFO");
    await rejectsWith(readFile(ws, { path: ".env" }), "secret_path", ".env");
    assert.equal((await readFile(ws, { path: ".env.example" })).text, "TOKEN=");
    const found = await searchFiles(ws, { pattern: "TOKEN" });
    assert.deepEqual(
      found.matches.map((m) => m.path),
      [".env.example", "a.txt"],
      "the .env file's secret is not a search result; the FIFO is passed over",
    );
    assert.deepEqual((await listFiles(ws)).files, [".env", ".env.example", "a.txt"], "only files are listed");
  });
});

describe("listFiles", () => {
  test("lists files sorted, honouring root and nested .gitignore files with negations", async () => {
    const { ws } = await fixture({
      ".gitignore": "*.log\n!keep.log\nbuild/\nnode_modules/\n/only-root.txt\n",
      "a.txt": "",
      "a/b.txt": "",
      "debug.log": "",
      "keep.log": "",
      "build/out.js": "",
      "node_modules/pkg/index.js": "",
      "only-root.txt": "",
      "src/only-root.txt": "",
      "src/main.ts": "",
      "src/.gitignore": "*.tmp\n/local.txt\n!important.log\n",
      "src/x.tmp": "",
      "src/local.txt": "",
      "src/deeper/local.txt": "",
      "src/important.log": "",
      "src/other.log": "",
      "other/x.tmp": "",
      ".git/HEAD": "ref: refs/heads/main\n",
      ".git/config": "",
    });
    const { files, truncated } = await listFiles(ws);
    assert.equal(truncated, false);
    assert.deepEqual(files, [
      ".gitignore",
      "a.txt",
      "a/b.txt",
      "keep.log",
      "other/x.tmp",
      "src/.gitignore",
      "src/deeper/local.txt",
      "src/important.log",
      "src/main.ts",
      "src/only-root.txt",
    ]);

    assert.deepEqual((await listFiles(ws, { path: "src" })).files, [
      "src/.gitignore",
      "src/deeper/local.txt",
      "src/important.log",
      "src/main.ts",
      "src/only-root.txt",
    ]);
    assert.deepEqual(await listFiles(ws, { limit: 3 }), {
      files: [".gitignore", "a.txt", "a/b.txt"],
      truncated: true,
    });
    // A directory asked for explicitly is listed even when it is ignored.
    assert.deepEqual((await listFiles(ws, { path: "build" })).files, ["build/out.js"]);
    await rejectsWith(listFiles(ws, { path: "a.txt" }), "not_a_directory");
    await rejectsWith(listFiles(ws, { path: ".." }), "outside_workspace");
  });

  test("node_modules is listed when no .gitignore ignores it; .git never is", async () => {
    const { ws } = await fixture({
      "node_modules/pkg/index.js": "",
      "index.js": "",
      ".git/HEAD": "",
      ".gitmodules": "",
    });
    assert.deepEqual((await listFiles(ws)).files, [".gitmodules", "index.js", "node_modules/pkg/index.js"]);
  });

  test("does not follow symlinked directories; lists symlinked files only when they stay inside", async () => {
    const { ws, root, outside } = await fixture({ "real/a.txt": "", "z.txt": "" });
    await symlink(path.join(outside, "dir"), path.join(root, "out-dir"));
    await symlink(path.join(root, "real"), path.join(root, "in-dir"));
    await symlink(path.join(outside, "secret.txt"), path.join(root, "out-file.txt"));
    await symlink("z.txt", path.join(root, "alias.txt"));
    assert.deepEqual((await listFiles(ws)).files, ["alias.txt", "real/a.txt", "z.txt"]);
  });
});

describe("searchFiles", () => {
  const files = {
    ".gitignore": "ignored/\n",
    "src/app.ts": "export function main() {\n  // TODO: wire up\n  return 1;\n}\n",
    "src/util.ts": "export const todo = 'later';\nexport function helper() {}\n",
    "src/view.tsx": "// TODO render\n",
    "README.md": "TODO: docs\n",
    "ignored/skip.ts": "TODO hidden\n",
    "bin.dat": Buffer.from("TODO\0binary"),
    "long.txt": `${"a".repeat(400)}TODO${"b".repeat(400)}\n`,
  };

  test("finds regex matches in path and line order, skipping ignored and binary files", async () => {
    const { ws } = await fixture(files);
    const { matches, truncated } = await searchFiles(ws, { pattern: "T[O]DO" });
    assert.equal(truncated, false);
    assert.deepEqual(
      matches.map((m) => `${m.path}:${m.line}`),
      ["README.md:1", "long.txt:1", "src/app.ts:2", "src/view.tsx:1"],
    );
    assert.equal(matches[2]?.text, "  // TODO: wire up");
    const long = matches[1]?.text ?? "";
    assert.ok(
      long.length <= 302 && long.includes("TODO") && long.startsWith("…") && long.endsWith("…"),
      long,
    );
  });

  test("glob, ignoreCase, path and limit", async () => {
    const { ws } = await fixture(files);
    assert.deepEqual(
      (await searchFiles(ws, { pattern: "todo", ignoreCase: true, glob: "*.ts" })).matches.map((m) => m.path),
      ["src/app.ts", "src/util.ts"],
    );
    assert.deepEqual(
      (await searchFiles(ws, { pattern: "TODO", glob: "*.{ts,tsx}" })).matches.map((m) => m.path),
      ["src/app.ts", "src/view.tsx"],
    );
    assert.deepEqual(
      (await searchFiles(ws, { pattern: "todo" })).matches.map((m) => m.path),
      ["src/util.ts"],
    );
    assert.deepEqual(
      (await searchFiles(ws, { pattern: "function \\w+\\(", path: "src" })).matches.map(
        (m) => `${m.path}:${m.line}`,
      ),
      ["src/app.ts:1", "src/util.ts:2"],
    );
    assert.deepEqual((await searchFiles(ws, { pattern: "helper", path: "src/util.ts" })).matches, [
      { path: "src/util.ts", line: 2, text: "export function helper() {}" },
    ]);
    const limited = await searchFiles(ws, { pattern: "TODO", limit: 2 });
    assert.equal(limited.truncated, true);
    assert.deepEqual(
      limited.matches.map((m) => m.path),
      ["README.md", "long.txt"],
    );
  });

  test("an invalid regex is a clear invalid_argument error; escapes are refused", async () => {
    const { ws, root, outside } = await fixture(files);
    await rejectsWith(
      searchFiles(ws, { pattern: "foo(" }),
      "invalid_argument",
      "Invalid regular expression",
      "foo(",
    );
    await rejectsWith(searchFiles(ws, { pattern: "" }), "invalid_argument");
    await rejectsWith(searchFiles(ws, { pattern: "x", glob: "*.{ts" }), "invalid_argument", "glob");
    await rejectsWith(searchFiles(ws, { pattern: "TOKEN", path: "../outside" }), "outside_workspace");
    await symlink(outside, path.join(root, "escape"));
    await rejectsWith(searchFiles(ws, { pattern: "TOKEN", path: "escape" }), "outside_workspace");
    assert.deepEqual((await searchFiles(ws, { pattern: "TOKEN" })).matches, []);
  });
  // Each extra "a" doubles the backtracking of ^(a+)+$ on a line that ends in "!": 2^40 steps is
  // hours, so these tests end only because the search is stopped.
  const catastrophic = { "slow.txt": `${"a".repeat(40)}!\n`, "fine.txt": "needle\n" };

  test(
    "a catastrophically backtracking regex times out with advice, and the event loop stays free meanwhile",
    { timeout: 120_000 },
    async () => {
      const { ws } = await fixture(catastrophic);
      let ticks = 0;
      const ticker = setInterval(() => ticks++, 10);
      try {
        await rejectsWith(
          searchFiles(ws, { pattern: "^(a+)+$" }, { timeoutMs: 500 }),
          "timeout",
          "timed out after 0.5 s",
          "Simplify the pattern",
        );
      } finally {
        clearInterval(ticker);
      }
      assert.ok(ticks > 0, "timers ran while the regex backtracked");
      // The next search gets a fresh worker.
      assert.deepEqual((await searchFiles(ws, { pattern: "needle" })).matches, [
        { path: "fine.txt", line: 1, text: "needle" },
      ]);
    },
  );

  test("aborting a search (Esc) stops it at once with a cancelled error", { timeout: 120_000 }, async () => {
    const { ws } = await fixture(catastrophic);
    const controller = new AbortController();
    const search = searchFiles(
      ws,
      { pattern: "^(a+)+$" },
      { signal: controller.signal, timeoutMs: 3_600_000 },
    );
    setTimeout(() => controller.abort(), 50);
    await rejectsWith(search, "cancelled", "cancelled by the user");
    await rejectsWith(searchFiles(ws, { pattern: "x" }, { signal: controller.signal }), "cancelled");
  });
});

describe("the home directory's secrets inside the workspace", () => {
  const home = {
    "home/.ssh/id_rsa": "PRIVATE KEY needle\n",
    "home/.aws/credentials": "aws_secret_access_key = needle\n",
    "home/.netrc": "machine example.com password needle\n",
    "home/.config/gcloud/credentials.db": "needle\n",
    "home/notes.txt": "needle in the notes\n",
    "src/a.ts": "needle\n",
  };

  test("readFile, listFiles and searchFiles refuse or skip them; the rest of HOME stays readable", async () => {
    const { root } = await fixture(home);
    await symlink(path.join(root, "home", ".ssh", "id_rsa"), path.join(root, "key-link"));
    const ws = await Workspace.open(root, { home: path.join(root, "home") });
    for (const p of [
      "home/.ssh/id_rsa",
      path.join(root, "home/.aws/credentials"),
      "home/.netrc",
      "key-link",
    ]) {
      await rejectsWith(readFile(ws, { path: p }), "secret_path", "home directory's secrets");
    }
    await rejectsWith(listFiles(ws, { path: "home/.ssh" }), "secret_path");
    await rejectsWith(searchFiles(ws, { pattern: "needle", path: "home/.aws" }), "secret_path");
    assert.equal((await readFile(ws, { path: "home/notes.txt" })).text, "needle in the notes");
    assert.deepEqual((await listFiles(ws)).files, ["home/notes.txt", "src/a.ts"]);
    assert.deepEqual(
      (await searchFiles(ws, { pattern: "needle" })).matches.map((match) => match.path),
      ["home/notes.txt", "src/a.ts"],
    );
    // Writing one (a key for ssh to trust) is refused as well, also where it does not exist yet.
    await rejectsWith(ws.resolve("home/.ssh/authorized_keys", "write"), "secret_path");
    await rejectsWith(ws.resolve("home/.kube/config", "write"), "secret_path");
  });

  test("by default the secrets are those of $HOME", async () => {
    const { root } = await fixture(home);
    const saved = process.env.HOME;
    process.env.HOME = path.join(root, "home");
    let ws: Workspace;
    try {
      ws = await Workspace.open(root);
    } finally {
      process.env.HOME = saved;
    }
    await rejectsWith(readFile(ws, { path: "home/.ssh/id_rsa" }), "secret_path");
    const { ws: elsewhere } = await fixture(home);
    assert.equal((await readFile(elsewhere, { path: "home/.ssh/id_rsa" })).text, "PRIVATE KEY needle");
  });
});
