/**
 * The VS Code extension's parts that need no VS Code (editors/vscode/src/inline-diff.ts and
 * locate.ts): the quick edit's inline diff text, the block a quick edit without a selection takes,
 * finding the Spark to run, and reading `spark serve`'s download progress. The extension in a real
 * VS Code is test-vscode/e2e.ts (`npm run test:vscode`).
 */
import assert from "node:assert/strict";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, test } from "node:test";
import { currentBlock, lineDiff, mergedView, splitLines } from "../editors/vscode/src/inline-diff.js";
import { downloadProgress, locateSpark, onPath } from "../editors/vscode/src/locate.js";
import { DEFAULT_EXCLUDE_PATTERNS } from "../src/lsp/file-filter.js";
import { DEFAULT_MODEL, progressBar } from "../src/engines/llama/model-source.js";
import { freshDir } from "./helpers/cli.js";

describe("the quick edit's inline diff", () => {
  test("lines are diffed with removed before added at each change, unchanged lines once", () => {
    assert.deepEqual(lineDiff(["a", "b", "c"], ["a", "B", "c"]), ["same", "removed", "added", "same"]);
    assert.deepEqual(lineDiff(["a", "b"], ["a", "x", "b"]), ["same", "added", "same"]);
    assert.deepEqual(lineDiff(["a", "b", "c"], ["a"]), ["same", "removed", "removed"]);
    assert.deepEqual(lineDiff([], ["x"]), ["added"]);
  });

  test("the merged view keeps the removed lines and the line endings of the document", () => {
    const before = "let total = 0;\r\nfor (const x of items) total += x;\r\nreturn total;\r\n";
    const after = "const total = items.reduce((s, x) => s + x, 0);\r\nreturn total;\r\n";
    const view = mergedView(before, after, "\r\n");
    assert.equal(
      view.text,
      "let total = 0;\r\nfor (const x of items) total += x;\r\nconst total = items.reduce((s, x) => s + x, 0);\r\nreturn total;\r\n",
    );
    assert.deepEqual(view.removed, [0, 1]);
    assert.deepEqual(view.added, [2]);
  });

  test("a last line without a line ending stays without one; a partial rewrite shows what came", () => {
    const view = mergedView("old", "new", "\n");
    assert.equal(view.text, "old\nnew");
    assert.deepEqual([view.removed, view.added], [[0], [1]]);
    // Streaming: the rewrite so far is the first line and a half.
    const partial = mergedView("a\nb\nc\n", "a\nb2", "\n");
    assert.equal(partial.text, "a\nb\nc\nb2\n");
    assert.deepEqual([partial.removed, partial.added], [[1, 2], [3]]);
    assert.deepEqual(splitLines("x\r\ny\n"), ["x", "y"]);
  });

  test("without a selection a quick edit takes the run of non-blank lines at the cursor", () => {
    const lines = ["import x;", "", "function f() {", "  return 1;", "}", "", ""];
    assert.deepEqual(currentBlock(lines, 3), [2, 4]);
    assert.deepEqual(currentBlock(lines, 0), [0, 0]);
    assert.deepEqual(currentBlock(lines, 5), [5, 5], "a blank line alone");
    const long = Array.from({ length: 200 }, (_, i) => `line ${i}`);
    assert.deepEqual(currentBlock(long, 100, 40), [60, 140]);
  });
});

describe("finding Spark", () => {
  const dir = freshDir("vscode-locate-");
  const bin = join(dir, "bin");
  const clone = join(dir, "clone");
  mkdirSync(bin, { recursive: true });
  mkdirSync(join(clone, "bin"), { recursive: true });
  mkdirSync(join(clone, "dist/cli"), { recursive: true });
  writeFileSync(join(clone, "bin/spark.js"), "");
  writeFileSync(join(clone, "dist/cli/main.js"), "");
  const base = {
    repos: [join(dir, "missing"), clone],
    execPath: "/opt/code/code",
    platform: "linux" as const,
  };

  test("spark.command wins, as written; then spark on the PATH; then the packaged clone", () => {
    assert.deepEqual(locateSpark({ ...base, setting: 'node "/a b/spark.js"', path: bin }), {
      command: "node",
      args: ["/a b/spark.js"],
      env: {},
      how: "spark.command",
    });
    // No spark on the PATH and no node: VS Code's own binary runs the clone's script as Node.
    const clone1 = locateSpark({ ...base, setting: "", path: bin });
    assert.deepEqual(clone1 && [clone1.command, clone1.args, clone1.env], [
      "/opt/code/code",
      [join(clone, "bin/spark.js")],
      { ELECTRON_RUN_AS_NODE: "1" },
    ]);
    writeFileSync(join(bin, "node"), "#!/bin/sh\n");
    chmodSync(join(bin, "node"), 0o755);
    const clone2 = locateSpark({ ...base, setting: "", path: bin });
    assert.deepEqual(clone2 && [clone2.command, clone2.args, clone2.env], [
      join(bin, "node"),
      [join(clone, "bin/spark.js")],
      {},
    ]);
    writeFileSync(join(bin, "spark"), "#!/bin/sh\n");
    assert.equal(onPath("spark", bin, "linux"), undefined, "a file that is not executable does not count");
    chmodSync(join(bin, "spark"), 0o755);
    assert.equal(
      locateSpark({ ...base, setting: "  ", path: `/nowhere:${bin}` })?.command,
      join(bin, "spark"),
    );
  });

  test("nothing installed: undefined (the extension then says how to install it)", () => {
    assert.equal(
      locateSpark({ ...base, repos: [join(dir, "missing")], setting: "", path: "/nowhere" }),
      undefined,
    );
    // A clone that was never built does not count either.
    const unbuilt = join(dir, "unbuilt");
    mkdirSync(join(unbuilt, "bin"), { recursive: true });
    writeFileSync(join(unbuilt, "bin/spark.js"), "");
    assert.equal(locateSpark({ ...base, repos: [unbuilt], setting: "", path: "/nowhere" }), undefined);
  });

  test("the download progress lines spark serve prints on a pipe are read", () => {
    let written = "";
    const stream = {
      isTTY: false,
      write: (text: string) => (written += text),
    } as unknown as NodeJS.WriteStream;
    const bar = progressBar(stream);
    for (let got = 0; got <= 675_710_848; got += 33_785_542)
      bar({ receivedBytes: got, totalBytes: 675_710_848 });
    bar({ receivedBytes: 675_710_848, totalBytes: 675_710_848 });
    bar.done();
    const read = written.trim().split("\n").map(downloadProgress);
    assert.ok(read.length >= 10 && read.every((p) => p !== undefined), written);
    assert.deepEqual(read.at(-1), { percent: 100, receivedMb: 675.7, totalMb: 675.7 });
    assert.equal(downloadProgress("spark listening on http://127.0.0.1:1"), undefined);
  });

  test("the download notice names the default model the server downloads", () => {
    const name = /^(\S+)/.exec(DEFAULT_MODEL.description)![1]!;
    assert.match(
      readFileSync("editors/vscode/src/extension.ts", "utf8"),
      new RegExp(`MB: ${name.replace(/\./g, "\\.")}, once`),
    );
  });

  test("the extension's default excludePatterns setting is the language server's list", () => {
    const manifest = JSON.parse(readFileSync("editors/vscode/package.json", "utf8")) as {
      contributes: { configuration: { properties: Record<string, { default: unknown }> } };
    };
    assert.deepEqual(
      manifest.contributes.configuration.properties["spark.completions.excludePatterns"]!.default,
      DEFAULT_EXCLUDE_PATTERNS,
    );
  });
});
