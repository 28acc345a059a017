/**
 * The `apply_patch` tool on real temporary directories: the Codex patch format (add, update, delete,
 * move, multiple hunks, `@@` anchors, `*** End of File`), whitespace and punctuation drift, CRLF and
 * trailing-newline preservation, all-or-nothing failures that leave every file byte-identical, precise
 * parse errors, refusal of every way out of the workspace (`..`, absolute paths, symlinks), and of
 * writes to protected paths (`.git`…) unless the user approved them.
 */
import assert from "node:assert/strict";
import { lstat, readdir, readFile, readlink, symlink } from "node:fs/promises";
import path from "node:path";
import { describe, test } from "node:test";
import { workspaceFixture, type WorkspaceFixture } from "./helpers/workspace.js";
import { applyPatch, parsePatch, protectedWrites } from "../src/agent/files/apply-patch.js";
import type { Sandbox } from "../src/agent/sandbox/sandbox.js";
import {
  ToolRunner,
  type ApprovalAnswer,
  type ApprovalRequest,
  type ToolCall,
} from "../src/agent/tools/index.js";
import { ToolError } from "../src/agent/files/workspace.js";

type Fixture = WorkspaceFixture;

function fixture(files: Record<string, string> = {}): Promise<Fixture> {
  return workspaceFixture("spark-apply-patch-", files, { "secret.txt": "outside secret\n" });
}

/** Every file (bytes) and symlink (target) under `dir`, keyed by relative path. */
async function snapshot(dir: string): Promise<Map<string, string>> {
  const result = new Map<string, string>();
  const visit = async (abs: string, rel: string): Promise<void> => {
    for (const entry of await readdir(abs, { withFileTypes: true })) {
      const childAbs = path.join(abs, entry.name);
      const childRel = rel === "" ? entry.name : `${rel}/${entry.name}`;
      if (entry.isSymbolicLink()) result.set(childRel, `-> ${await readlink(childAbs)}`);
      else if (entry.isDirectory()) {
        result.set(`${childRel}/`, "dir");
        await visit(childAbs, childRel);
      } else result.set(childRel, (await readFile(childAbs)).toString("base64"));
    }
  };
  await visit(dir, "");
  return result;
}

async function read(root: string, rel: string): Promise<string> {
  return readFile(path.join(root, rel), "utf8");
}

async function exists(abs: string): Promise<boolean> {
  try {
    await lstat(abs);
    return true;
  } catch {
    return false;
  }
}

function patch(...body: string[]): string {
  return ["*** Begin Patch", ...body, "*** End Patch", ""].join("\n");
}

async function rejectsWith(
  promise: Promise<unknown>,
  code: string,
  ...fragments: (string | RegExp)[]
): Promise<ToolError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof ToolError, `expected a ToolError, got ${String(error)}`);
    assert.equal(error.name, "ToolError");
    assert.equal(error.code, code, error.message);
    for (const fragment of fragments) {
      if (typeof fragment === "string")
        assert.ok(error.message.includes(fragment), `${JSON.stringify(fragment)} not in:\n${error.message}`);
      else assert.match(error.message, fragment);
    }
    return error;
  }
  assert.fail(`expected a ToolError ${code}`);
}

describe("apply_patch: basic operations", () => {
  test("adds, updates and deletes files in one patch, with a Codex-style summary", async () => {
    const { ws, root } = await fixture({ "src/app.ts": "const a = 1;\nconst b = 2;\n", "old.txt": "bye\n" });
    const result = await applyPatch(
      ws,
      patch(
        "*** Add File: docs/new.txt",
        "+line one",
        "+line two",
        "*** Update File: src/app.ts",
        "@@",
        " const a = 1;",
        "-const b = 2;",
        "+const b = 3;",
        "*** Delete File: old.txt",
      ),
    );
    assert.equal(await read(root, "docs/new.txt"), "line one\nline two\n");
    assert.equal(await read(root, "src/app.ts"), "const a = 1;\nconst b = 3;\n");
    assert.equal(await exists(path.join(root, "old.txt")), false);
    assert.deepEqual(result.changes, [
      { path: "docs/new.txt", kind: "add" },
      { path: "src/app.ts", kind: "update" },
      { path: "old.txt", kind: "delete" },
    ]);
    assert.equal(
      result.summary,
      "Success. Updated the following files:\nA docs/new.txt\nM src/app.ts\nD old.txt",
    );
  });

  test("moves a file while editing it, and moves without hunks", async () => {
    const { ws, root } = await fixture({ "src/app.ts": "export const x = 1;\n", "a.bin": "\0\x01\xff" });
    const result = await applyPatch(
      ws,
      patch(
        "*** Update File: src/app.ts",
        "*** Move to: src/main.ts",
        "@@",
        "-export const x = 1;",
        "+export const x = 2;",
        "*** Update File: a.bin",
        "*** Move to: lib/b.bin",
      ),
    );
    assert.equal(await exists(path.join(root, "src/app.ts")), false);
    assert.equal(await read(root, "src/main.ts"), "export const x = 2;\n");
    assert.deepEqual(await readFile(path.join(root, "lib/b.bin")), Buffer.from("\0\x01\xff"));
    assert.deepEqual(result.changes[0], { path: "src/app.ts", kind: "update", movedTo: "src/main.ts" });
    assert.match(result.summary, /^M src\/main\.ts$/m);
  });

  test("refuses to move onto an existing file", async () => {
    const { ws, root } = await fixture({ "a.txt": "a\n", "b.txt": "b\n" });
    const before = await snapshot(root);
    await rejectsWith(
      applyPatch(ws, patch("*** Update File: a.txt", "*** Move to: b.txt", "@@", "-a", "+A")),
      "file_exists",
      "b.txt",
    );
    assert.deepEqual(await snapshot(root), before);
  });

  test("applies several hunks in order", async () => {
    const lines = Array.from({ length: 30 }, (_, k) => `line ${k + 1}`);
    const { ws, root } = await fixture({ "f.txt": `${lines.join("\n")}\n` });
    await applyPatch(
      ws,
      patch(
        "*** Update File: f.txt",
        "@@",
        " line 2",
        "-line 3",
        "+line three",
        " line 4",
        "@@",
        " line 19",
        "+line 19.5",
        " line 20",
        "@@",
        "-line 29",
        " line 30",
      ),
    );
    const expected = [...lines];
    expected[2] = "line three";
    expected.splice(19, 0, "line 19.5");
    expected.splice(expected.indexOf("line 29"), 1);
    assert.equal(await read(root, "f.txt"), `${expected.join("\n")}\n`);
  });

  test("an @@ header anchors the hunk after that line", async () => {
    const source = [
      "function first() {",
      "  const x = 1;",
      "  return x;",
      "}",
      "",
      "function second() {",
      "  const x = 1;",
      "  return x;",
      "}",
      "",
    ].join("\n");
    const { ws, root } = await fixture({ "f.js": source });
    await applyPatch(
      ws,
      patch("*** Update File: f.js", "@@ function second() {", "-  const x = 1;", "+  const x = 2;"),
    );
    assert.equal(
      await read(root, "f.js"),
      source.replace("second() {\n  const x = 1;", "second() {\n  const x = 2;"),
    );

    await rejectsWith(
      applyPatch(ws, patch("*** Update File: f.js", "@@ function third() {", "-  return x;", "+  return 0;")),
      "patch_conflict",
      "hunk 1 of f.js",
      "function third() {",
    );
  });

  test("*** End of File anchors the hunk at the end of the file", async () => {
    const { ws, root } = await fixture({ "f.txt": "x\nend\nx\nend\n" });
    await applyPatch(ws, patch("*** Update File: f.txt", "@@", " x", "-end", "+END", "*** End of File"));
    assert.equal(await read(root, "f.txt"), "x\nend\nx\nEND\n");
  });

  test("operations in one patch see each other's effects", async () => {
    const { ws, root } = await fixture();
    await applyPatch(
      ws,
      patch("*** Add File: a.txt", "+one", "*** Update File: a.txt", "@@", "-one", "+two"),
    );
    assert.equal(await read(root, "a.txt"), "two\n");
  });

  test("parsePatch returns the operations", () => {
    const ops = parsePatch(
      patch(
        "*** Add File: a.txt",
        "+hi",
        "*** Update File: b.txt",
        "*** Move to: c.txt",
        "@@ fn()",
        " ctx",
        "-old",
        "+new",
        "*** Delete File: d.txt",
      ),
    );
    assert.deepEqual(ops, [
      { kind: "add", path: "a.txt", contents: "hi\n", line: 2 },
      {
        kind: "update",
        path: "b.txt",
        moveTo: "c.txt",
        hunks: [
          {
            header: "fn()",
            endOfFile: false,
            line: 6,
            lines: [
              { op: " ", text: "ctx" },
              { op: "-", text: "old" },
              { op: "+", text: "new" },
            ],
          },
        ],
        line: 4,
      },
      { kind: "delete", path: "d.txt", line: 10 },
    ]);
  });
});

describe("apply_patch: tolerance", () => {
  test("trailing whitespace and indentation drift in the file are tolerated; context keeps the file's text", async () => {
    const { ws, root } = await fixture({ "f.py": "def f():   \n        x = 1\n        return x\n" });
    await applyPatch(
      ws,
      patch("*** Update File: f.py", "@@", " def f():", "-    x = 1", "+    x = 2", "     return x"),
    );
    assert.equal(await read(root, "f.py"), "def f():   \n    x = 2\n        return x\n");
  });

  test("unicode punctuation in the file matches ASCII in the patch", async () => {
    const { ws, root } = await fixture({ "f.md": "He said “hello” — twice.\nnext\n" });
    await applyPatch(
      ws,
      patch("*** Update File: f.md", "@@", '-He said "hello" - twice.', "+He said hi.", " next"),
    );
    assert.equal(await read(root, "f.md"), "He said hi.\nnext\n");
  });

  test("CRLF files stay CRLF; a missing trailing newline stays missing", async () => {
    const { ws, root } = await fixture({ "crlf.txt": "a\r\nb\r\nc\r\n", "nonl.txt": "a\nb" });
    await applyPatch(
      ws,
      patch(
        "*** Update File: crlf.txt",
        "@@",
        " a",
        "-b",
        "+B",
        "+B2",
        " c",
        "*** Update File: nonl.txt",
        "@@",
        " a",
        "-b",
        "+b",
        "+c",
      ),
    );
    assert.equal(await read(root, "crlf.txt"), "a\r\nB\r\nB2\r\nc\r\n");
    assert.equal(await read(root, "nonl.txt"), "a\nb\nc");
  });

  test("accepts a heredoc wrapper, a CRLF patch, surrounding whitespace and blank lines without their space", async () => {
    const { ws, root } = await fixture({ "f.txt": "one\n\ntwo\n", "g.txt": "x\n" });
    const body = patch("*** Update File: f.txt", "@@", " one", "", "-two", "+TWO").trim();
    await applyPatch(ws, `\n  apply_patch <<'EOF'\n${body}\nEOF\n\n`);
    assert.equal(await read(root, "f.txt"), "one\n\nTWO\n");
    await applyPatch(ws, `  ${patch("*** Update File: g.txt", "@@", "-x", "+y").replace(/\n/g, "\r\n")}  `);
    assert.equal(await read(root, "g.txt"), "y\n");
  });
  test("unified-diff style @@ lines are accepted, using only their trailing text as the anchor", async () => {
    const { ws, root } = await fixture({ "f.txt": "a\nb\nc\n" });
    await applyPatch(ws, patch("*** Update File: f.txt", "@@ -1,3 +1,3 @@", " a", "-b", "+B", " c"));
    assert.equal(await read(root, "f.txt"), "a\nB\nc\n");
  });
});

describe("apply_patch: failures change nothing", () => {
  test("a hunk that does not apply names file and hunk, and leaves every file byte-identical", async () => {
    const { ws, root, top } = await fixture({
      "a.txt": "alpha\n",
      "src/app.ts": "function f() {\n  const y = 1;\n  return y;\n}\n",
      "gone.txt": "keep me\n",
    });
    const before = await snapshot(top);
    const error = await rejectsWith(
      applyPatch(
        ws,
        patch(
          "*** Add File: created/new.txt",
          "+new",
          "*** Update File: a.txt",
          "@@",
          "-alpha",
          "+ALPHA",
          "*** Delete File: gone.txt",
          "*** Update File: src/app.ts",
          "@@",
          " function f() {",
          "-  const y = 1;",
          "+  const y = 2;",
          "@@",
          "   const x = 1;",
          "-  return x;",
          "+  return x + 1;",
        ),
      ),
      "patch_conflict",
      "hunk 2 of src/app.ts does not apply: expected to find\n    const x = 1;\n    return x;\n",
      "No file was changed.",
    );
    assert.ok(error.message.startsWith("apply_patch: "));
    assert.deepEqual(await snapshot(top), before);
    assert.equal(await exists(path.join(root, "created")), false);
  });

  test("Add of an existing file, Update or Delete of a missing file", async () => {
    const { ws, root } = await fixture({ "a.txt": "a\n" });
    const before = await snapshot(root);
    await rejectsWith(
      applyPatch(ws, patch("*** Add File: b.txt", "+b", "*** Add File: a.txt", "+x")),
      "file_exists",
      "a.txt",
    );
    await rejectsWith(
      applyPatch(ws, patch("*** Update File: missing.txt", "@@", "-a", "+b")),
      "not_found",
      "missing.txt",
    );
    await rejectsWith(applyPatch(ws, patch("*** Delete File: missing.txt")), "not_found", "missing.txt");
    await rejectsWith(
      applyPatch(ws, patch("*** Add File: a.txt/b.txt", "+x")),
      "not_a_directory",
      "a.txt is a file",
    );
    await rejectsWith(
      applyPatch(
        ws,
        patch(
          "*** Add File: x.txt",
          "+x",
          "*** Delete File: x.txt",
          "*** Update File: x.txt",
          "@@",
          "-x",
          "+y",
        ),
      ),
      "not_found",
    );
    assert.deepEqual(await snapshot(root), before);
  });

  test("a write failing midway restores the files already written", async () => {
    const { ws, root } = await fixture({ "a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n" });
    const before = await snapshot(root);
    await assert.rejects(
      applyPatch(
        ws,
        patch(
          "*** Update File: a.txt",
          "@@",
          "-a",
          "+A",
          "*** Add File: deep/dir/new.txt",
          "+new",
          "*** Delete File: c.txt",
          "*** Update File: b.txt",
          "@@",
          "-b",
          "+B",
        ),
        {
          io: {
            writeFile: async (rel, content) => {
              if (rel.endsWith("b.txt")) throw new Error("disk full");
              await ws.writeFile(rel, content);
            },
          },
        },
      ),
      /disk full/,
    );
    assert.deepEqual(await snapshot(root), before);
  });

  test("invalid patch text is refused with the line number and what was expected", async () => {
    const { ws, root } = await fixture({ "a.txt": "a\n" });
    const before = await snapshot(root);
    await rejectsWith(
      applyPatch(ws, "*** Update File: a.txt\n@@\n-a\n+b\n*** End Patch\n"),
      "patch_invalid",
      "line 1",
      "*** Begin Patch",
    );
    await rejectsWith(
      applyPatch(ws, "*** Begin Patch\n*** Update File: a.txt\n@@\n-a\n+b\n"),
      "patch_invalid",
      "line 5",
      "*** End Patch",
    );
    await rejectsWith(
      applyPatch(ws, patch("*** Add File: b.txt", "+b", "garbage here")),
      "patch_invalid",
      "line 4",
      "garbage here",
    );
    await rejectsWith(
      applyPatch(ws, patch("*** Frobnicate File: a.txt")),
      "patch_invalid",
      "line 2",
      "*** Update File: PATH",
    );
    await rejectsWith(
      applyPatch(ws, patch("*** Update File: a.txt", "@@", "-a", "?b")),
      "patch_invalid",
      "line 5",
      "hunk line",
    );
    await rejectsWith(applyPatch(ws, patch("*** Update File: a.txt")), "patch_invalid", "line 2", "no hunks");
    await rejectsWith(applyPatch(ws, ""), "patch_invalid", "line 1");
    assert.deepEqual(await snapshot(root), before);
  });
});

describe("apply_patch: the workspace boundary", () => {
  test("refuses ../ escapes and absolute paths outside the workspace", async () => {
    const { ws, top } = await fixture({ "a.txt": "a\n" });
    const before = await snapshot(top);
    const escape = await rejectsWith(
      applyPatch(ws, patch("*** Add File: ../x.txt", "+x")),
      "outside_workspace",
      "../x.txt",
    );
    assert.ok(
      escape.message.includes(`file tools only work inside the workspace ${ws.root}`),
      escape.message,
    );
    await rejectsWith(applyPatch(ws, patch("*** Add File: sub/../../x.txt", "+x")), "outside_workspace");
    await rejectsWith(
      applyPatch(ws, patch("*** Update File: /etc/passwd", "@@", "-root", "+toor")),
      "outside_workspace",
      "/etc/passwd",
    );
    await rejectsWith(applyPatch(ws, patch("*** Delete File: /etc/passwd")), "outside_workspace");
    await rejectsWith(
      applyPatch(ws, patch("*** Update File: a.txt", "*** Move to: ../moved.txt")),
      "outside_workspace",
    );
    assert.deepEqual(await snapshot(top), before);
  });

  test("accepts absolute paths inside the workspace", async () => {
    const { ws, root } = await fixture({ "a.txt": "a\n" });
    const result = await applyPatch(
      ws,
      patch(`*** Update File: ${path.join(root, "a.txt")}`, "@@", "-a", "+b"),
    );
    assert.equal(await read(root, "a.txt"), "b\n");
    assert.equal(result.changes[0]?.path, "a.txt");
  });

  test("refuses to write through symlinks that point outside", async () => {
    const { ws, root, outside, top } = await fixture({ "a.txt": "a\n" });
    await symlink(path.join(outside, "secret.txt"), path.join(root, "link.txt"));
    await symlink(outside, path.join(root, "linkdir"));
    await symlink(path.join(outside, "not-yet.txt"), path.join(root, "dangling.txt"));
    const before = await snapshot(top);
    await rejectsWith(
      applyPatch(ws, patch("*** Update File: link.txt", "@@", "-outside secret", "+pwned")),
      "outside_workspace",
      "link.txt",
      "symlink",
    );
    await rejectsWith(
      applyPatch(ws, patch("*** Add File: linkdir/new.txt", "+pwned")),
      "outside_workspace",
      "linkdir/new.txt",
    );
    await rejectsWith(
      applyPatch(ws, patch("*** Add File: linkdir/deeper/new.txt", "+pwned")),
      "outside_workspace",
    );
    await rejectsWith(applyPatch(ws, patch("*** Add File: dangling.txt", "+pwned")), "outside_workspace");
    await rejectsWith(applyPatch(ws, patch("*** Delete File: link.txt")), "outside_workspace");
    // An operation that would have succeeded earlier in the same patch is not written either.
    await rejectsWith(
      applyPatch(ws, patch("*** Update File: a.txt", "@@", "-a", "+b", "*** Add File: linkdir/x.txt", "+x")),
      "outside_workspace",
    );
    assert.deepEqual(await snapshot(top), before);
    assert.deepEqual(await readdir(outside), ["secret.txt"]);
    assert.equal(await readFile(path.join(outside, "secret.txt"), "utf8"), "outside secret\n");
  });

  test("a symlink to a file inside the workspace updates its target", async () => {
    const { ws, root } = await fixture({ "real.txt": "a\n" });
    await symlink("real.txt", path.join(root, "alias.txt"));
    const result = await applyPatch(ws, patch("*** Update File: alias.txt", "@@", "-a", "+b"));
    assert.equal(await read(root, "real.txt"), "b\n");
    assert.equal((await lstat(path.join(root, "alias.txt"))).isSymbolicLink(), true);
    assert.equal(result.changes[0]?.path, "real.txt");
  });
});

describe("apply_patch: protected paths", () => {
  const repo = {
    ".git/config": "[core]\n",
    ".git/hooks/README": "hooks\n",
    ".vscode/settings.json": "{}\n",
    "src/a.ts": "a\n",
    "vendor/lib/.git/config": "[core]\n",
  };

  test("writes into .git (any depth, any case, through a symlink, by a move) and .vscode are refused; protectedWrites names them", async () => {
    const { ws, root, top } = await fixture(repo);
    await symlink(path.join(root, ".git", "config"), path.join(root, "innocent.txt"));
    await symlink(path.join(root, ".git", "hooks"), path.join(root, "hooks"));
    const before = await snapshot(top);
    const attempts: [string, string[]][] = [
      [patch("*** Add File: .git/hooks/pre-commit", "+#!/bin/sh", "+touch /tmp/pwned"), [".git"]],
      [patch("*** Update File: .git/config", "@@", " [core]", "+\tfsmonitor = touch /tmp/pwned"), [".git"]],
      [patch("*** Update File: innocent.txt", "@@", " [core]", "+\thooksPath = /tmp"), [".git"]],
      [patch("*** Add File: hooks/post-checkout", "+x"), [".git"]],
      [patch("*** Add File: vendor/lib/.git/hooks/pre-commit", "+x"), ["vendor/lib/.git"]],
      [patch("*** Add File: sub/.git", "+gitdir: ../evil"), ["sub/.git"]],
      [patch("*** Add File: .GIT/config", "+x"), [".GIT"]],
      [patch("*** Update File: src/a.ts", "*** Move to: .git/hooks/pre-push", "@@", "-a", "+b"), [".git"]],
      [patch("*** Delete File: .vscode/settings.json"), [".vscode"]],
      [
        patch("*** Add File: .vscode/tasks.json", "+{}", "*** Add File: .codex/config.toml", "+x"),
        [".vscode", ".codex"],
      ],
    ];
    for (const [text, parts] of attempts) {
      assert.deepEqual((await protectedWrites(ws, text)).sort(), [...parts].sort(), text);
      await rejectsWith(applyPatch(ws, text), "protected_path", "protected path", "No file was changed");
    }
    // One protected file spoils the whole patch.
    await rejectsWith(
      applyPatch(ws, patch("*** Update File: src/a.ts", "@@", "-a", "+b", "*** Add File: .git/info/x", "+x")),
      "protected_path",
    );
    assert.deepEqual(await snapshot(top), before);
    assert.deepEqual(await protectedWrites(ws, patch("*** Update File: src/a.ts", "@@", "-a", "+b")), []);
    assert.deepEqual(await protectedWrites(ws, "not a patch"), []);
  });

  test("with the user's approval (allowProtected) the same patch applies", async () => {
    const { ws, root } = await fixture(repo);
    await applyPatch(ws, patch("*** Update File: .git/config", "@@", " [core]", "+\tbare = false"), {
      allowProtected: true,
    });
    assert.equal(await read(root, ".git/config"), "[core]\n\tbare = false\n");
  });

  test("ToolRunner: a protected patch asks (on-request, untrusted) and is refused without a user or in never mode", async () => {
    const { ws, root } = await fixture(repo);
    const sandbox: Sandbox = { kind: "none", reason: "test" };
    const hook = patch("*** Add File: .git/hooks/pre-commit", "+touch /tmp/pwned");
    const plain = patch("*** Update File: src/a.ts", "@@", "-a", "+b");
    let ids = 0;
    const call = (input: string): ToolCall => ({
      kind: "custom",
      callId: `c${++ids}`,
      name: "apply_patch",
      input,
    });
    const runPatch = async (runner: ToolRunner, input: string) =>
      (await runner.run(call(input), new AbortController().signal, () => {})).completed;

    const asked: ApprovalRequest[] = [];
    const answers: ApprovalAnswer[] = [];
    const ask = async (request: ApprovalRequest): Promise<ApprovalAnswer> => {
      asked.push(request);
      return answers.shift() ?? "no";
    };
    const onRequest = new ToolRunner({ workspace: ws, sandbox, approval: "on-request", ask }, () => "i");
    answers.push("no");
    const declined = await runPatch(onRequest, hook);
    assert.equal(declined.type === "file_change" && declined.status, "declined");
    assert.equal(asked.length, 1);
    assert.equal(asked[0]?.kind, "patch");
    assert.match(asked[0]?.reason ?? "", /writes \.git, a protected path/);
    assert.equal(await exists(path.join(root, ".git/hooks/pre-commit")), false);
    answers.push("yes");
    const approved = await runPatch(onRequest, hook);
    assert.equal(approved.type === "file_change" && approved.status, "completed");
    assert.equal(await read(root, ".git/hooks/pre-commit"), "touch /tmp/pwned\n");
    // An ordinary patch does not ask in on-request.
    assert.equal((await runPatch(onRequest, plain)).type, "file_change");
    assert.equal(asked.length, 2);

    // "Always" for ordinary patches in untrusted mode does not cover protected paths.
    const untrustedAsks: ApprovalRequest[] = [];
    const untrusted = new ToolRunner(
      {
        workspace: ws,
        sandbox,
        approval: "untrusted",
        ask: async (request) => {
          untrustedAsks.push(request);
          return untrustedAsks.length === 1 ? "always" : "no";
        },
      },
      () => "i",
    );
    await runPatch(untrusted, patch("*** Update File: src/a.ts", "@@", "-b", "+c"));
    await runPatch(untrusted, patch("*** Update File: src/a.ts", "@@", "-c", "+d"));
    assert.equal(untrustedAsks.length, 1, "always covers ordinary patches");
    const config = patch("*** Update File: .git/config", "@@", " [core]", "+\tfsmonitor = x");
    assert.equal(((await runPatch(untrusted, config)) as { status: string }).status, "declined");
    assert.equal(untrustedAsks.length, 2, "a protected patch still asks");

    for (const [approval, interactive] of [
      ["never", true],
      ["never", false],
      ["on-request", false],
    ] as const) {
      const runner = new ToolRunner(
        {
          workspace: ws,
          sandbox,
          approval,
          ...(interactive ? { ask: async () => "yes" as const } : {}),
        },
        () => "i",
      );
      const item = await runPatch(runner, config);
      assert.ok(item.type === "file_change" && item.status === "declined", `${approval} ${interactive}`);
      assert.match(item.error ?? "", /protected path.*needs the user's approval/s);
    }
    assert.equal(await read(root, ".git/config"), "[core]\n");
  });
});
