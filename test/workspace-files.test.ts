/**
 * The app's `@` attachments (src/app/workspace-files.ts) on real files: a listed file is attached;
 * one that is a link out of the workspace, a FIFO, or a `.env` file is not (and a FIFO does not block
 * the message), in a git repository (git's list) and outside one (the walk).
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { WorkspaceFiles } from "../src/app/workspace-files.js";
import { freshDir } from "./helpers/cli.js";

for (const withGit of [false, true]) {
  test(`@path attaches workspace files only through the confined layer (${withGit ? "git" : "no git"})`, async () => {
    const top = freshDir("ws-files-");
    const root = join(top, "ws");
    mkdirSync(join(root, "src"), { recursive: true });
    writeFileSync(join(top, "outside.txt"), "OUTSIDE-SECRET\n");
    writeFileSync(join(root, "src", "app.ts"), "export const app = 1;\n");
    writeFileSync(join(root, "notes.txt"), "plain notes\n");
    writeFileSync(join(root, ".env"), "DOTENV-SECRET=1\n");
    symlinkSync(join(top, "outside.txt"), join(root, "link.txt"));
    execFileSync("mkfifo", [join(root, "pipe.txt")]);
    if (withGit) {
      execFileSync("git", ["init", "-q"], { cwd: root });
      // Tracked by a careless repository: still never attached.
      execFileSync("git", ["add", "-f", "src/app.ts", ".env", "notes.txt", "link.txt"], { cwd: root });
    }
    const files = new WorkspaceFiles(root);
    const text = await files.attach("look at @src/app.ts and @notes.txt, @link.txt, @pipe.txt, @.env");
    assert.match(text, /`src\/app\.ts`:\n```\nexport const app = 1;/);
    assert.match(text, /`notes\.txt`:\n```\nplain notes/);
    assert.doesNotMatch(text, /OUTSIDE-SECRET|DOTENV-SECRET/);
    assert.doesNotMatch(text, /`pipe\.txt`/);
  });
}
