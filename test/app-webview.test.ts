/**
 * The app as the VS Code pane uses it (editors/vscode/src/pane*.ts): `spark app --allowed-origin`
 * with a webview's origin lets exactly that origin load the front end (a module script: CORS) and
 * open the socket, and refuses every other webview; a task's changed file is read back with `file`
 * (both sides of VS Code's diff) and applied one file at a time. `@` in the composer completes
 * workspace file names and attaches the files a message names.
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, describe, test } from "node:test";
import WebSocket from "ws";
import type { ServerMessage } from "../src/app/protocol.js";
import { launchBrowser } from "./helpers/browser.js";
import { scriptAppArgs, startAppCli, stopApps } from "./helpers/app.js";
import { file, freshDir } from "./helpers/cli.js";

const WEBVIEW = "vscode-webview://1a2b3c4d-pane";
after(stopApps);

async function startApp(
  workspace: string,
  script: string,
  env: Record<string, string> = {},
): Promise<string> {
  const app = await startAppCli(
    scriptAppArgs(workspace, script, "--allowed-origin", WEBVIEW),
    { SPARK_DATA_DIR: freshDir("data-"), ...env },
    300_000,
  );
  return app.url;
}

/** Opens the app's socket as a page on `origin` would; resolves with the socket or the refusal's status. */
function connect(
  url: string,
  origin: string,
  protocols: string[] = [],
): Promise<{ ws: WebSocket; messages: ServerMessage[] } | number> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(new URL("/app/ws", url.replace(/^http/, "ws")), protocols, { origin });
    const messages: ServerMessage[] = [];
    ws.on("message", (data) => messages.push(JSON.parse(String(data)) as ServerMessage));
    ws.once("open", () => resolve({ ws, messages }));
    ws.once("unexpected-response", (_request, response) => resolve(response.statusCode ?? 0));
    ws.once("error", reject);
  });
}

async function waitFor<T>(what: string, find: () => T | undefined): Promise<T> {
  for (let i = 0; i < 2000; i++) {
    const found = find();
    if (found !== undefined) return found;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe("spark app for the VS Code pane", { timeout: 180_000 }, () => {
  test("allows exactly the webview origin it was given, serves it the front end, and answers file", async () => {
    const workspace = freshDir("ws-");
    writeFileSync(join(workspace, "notes.txt"), "hello\nworld\n");
    writeFileSync(join(workspace, "other.txt"), "one\n");
    const script = file(
      "pane-edits.jsonl",
      [
        {
          output: [
            {
              type: "custom_tool_call",
              name: "apply_patch",
              input:
                "*** Begin Patch\n*** Update File: notes.txt\n@@\n hello\n-world\n+spark\n" +
                "*** Update File: other.txt\n@@\n-one\n+two\n*** End Patch",
            },
          ],
        },
        { output: [{ type: "message", text: "Edited `notes.txt:2`." }] },
      ]
        .map((line) => JSON.stringify(line))
        .join("\n") + "\n",
    );
    const url = await startApp(workspace, script);

    // The front end's module script, fetched as the webview does (CORS): readable by that origin.
    const script200 = await fetch(new URL("app.js", url), { headers: { origin: WEBVIEW } });
    assert.equal(script200.status, 200);
    assert.equal(script200.headers.get("access-control-allow-origin"), WEBVIEW);
    // Another webview (another extension's, or another window's) is refused, page and socket alike.
    const other = "vscode-webview://0000-someone-else";
    const refused = await fetch(new URL("app.js", url), { headers: { origin: other } });
    assert.equal(refused.status, 403);
    assert.equal(((await refused.json()) as { error: { code: string } }).error.code, "origin_not_allowed");
    assert.equal(await connect(url, other), 403);
    assert.equal(await connect(url, "vscode-webview://1a2b3c4d-pane.evil"), 403);

    const socket = await connect(url, WEBVIEW);
    assert.notEqual(typeof socket, "number", "the allowed webview's socket opens");
    const { ws, messages } = socket as Exclude<typeof socket, number>;
    await waitFor("hello", () => messages.find((m) => m.type === "hello"));
    ws.send(JSON.stringify({ type: "task.create", model: "spark", text: "Edit the notes" }));
    const summary = await waitFor("the task's two changed files", () => {
      const updates = messages.filter((m) => m.type === "task.updated");
      const last = updates.at(-1);
      return last?.type === "task.updated" &&
        last.summary.changedFiles.length === 2 &&
        last.summary.state === "done"
        ? last.summary
        : undefined;
    });

    // `file`: before and after of a changed file, for the editor's diff; refused for any other path.
    ws.send(JSON.stringify({ type: "file", task: summary.id, path: "notes.txt" }));
    const answer = await waitFor("the file", () => messages.find((m) => m.type === "file"));
    assert.deepEqual(answer, {
      type: "file",
      task: summary.id,
      path: "notes.txt",
      before: "hello\nworld\n",
      after: "hello\nspark\n",
    });
    ws.send(JSON.stringify({ type: "file", task: summary.id, path: "../etc/passwd" }));
    const error = await waitFor("the refusal", () =>
      messages.find((m) => m.type === "error" && m.code === "file_not_changed"),
    );
    assert.ok(error);

    // The task works in its own copy: the diff's right side is the task's file, not yet on disk.
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nworld\n");
    // Apply one file (the diff editor's Apply): it lands, the other stays the task's alone.
    ws.send(JSON.stringify({ type: "apply", task: summary.id, path: "notes.txt" }));
    const review = await waitFor("the review after applying one file", () =>
      messages.find((m) => m.type === "review"),
    );
    assert.equal(review.type, "review");
    assert.deepEqual(review.type === "review" ? review.applied : [], ["notes.txt"]);
    assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), "hello\nspark\n");
    assert.equal(readFileSync(join(workspace, "other.txt"), "utf8"), "one\n");
    ws.close();
  });
});

describe("a keyed app in the pane", { timeout: 180_000 }, () => {
  test("the webview names the session its extension signed in with as a subprotocol; nothing else opens the socket", async () => {
    const script = file("keyed.jsonl", JSON.stringify({ output: [{ type: "message", text: "hi" }] }) + "\n");
    const url = await startApp(freshDir("ws-"), script, { SPARK_API_KEY: "pane-key-1" });
    // No cookie can reach the app from the webview: without the session the socket is refused.
    assert.equal(await connect(url, WEBVIEW), 401);
    // The extension signs in from the extension host (no Origin), as pane-app.ts does.
    const login = await fetch(new URL("/app/login", url), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ key: "pane-key-1" }),
    });
    assert.equal(login.status, 200);
    const session = /spark_app=([^;]+)/.exec(login.headers.get("set-cookie") ?? "")?.[1];
    assert.ok(session);
    assert.equal(await connect(url, WEBVIEW, ["spark-session.not-a-session"]), 401);
    // Another webview with the right session is still refused by origin.
    assert.equal(await connect(url, "vscode-webview://someone-else", [`spark-session.${session}`]), 403);
    const socket = await connect(url, WEBVIEW, [`spark-session.${session}`]);
    assert.notEqual(typeof socket, "number");
    const { ws, messages } = socket as Exclude<typeof socket, number>;
    assert.equal(ws.protocol, `spark-session.${session}`);
    await waitFor("hello", () => messages.find((m) => m.type === "hello"));
    ws.close();
  });
});

describe("@ in the composer", { timeout: 180_000 }, () => {
  test("completes workspace file names, and a message's @path carries the file to the model", async () => {
    const workspace = freshDir("ws-");
    writeFileSync(join(workspace, "notes.txt"), "NOTES-CONTENT-42\n");
    mkdirSync(join(workspace, "src"));
    writeFileSync(join(workspace, "src", "notebook.ts"), "export {};\n");
    mkdirSync(join(workspace, "node_modules"));
    writeFileSync(join(workspace, "node_modules", "notes-lib.js"), "");
    const script = file(
      "mention.jsonl",
      JSON.stringify({ output: [{ type: "message", text: "Read it." }] }) + "\n",
    );
    const url = await startApp(workspace, script);
    const browser = await launchBrowser();
    const page = await browser.newPage({ viewport: { width: 1200, height: 800 } });
    page.setDefaultTimeout(0);
    await page.goto(url);
    const input = page.locator("textarea.input");
    await input.waitFor();
    await input.fill("Summarize @note");
    const menu = page.locator(".file-menu .menu-name");
    await menu.first().waitFor();
    // Names that start with the query first; node_modules is not offered.
    assert.deepEqual(await menu.allInnerTexts(), ["@notes.txt", "@src/notebook.ts"]);
    await input.press("Tab");
    assert.equal(await input.inputValue(), "Summarize @notes.txt ");
    await input.press("Enter");
    // The message the task got (and the model with it) carries the file's content.
    const user = page.locator(".msg.user");
    await user.filter({ hasText: "NOTES-CONTENT-42" }).waitFor();
    await page.locator(".msg.assistant .markdown", { hasText: "Read it." }).waitFor();
    await browser.close();
  });
});
