/**
 * The confined file layer (src/agent/fs/confined.ts), rule by rule, on real files: resolution
 * beneath the root (links out refused, `..` never above it, link chains, a link loop), protected
 * names refused for writes unless approved, writes that replace a link rather than follow it,
 * regular files only (a FIFO refused at once, never waited on) with a byte cap, secrets refused
 * (home secrets inside the root, `.env` files, through links too), and errors as ToolErrors with codes.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { execFileSync } from "node:child_process";
import { existsSync, lstatSync, readFileSync, readlinkSync } from "node:fs";
import { chmod, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, describe, test } from "node:test";
import { ConfinedRoot, readUserFile, ToolError } from "../src/agent/fs/confined.js";
import { secretsInside } from "../src/agent/fs/secret-paths.js";

const temps: string[] = [];
after(async () => {
  await Promise.all(temps.map((dir) => rm(dir, { recursive: true, force: true })));
});

/** A root `ws` with `files`, a sibling `outside` with a secret, and a HOME inside the root. */
async function fixture(files: Record<string, string> = {}): Promise<{
  root: string;
  outside: string;
  top: string;
  home: string;
  ws: ConfinedRoot;
}> {
  const top = await mkdtemp(path.join(tmpdir(), "spark-confined-"));
  temps.push(top);
  const root = path.join(top, "ws");
  const outside = path.join(top, "outside");
  const home = path.join(root, "home");
  await mkdir(path.join(home, ".ssh"), { recursive: true });
  await writeFile(path.join(home, ".ssh", "id_rsa"), "PRIVATE KEY\n");
  await mkdir(outside);
  await writeFile(path.join(outside, "secret.txt"), "outside secret\n");
  for (const [rel, content] of Object.entries(files)) {
    await mkdir(path.dirname(path.join(root, rel)), { recursive: true });
    await writeFile(path.join(root, rel), content);
  }
  return { root, outside, top, home, ws: await ConfinedRoot.open(root, { home }) };
}

async function rejectsWith(promise: Promise<unknown>, code: string, ...words: string[]): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof ToolError, `expected a ToolError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    for (const word of words) assert.ok(error.message.includes(word), `"${word}" not in: ${error.message}`);
    return true;
  });
}

describe("rule 1: resolution beneath the root", () => {
  test("`..`, absolute paths elsewhere and links out are refused, for reads and writes", async () => {
    const { ws, root, outside } = await fixture({ "a.txt": "a\n" });
    await symlink(path.join(outside, "secret.txt"), path.join(root, "out.txt"));
    await symlink(outside, path.join(root, "outdir"));
    await symlink("../outside/secret.txt", path.join(root, "rel-out.txt"));
    await rejectsWith(ws.readFile("../outside/secret.txt"), "outside_workspace");
    await rejectsWith(ws.readFile(path.join(outside, "secret.txt")), "outside_workspace");
    await rejectsWith(ws.readFile("out.txt"), "outside_workspace", "symlink");
    await rejectsWith(ws.readFile("rel-out.txt"), "outside_workspace");
    await rejectsWith(ws.readFile("outdir/secret.txt"), "outside_workspace");
    await rejectsWith(ws.writeFile("outdir/new.txt", "x"), "outside_workspace");
    await rejectsWith(ws.writeFile("outdir/deep/new.txt", "x"), "outside_workspace");
    await rejectsWith(ws.readdir("outdir"), "outside_workspace");
    await rejectsWith(ws.mkdir("outdir/sub"), "outside_workspace");
    assert.deepEqual(execFileSync("ls", [outside], { encoding: "utf8" }), "secret.txt\n");
    // An absolute path inside the root is fine, spelled through the root as given.
    assert.equal((await ws.readFile(path.join(root, "a.txt"))).toString(), "a\n");
  });

  test("links inside are followed by the walk; a chain, `..` inside a link, a loop", async () => {
    const { ws, root } = await fixture({ "real/file.txt": "real\n" });
    await symlink("real", path.join(root, "alias"));
    await symlink("alias/file.txt", path.join(root, "chain.txt"));
    await symlink("../real/file.txt", path.join(root, "real", "up.txt"));
    await symlink(path.join(root, "real"), path.join(root, "absolute-alias"));
    await symlink("loop-b", path.join(root, "loop-a"));
    await symlink("loop-a", path.join(root, "loop-b"));
    assert.equal((await ws.readFile("alias/file.txt")).toString(), "real\n");
    assert.equal((await ws.readFile("chain.txt")).toString(), "real\n");
    assert.equal((await ws.readFile("real/up.txt")).toString(), "real\n");
    assert.equal((await ws.readFile("absolute-alias/file.txt")).toString(), "real\n");
    assert.equal((await ws.locate("chain.txt")).rel, "real/file.txt");
    assert.deepEqual(
      { ...(await ws.locate(".")), abs: "" },
      { rel: "", abs: "", kind: "directory", protectedPart: undefined },
    );
    assert.equal((await ws.locate("alias")).kind, "directory");
    await rejectsWith(ws.readFile("loop-a"), "invalid_argument", "too many levels of symlinks");
    await rejectsWith(ws.readFile("missing/file.txt"), "not_found");
    await rejectsWith(ws.readFile("real/file.txt/x"), "not_a_directory", "is a file");
  });

  test("a directory swapped for a link out between two operations is not followed", async () => {
    const { ws, root, outside } = await fixture({ "dir/a.txt": "a\n" });
    await ws.writeFile("dir/b.txt", "b\n");
    await rm(path.join(root, "dir"), { recursive: true });
    await symlink(outside, path.join(root, "dir"));
    await rejectsWith(ws.writeFile("dir/b.txt", "pwned"), "outside_workspace");
    assert.equal(existsSync(path.join(outside, "b.txt")), false);
  });
});

describe("rule 2: protected names", () => {
  test("writes by name or through a link are refused unless approved; reads are allowed", async () => {
    const { ws, root } = await fixture({ ".git/config": "[core]\n", "sub/.vscode/settings.json": "{}\n" });
    await symlink(".git/hooks", path.join(root, "hooks"));
    await symlink(".git/config", path.join(root, "innocent.txt"));
    await rejectsWith(ws.writeFile(".git/hooks/pre-commit", "x"), "protected_path", ".git");
    await rejectsWith(ws.writeFile(".GIT/config", "x"), "protected_path");
    await rejectsWith(ws.writeFile("hooks/pre-commit", "x"), "protected_path", ".git");
    await rejectsWith(ws.writeFile("innocent.txt", "x", { final: "follow" }), "protected_path");
    await rejectsWith(ws.writeFile("sub/.vscode/tasks.json", "{}"), "protected_path", "sub/.vscode");
    await rejectsWith(ws.remove(".git/config"), "protected_path");
    await rejectsWith(ws.mkdir(".spark/prompts"), "protected_path");
    await rejectsWith(ws.chmod(".git/config", 0o755), "protected_path");
    assert.equal(existsSync(path.join(root, ".git", "hooks")), false, "not even the directory was made");
    assert.equal((await ws.readFile(".git/config")).toString(), "[core]\n");
    assert.equal((await ws.readFile("innocent.txt")).toString(), "[core]\n");
    // The user approved: the same write goes through.
    await ws.writeFile(".git/config", "[core]\n\tbare = false\n", { allowProtected: true });
    assert.equal(readFileSync(path.join(root, ".git", "config"), "utf8"), "[core]\n\tbare = false\n");
    // Replacing the link itself (its name is not protected) is not a write into .git.
    await ws.writeFile("innocent.txt", "plain now\n");
    assert.equal(lstatSync(path.join(root, "innocent.txt")).isFile(), true);
    assert.equal(readFileSync(path.join(root, ".git", "config"), "utf8"), "[core]\n\tbare = false\n");
  });
});

describe("rule 3: writes never go through a link", () => {
  test("a link at the target is replaced: to outside, into .git, dangling", async () => {
    const { ws, root, outside } = await fixture({ ".git/HEAD": "ref\n" });
    await symlink(path.join(outside, "secret.txt"), path.join(root, "out.txt"));
    await symlink(".git/hooks/pre-commit", path.join(root, "tool.sh"));
    await symlink(path.join(outside, "new.txt"), path.join(root, "dangling.txt"));
    await ws.writeFile("out.txt", "mine\n");
    await ws.writeFile("tool.sh", "#!/bin/sh\n", { mode: 0o755 });
    await ws.writeFile("dangling.txt", "here\n");
    assert.equal(readFileSync(path.join(outside, "secret.txt"), "utf8"), "outside secret\n");
    assert.equal(existsSync(path.join(outside, "new.txt")), false);
    assert.equal(existsSync(path.join(root, ".git", "hooks")), false);
    for (const name of ["out.txt", "tool.sh", "dangling.txt"])
      assert.equal(lstatSync(path.join(root, name)).isFile(), true, name);
    assert.equal((await stat(path.join(root, "tool.sh"))).mode & 0o777, 0o755);
  });

  test("final: follow writes the file a link inside names; an existing file keeps its mode", async () => {
    const { ws, root } = await fixture({ "real.txt": "a\n" });
    await chmod(path.join(root, "real.txt"), 0o751);
    await symlink("real.txt", path.join(root, "alias.txt"));
    const landed = await ws.writeFile("alias.txt", "b\n", { final: "follow" });
    assert.equal(landed.rel, "real.txt");
    assert.equal(readFileSync(path.join(root, "real.txt"), "utf8"), "b\n");
    assert.equal(lstatSync(path.join(root, "alias.txt")).isSymbolicLink(), true);
    assert.equal((await stat(path.join(root, "real.txt"))).mode & 0o777, 0o751);
  });

  test("chmod and utimes never follow; remove takes the link, not its target; a tree is removed by descriptors", async () => {
    const { ws, root, outside } = await fixture({ "tree/a.txt": "a\n" });
    await symlink(path.join(outside, "secret.txt"), path.join(root, "link.txt"));
    await symlink(outside, path.join(root, "tree", "escape"));
    await rejectsWith(ws.chmod("link.txt", 0o777), "symlink_refused");
    await rejectsWith(ws.utimes("link.txt", new Date(0), new Date(0)), "symlink_refused");
    assert.notEqual((await stat(path.join(outside, "secret.txt"))).mode & 0o777, 0o777);
    assert.equal(await ws.remove("link.txt"), true);
    assert.equal(existsSync(path.join(outside, "secret.txt")), true);
    await rejectsWith(ws.remove("tree"), "invalid_argument", "not empty");
    assert.equal(await ws.remove("tree", { recursive: true }), true);
    assert.equal(existsSync(path.join(root, "tree")), false);
    assert.deepEqual(execFileSync("ls", [outside], { encoding: "utf8" }), "secret.txt\n");
  });

  test("symlink() makes links inside; one out, into .git or at a secret is refused", async () => {
    const { ws, root, outside } = await fixture({
      "docs/a.md": "a\n",
      ".git/config": "x\n",
      ".env": "K=V\n",
    });
    await ws.symlink("docs/link.md", "a.md");
    assert.equal(readlinkSync(path.join(root, "docs", "link.md")), "a.md");
    await ws.symlink("up.md", "docs/a.md");
    await rejectsWith(ws.symlink("x.md", path.join(outside, "secret.txt")), "symlink_refused", "outside");
    await rejectsWith(ws.symlink("y.md", "../outside/secret.txt"), "symlink_refused", "outside");
    await rejectsWith(ws.symlink("z.md", "/"), "symlink_refused", "outside");
    await rejectsWith(ws.symlink("build.sh", ".git/hooks/post-checkout"), "symlink_refused", ".git");
    await rejectsWith(ws.symlink("env.txt", ".env"), "symlink_refused", ".env");
    await rejectsWith(ws.symlink("key", "home/.ssh/id_rsa"), "symlink_refused", "secrets");
    // A target through a link already there that leads out is refused too.
    await symlink(outside, path.join(root, "outdir"));
    await rejectsWith(ws.symlink("w.md", "outdir/secret.txt"), "symlink_refused", "outside");
  });
});

describe("rule 4: regular files only, never waited on, with a cap", () => {
  test("a FIFO, a directory, a device are refused at once; a long file is too_large", async () => {
    const { ws, root } = await fixture({ "big.txt": "x".repeat(1000) });
    execFileSync("mkfifo", [path.join(root, "pipe")]);
    await symlink("pipe", path.join(root, "pipe-link.md"));
    await symlink("/dev/zero", path.join(root, "zero"));
    await rejectsWith(ws.readFile("pipe"), "not_a_file", "FIFO");
    await rejectsWith(ws.readFile("pipe-link.md"), "not_a_file", "FIFO");
    assert.throws(() => ws.readFileSync("pipe"), { code: "not_a_file" });
    await rejectsWith(ws.readFile("zero"), "outside_workspace");
    await rejectsWith(ws.readFile("."), "not_a_file", "directory");
    await rejectsWith(ws.readFile("big.txt", { maxBytes: 999 }), "too_large", "1000");
    assert.equal((await ws.readFile("big.txt", { maxBytes: 1000 })).length, 1000);
    await rejectsWith(readUserFile(path.join(root, "pipe")), "not_a_file", "FIFO");
    await rejectsWith(readUserFile("/dev/zero"), "not_a_file", "device");
  });
});

describe("rule 5: secrets", () => {
  test("home secrets inside the root and .env files are refused, by name or through a link", async () => {
    const { ws, root, home } = await fixture({
      ".env": "TOKEN=1\n",
      "app/.env.local": "K=2\n",
      ".env.example": "TOKEN=\n",
    });
    await symlink(path.join(home, ".ssh", "id_rsa"), path.join(root, "notes.md"));
    await symlink(".env", path.join(root, "env.txt"));
    await rejectsWith(ws.readFile("home/.ssh/id_rsa"), "secret_path", "secrets");
    await rejectsWith(ws.readFile("notes.md"), "secret_path");
    await rejectsWith(ws.readdir("home/.ssh"), "secret_path");
    await rejectsWith(ws.writeFile("home/.ssh/authorized_keys", "x"), "secret_path");
    await rejectsWith(ws.readFile(".env"), "secret_path", ".env");
    await rejectsWith(ws.readFile("app/.env.local"), "secret_path");
    await rejectsWith(ws.readFile("env.txt"), "secret_path");
    assert.equal((await ws.readFile(".env.example")).toString(), "TOKEN=\n");
    // A user-named file through a link to a secret is refused by where the descriptor landed.
    await rejectsWith(readUserFile(path.join(root, "notes.md"), { home }), "secret_path", ".ssh");
    await rejectsWith(readUserFile(path.join(root, "env.txt"), { home }), "secret_path", ".env");
    assert.equal((await readUserFile(path.join(root, ".env.example"), { home })).toString(), "TOKEN=\n");
  });

  test("a home outside the root whose secrets are links into it: found where they land, existing or not", async () => {
    const { root, top } = await fixture({ "keys/credentials": "[default]\n", "conf/README": "x\n" });
    const home = path.join(top, "elsewhere-home");
    await mkdir(home);
    // ~/.aws is a link into the workspace; ~/.config a link to a workspace folder where gh/ does not
    // exist yet (it would be created there); ~/.kube a link loop; ~/.ssh a plain folder outside.
    await symlink(path.join(root, "keys"), path.join(home, ".aws"));
    await symlink("../ws/conf", path.join(home, ".config"));
    await symlink(".kube2", path.join(home, ".kube"));
    await symlink(".kube", path.join(home, ".kube2"));
    await mkdir(path.join(home, ".ssh"));
    const secrets = secretsInside(root, home);
    assert.ok(secrets.includes(path.join(root, "keys")), secrets.join(", "));
    assert.ok(secrets.includes(path.join(root, "conf", "gh")), secrets.join(", "));
    assert.ok(!secrets.some((p) => p.includes(".kube") || p.includes(".ssh")), secrets.join(", "));
    const ws = await ConfinedRoot.open(root, { home });
    await rejectsWith(ws.readFile("keys/credentials"), "secret_path");
    await rejectsWith(ws.writeFile("conf/gh/hosts.yml", "token"), "secret_path");
    assert.equal((await ws.readFile("conf/README")).toString(), "x\n");
  });
});

describe("rule 1 under a race: a concurrent process swapping a directory for a link", () => {
  test("no write lands outside while a link out is swapped in and out", { timeout: 120_000 }, async () => {
    const { ws, root, outside } = await fixture({ "dir/keep.txt": "k\n" });
    // A shell loop swaps dir/ for a link to outside and back as fast as it can.
    const swapper = spawn(
      "bash",
      [
        "-c",
        `cd ${JSON.stringify(root)}; while :; do mv dir dir.real 2>/dev/null; ln -sfn ${JSON.stringify(outside)} dir; ` +
          "rm -f dir; mv dir.real dir 2>/dev/null; done",
      ],
      { stdio: "ignore" },
    );
    try {
      for (let i = 0; i < 300; i++) {
        await ws.writeFile(`dir/w${i}.txt`, "x").catch(() => undefined);
        await ws.readFile("dir/keep.txt").catch(() => undefined);
      }
    } finally {
      swapper.kill("SIGKILL");
    }
    assert.deepEqual(
      execFileSync("ls", [outside], { encoding: "utf8" }),
      "secret.txt\n",
      "nothing written outside",
    );
    assert.equal(await readFile(path.join(outside, "secret.txt"), "utf8"), "outside secret\n");
  });
});
