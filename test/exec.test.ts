/**
 * `spark exec` end to end: real CLI processes (through test/helpers/cli.ts), real temporary
 * workspaces, the script engine as the model (line N of the script is the model's Nth turn), and
 * the `--json` event stream, the workspace's files and the saved session as what is checked. Also
 * the `response.cancel` WebSocket frame the agent relies on, against an in-process server.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import {
  existsSync,
  lstatSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { createServer, type Server } from "node:net";
import { homedir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import type { ThreadItem } from "../src/agent/tools/index.js";
import { detectSandbox } from "../src/agent/sandbox/sandbox.js";
import {
  file,
  freshDir,
  jsonLines,
  runToExit,
  spawnCli,
  startServer,
  stop,
  waitForStdout,
} from "./helpers/cli.js";
import { closedPort } from "./helpers/ports.js";
import { startScriptServer } from "./helpers/servers.js";
import { TERMINAL_TYPES, terminalOf, textOf, WsClient, type ServerEvent } from "./helpers/ws-client.js";

interface ExecEvent {
  type: string;
  thread_id?: string;
  item?: ThreadItem;
  usage?: { input_tokens: number; cached_input_tokens: number; output_tokens: number };
  error?: { message: string; code?: string };
}

type ScriptItem =
  | { type: "message"; text: string }
  | { type: "function_call"; name: string; arguments: string }
  | { type: "custom_tool_call"; name: string; input: string };

/** Writes a script (one model turn per entry) and returns its path. */
function script(turns: readonly (readonly ScriptItem[])[]): string {
  return file(
    `script-${randomUUID()}.jsonl`,
    turns.map((output) => JSON.stringify({ output })).join("\n") + "\n",
  );
}

/** `spark serve` with the script engine on a free port, plus `extra` flags. */
function serveScript(scriptPath: string, ...extra: string[]): ReturnType<typeof startServer> {
  return startServer(["serve", "--engine", "script", "--script", scriptPath, "--port", "0", ...extra]);
}

const say = (text: string): ScriptItem => ({ type: "message", text });
const patch = (body: string): ScriptItem => ({
  type: "custom_tool_call",
  name: "apply_patch",
  input: `*** Begin Patch\n${body}\n*** End Patch`,
});
const call = (name: string, args: Record<string, unknown>): ScriptItem => ({
  type: "function_call",
  name,
  arguments: JSON.stringify(args),
});

/** One event as a line for an ordered comparison: the type, then the item's type and status. */
function shape(event: ExecEvent): string {
  if (!event.item) return event.type;
  const status = "status" in event.item ? ` ${event.item.status}` : "";
  return `${event.type} ${event.item.type}${status}`;
}

function completedItems(events: readonly ExecEvent[]): ThreadItem[] {
  return events.filter((e) => e.type === "item.completed").map((e) => e.item!);
}

/** The completed command items, in order. */
function commandItems(events: readonly ExecEvent[]): (ThreadItem & { type: "command_execution" })[] {
  return completedItems(events)
    .filter((item) => item.type === "command_execution")
    .map((item) => item as ThreadItem & { type: "command_execution" });
}

function itemOf<T extends ThreadItem["type"]>(
  item: ThreadItem | undefined,
  type: T,
): ThreadItem & { type: T } {
  assert.ok(item, `expected a ${type} item`);
  assert.equal(item.type, type, JSON.stringify(item));
  return item as ThreadItem & { type: T };
}

interface ExecRun {
  code: number | string;
  stdout: string;
  stderr: string;
  events: ExecEvent[];
  dataDir: string;
}

/**
 * Runs `spark exec --json` with the in-process script engine on `workspace`. `args` are the task and
 * any other flags, in the order given (after the workspace and script flags).
 */
async function execScript(
  workspace: string,
  scriptPath: string,
  args: readonly string[],
  dataDir = freshDir("data-"),
  env: Record<string, string> = {},
): Promise<ExecRun> {
  const result = await runToExit(
    ["exec", "--json", "-C", workspace, "--engine", "script", "--script", scriptPath, ...args],
    { SPARK_DATA_DIR: dataDir, ...env },
  );
  return { ...result, events: jsonLines<ExecEvent>(result.stdout), dataDir };
}

/** The items of a saved session file, in order. */
function sessionItems(dataDir: string, id: string): Record<string, unknown>[] {
  const lines = jsonLines<{ type: string; items?: Record<string, unknown>[] }>(
    readFileSync(join(dataDir, "sessions", `${id}.jsonl`), "utf8"),
  );
  let items: Record<string, unknown>[] = [];
  for (const line of lines) {
    if (line.type === "items") items.push(...line.items!);
    else if (line.type === "reset") items = [...line.items!];
  }
  return items;
}

function userTexts(items: readonly Record<string, unknown>[]): string[] {
  return items
    .filter((item) => item.type === "message" && item.role === "user")
    .map((item) => (item.content as { text: string }[]).map((part) => part.text).join(""));
}

const OUTSIDE_MESSAGE = /is outside the workspace/;

test("a task adds a file, edits it with an @@ hunk, runs a command that reads it and writes another", async () => {
  const workspace = freshDir("ws-");
  const greet = 'function greet(name) {\n  return "hello " + name;\n}\n';
  const scriptPath = script([
    [
      say("Creating greet.js."),
      patch('*** Add File: src/greet.js\n+function greet(name) {\n+  return "hello " + name;\n+}'),
    ],
    [
      patch(
        '*** Update File: src/greet.js\n@@ function greet(name) {\n-  return "hello " + name;\n+  return "hi " + name;\n }',
      ),
    ],
    [call("shell", { command: "cat src/greet.js && wc -l < src/greet.js > lines.txt" })],
    [say("greet.js now says hi.")],
  ]);
  const { code, stderr, events, dataDir } = await execScript(workspace, scriptPath, ["write greet.js"]);
  assert.equal(code, 0, stderr);

  const edited = greet.replace('"hello "', '"hi "');
  assert.equal(readFileSync(join(workspace, "src/greet.js"), "utf8"), edited);
  assert.equal(readFileSync(join(workspace, "lines.txt"), "utf8"), "3\n");
  assert.deepEqual(readdirSync(workspace).sort(), ["lines.txt", "src"]);

  assert.deepEqual(events.map(shape), [
    "thread.started",
    "turn.started",
    "item.started agent_message",
    "item.completed agent_message",
    "item.started file_change in_progress",
    "item.completed file_change completed",
    "item.started file_change in_progress",
    "item.completed file_change completed",
    "item.started command_execution in_progress",
    "item.completed command_execution completed",
    "item.started agent_message",
    "item.completed agent_message",
    "turn.completed",
  ]);
  // Each item.started has its item.completed with the same id; ids are distinct per item.
  const startedIds = events.filter((e) => e.type === "item.started").map((e) => e.item!.id);
  const completed = completedItems(events);
  assert.deepEqual(
    completed.map((item) => item.id),
    startedIds,
  );
  assert.equal(new Set(startedIds).size, startedIds.length);

  const [intro, added, updated, command, answer] = completed;
  assert.equal(itemOf(intro, "agent_message").text, "Creating greet.js.");
  assert.deepEqual(itemOf(added, "file_change").changes, [{ path: "src/greet.js", kind: "add" }]);
  assert.deepEqual(itemOf(updated, "file_change").changes, [{ path: "src/greet.js", kind: "update" }]);
  const shell = itemOf(command, "command_execution");
  assert.equal(shell.command, "cat src/greet.js && wc -l < src/greet.js > lines.txt");
  assert.equal(shell.exit_code, 0);
  assert.equal(shell.aggregated_output, edited);
  assert.equal(itemOf(answer, "agent_message").text, "greet.js now says hi.");

  const usage = events.at(-1)!.usage!;
  for (const key of ["input_tokens", "output_tokens"] as const) {
    assert.ok(Number.isInteger(usage[key]) && usage[key] > 0, `${key}: ${usage[key]}`);
  }
  assert.ok(Number.isInteger(usage.cached_input_tokens) && usage.cached_input_tokens >= 0);

  const threadId = events[0]!.thread_id!;
  assert.match(threadId, /^\d{8}T\d{6}-[a-z0-9]+$/);
  assert.deepEqual(readdirSync(join(dataDir, "sessions")), [`${threadId}.jsonl`]);
  const meta = JSON.parse(
    readFileSync(join(dataDir, "sessions", `${threadId}.jsonl`), "utf8").split("\n")[0]!,
  );
  assert.equal(meta.type, "session");
  assert.equal(meta.id, threadId);
  assert.equal(meta.cwd, workspace);
  const items = sessionItems(dataDir, threadId);
  assert.deepEqual(userTexts(items), ["write greet.js"]);
  assert.deepEqual(
    items.map((item) => item.type),
    [
      "message",
      "message",
      "custom_tool_call",
      "custom_tool_call_output",
      "custom_tool_call",
      "custom_tool_call_output",
      "function_call",
      "function_call_output",
      "message",
    ],
  );
  const shellOutput = items.find((item) => item.type === "function_call_output")!;
  assert.match(String(shellOutput.output), /^Exit code: 0\n/);
  assert.ok(String(shellOutput.output).endsWith(`Output:\n${edited}`), String(shellOutput.output));
});

test("a patch whose hunk does not match fails, leaves the file as it was, and tells the model why", async () => {
  const workspace = freshDir("ws-");
  const original = "alpha\nbeta\r\ngamma\n\ttabbed   \n";
  writeFileSync(join(workspace, "notes.txt"), original);
  const scriptPath = script([
    [patch("*** Update File: notes.txt\n@@\n not in the file\n-beta\n+BETA")],
    [say("The patch did not apply.")],
  ]);
  const { code, stderr, events, dataDir } = await execScript(workspace, scriptPath, ["edit notes"]);
  assert.equal(code, 0, stderr);
  assert.equal(readFileSync(join(workspace, "notes.txt"), "utf8"), original);
  assert.deepEqual(readdirSync(workspace), ["notes.txt"]);

  assert.deepEqual(events.map(shape), [
    "thread.started",
    "turn.started",
    "item.started file_change in_progress",
    "item.completed file_change failed",
    "item.started agent_message",
    "item.completed agent_message",
    "turn.completed",
  ]);
  const [failed, answer] = completedItems(events);
  const change = itemOf(failed, "file_change");
  assert.deepEqual(change.changes, [{ path: "notes.txt", kind: "update" }]);
  assert.ok(change.error, "a failed patch carries its error");
  assert.match(change.error, /hunk 1 of notes\.txt does not apply/);
  assert.match(change.error, /not in the file/);
  assert.match(change.error, /No file was changed/);
  // Line 2 of the script answered: the model got a second turn after the failed call.
  assert.equal(itemOf(answer, "agent_message").text, "The patch did not apply.");

  const items = sessionItems(dataDir, events[0]!.thread_id!);
  const callItem = items.find((item) => item.type === "custom_tool_call")!;
  const output = items.find((item) => item.type === "custom_tool_call_output")!;
  assert.equal(output.call_id, callItem.call_id);
  assert.equal(output.output, change.error);
});

test("escapes from the workspace are refused: .., absolute paths, symlinks out, reads of outside files", async () => {
  const base = freshDir("escape-");
  const workspace = join(base, "ws");
  const outside = join(base, "outside");
  mkdirSync(workspace);
  mkdirSync(outside);
  writeFileSync(join(base, "secret"), "TOP-SECRET-VALUE\n");
  writeFileSync(join(outside, "target.txt"), "orig\n");
  symlinkSync(join(outside, "target.txt"), join(workspace, "link.txt"));
  const absolute = join(outside, "abs.txt");
  const scriptPath = script([
    [patch("*** Add File: ../outside.txt\n+escaped")],
    [patch(`*** Add File: ${absolute}\n+escaped`)],
    [patch("*** Update File: link.txt\n@@\n-orig\n+changed")],
    [call("read_file", { path: "../secret" })],
    [call("read_file", { path: "/etc/passwd" })],
    [call("list_files", { path: ".." })],
    [call("shell", { command: "touch escaped.txt", workdir: ".." })],
    [say("Nothing escaped.")],
  ]);
  const { code, stdout, stderr, events, dataDir } = await execScript(workspace, scriptPath, [
    "--sandbox",
    "off",
    "try to escape",
  ]);
  assert.equal(code, 0, stderr);

  // Nothing was created or changed outside the workspace, nor inside it.
  assert.deepEqual(readdirSync(base).sort(), ["outside", "secret", "ws"]);
  assert.deepEqual(readdirSync(outside), ["target.txt"]);
  assert.equal(readFileSync(join(outside, "target.txt"), "utf8"), "orig\n");
  assert.deepEqual(readdirSync(workspace), ["link.txt"]);
  assert.ok(lstatSync(join(workspace, "link.txt")).isSymbolicLink(), "the symlink itself is untouched");

  const items = completedItems(events);
  assert.equal(items.length, 8, JSON.stringify(items));
  const [dotdot, abs, link, secret, passwd, list, shell, answer] = items;
  for (const [item, path] of [
    [dotdot, "../outside.txt"],
    [abs, absolute],
    [link, "link.txt"],
  ] as const) {
    const change = itemOf(item, "file_change");
    assert.equal(change.status, "failed", path);
    assert.equal(change.changes[0]?.path, path);
    assert.match(change.error ?? "", OUTSIDE_MESSAGE, path);
    assert.ok(change.error!.startsWith(`${path} is outside the workspace`), change.error);
  }
  assert.match(itemOf(link, "file_change").error!, /resolves through a symlink/);
  for (const [item, path] of [
    [secret, "../secret"],
    [passwd, "/etc/passwd"],
    [list, ".."],
  ] as const) {
    const toolCall = itemOf(item, "tool_call");
    assert.equal(toolCall.status, "failed", path);
    assert.match(toolCall.result ?? "", OUTSIDE_MESSAGE, path);
  }
  // A shell workdir outside the workspace: the command never runs (no sandbox here to stop it).
  const command = itemOf(shell, "command_execution");
  assert.equal(command.status, "failed");
  assert.equal(command.exit_code, null);
  assert.equal(command.command, "touch escaped.txt");
  assert.match(command.aggregated_output, /^\.\. is outside the workspace/);
  assert.equal(itemOf(answer, "agent_message").text, "Nothing escaped.");
  // The outside contents reached neither the output nor the model.
  const saved = readFileSync(join(dataDir, "sessions", `${events[0]!.thread_id}.jsonl`), "utf8");
  for (const text of [stdout, saved]) {
    assert.ok(!text.includes("TOP-SECRET-VALUE"));
    assert.ok(!text.includes("root:x:0:0"));
  }
  const outputs = sessionItems(dataDir, events[0]!.thread_id!).filter((item) =>
    String(item.type).endsWith("_output"),
  );
  assert.equal(outputs.length, 7);
  for (const output of outputs) assert.match(String(output.output), OUTSIDE_MESSAGE);
});

test("under the sandbox a shell command cannot write outside the workspace", async (t) => {
  const sandbox = await detectSandbox();
  if (sandbox.kind === "none") {
    t.skip(`no usable bubblewrap sandbox here: ${sandbox.reason}`);
    return;
  }
  // The sandbox gives commands a private /tmp, so a folder outside /tmp shows the read-only root.
  let visible: string;
  try {
    visible = mkdtempSync(join(homedir(), ".spark-exec-test-"));
  } catch (error) {
    t.skip(`cannot create a folder outside /tmp in ${homedir()}: ${(error as Error).message}`);
    return;
  }
  try {
    const hidden = freshDir("outside-");
    const workspace = freshDir("ws-");
    const scriptPath = script([
      [call("shell", { command: `echo x > ${visible}/made.txt` })],
      [call("shell", { command: `echo x > ${hidden}/made.txt` })],
      [call("shell", { command: "echo inside > inside.txt" })],
      [say("Done.")],
    ]);
    const { code, stderr, events } = await execScript(workspace, scriptPath, ["write around"]);
    assert.equal(code, 0, stderr);
    assert.deepEqual(readdirSync(visible), [], "nothing was written to the read-only folder");
    assert.deepEqual(readdirSync(hidden), [], "nothing was written to the folder under /tmp");
    assert.equal(readFileSync(join(workspace, "inside.txt"), "utf8"), "inside\n");

    const [readOnly, underTmp, inside] = completedItems(events);
    const first = itemOf(readOnly, "command_execution");
    assert.equal(first.status, "failed");
    assert.notEqual(first.exit_code, 0);
    assert.notEqual(first.exit_code, null);
    assert.match(first.aggregated_output, /Read-only file system/);
    const second = itemOf(underTmp, "command_execution");
    assert.equal(second.status, "failed");
    assert.notEqual(second.exit_code, 0);
    assert.match(second.aggregated_output, /No such file or directory/);
    const third = itemOf(inside, "command_execution");
    assert.equal(third.status, "completed");
    assert.equal(third.exit_code, 0);
  } finally {
    rmSync(visible, { recursive: true, force: true });
  }
});

test("--approval untrusted: exec refuses what would need a question, runs read-only commands", async () => {
  const workspace = freshDir("ws-");
  writeFileSync(join(workspace, "seen.txt"), "seen\n");
  const scriptPath = script([
    [call("shell", { command: "touch made.txt" })],
    [call("shell", { command: "ls" })],
    [patch("*** Add File: patched.txt\n+x")],
    [say("Some things were refused.")],
  ]);
  const { code, stderr, events, dataDir } = await execScript(workspace, scriptPath, [
    "--approval",
    "untrusted",
    "try things",
  ]);
  assert.equal(code, 0, stderr);
  assert.deepEqual(readdirSync(workspace), ["seen.txt"]);

  // Declined items never start.
  assert.deepEqual(events.map(shape), [
    "thread.started",
    "turn.started",
    "item.completed command_execution declined",
    "item.started command_execution in_progress",
    "item.completed command_execution completed",
    "item.completed file_change declined",
    "item.started agent_message",
    "item.completed agent_message",
    "turn.completed",
  ]);
  const [touch, ls, added] = completedItems(events);
  const refused = itemOf(touch, "command_execution");
  assert.equal(refused.command, "touch made.txt");
  assert.equal(refused.exit_code, null);
  assert.match(refused.aggregated_output, /untrusted mode/);
  assert.match(refused.aggregated_output, /--approval never/);
  const listed = itemOf(ls, "command_execution");
  assert.equal(listed.exit_code, 0);
  assert.equal(listed.aggregated_output, "seen.txt\n");
  const declinedPatch = itemOf(added, "file_change");
  assert.deepEqual(declinedPatch.changes, [{ path: "patched.txt", kind: "add" }]);
  assert.match(declinedPatch.error ?? "", /file edits need approval/);

  const outputs = sessionItems(dataDir, events[0]!.thread_id!).filter((item) =>
    String(item.type).endsWith("_output"),
  );
  assert.deepEqual(
    outputs.map((o) => String(o.output).split(":")[0]),
    ["Command not run", "Exit code", "Patch not applied"],
  );
});

/** A git repository in `dir` whose config runs `touch MARKER` at the next `git status`. */
function trappedRepo(dir: string, marker: string): void {
  const git = (...args: string[]) => execFileSync("git", args, { cwd: dir, stdio: "ignore" });
  git("init", "-q");
  git("config", "core.fsmonitor", `touch ${marker}; false`);
}

test("exec refuses patches that write .git (a hook, the config, through a symlink, a new gitfile); nothing is written", async () => {
  const workspace = freshDir("ws-");
  mkdirSync(join(workspace, ".git", "hooks"), { recursive: true });
  writeFileSync(join(workspace, ".git", "config"), "[core]\n");
  writeFileSync(join(workspace, "app.txt"), "one\n");
  symlinkSync(join(workspace, ".git", "config"), join(workspace, "notes.txt"));
  const scriptPath = script([
    [patch("*** Add File: .git/hooks/pre-commit\n+#!/bin/sh\n+touch /tmp/pwned")],
    [patch("*** Update File: .git/config\n@@\n [core]\n+\tfsmonitor = touch /tmp/pwned")],
    [patch("*** Update File: notes.txt\n@@\n [core]\n+\thooksPath = /tmp")],
    [patch("*** Add File: lib/.git\n+gitdir: ../evil")],
    [patch("*** Update File: app.txt\n@@\n-one\n+two")],
    [say("Done.")],
  ]);
  for (const approval of ["never", "on-request"]) {
    const { code, stderr, events } = await execScript(workspace, scriptPath, [
      "--approval",
      approval,
      "hook it",
    ]);
    assert.equal(code, 0, stderr);
    const changes = completedItems(events).filter((item) => item.type === "file_change");
    assert.deepEqual(
      changes.map((item) => itemOf(item, "file_change").status),
      ["declined", "declined", "declined", "declined", "completed"],
      approval,
    );
    for (const item of changes.slice(0, 4)) {
      const error = itemOf(item, "file_change").error ?? "";
      assert.match(error, /a protected path/);
      assert.match(error, /non-interactive mode/);
    }
    assert.deepEqual(readdirSync(join(workspace, ".git", "hooks")), []);
    assert.equal(readFileSync(join(workspace, ".git", "config"), "utf8"), "[core]\n");
    assert.equal(existsSync(join(workspace, "lib")), false);
    writeFileSync(join(workspace, "app.txt"), "one\n");
  }
});

test("under the sandbox a command cannot write .git: config and hooks are read-only", async (t) => {
  const sandbox = await detectSandbox();
  if (sandbox.kind === "none") {
    t.skip(`no usable bubblewrap sandbox here: ${sandbox.reason}`);
    return;
  }
  const workspace = freshDir("ws-");
  const marker = join(freshDir("marker-"), "pwned");
  trappedRepo(workspace, marker);
  execFileSync("git", ["config", "--unset", "core.fsmonitor"], { cwd: workspace });
  const config = readFileSync(join(workspace, ".git", "config"), "utf8");
  const scriptPath = script([
    [call("shell", { command: `git config core.fsmonitor 'touch ${marker}'` })],
    [call("shell", { command: `echo '[core] fsmonitor = touch ${marker}' >> .git/config` })],
    [call("shell", { command: `printf '#!/bin/sh\\ntouch ${marker}\\n' > .git/hooks/pre-commit` })],
    [call("shell", { command: "echo ok > inside.txt" })],
    [say("Done.")],
  ]);
  const { code, stderr, events } = await execScript(workspace, scriptPath, ["plant a hook"]);
  assert.equal(code, 0, stderr);
  const [viaGit, append, hook, inside] = commandItems(events);
  for (const item of [viaGit!, append!, hook!]) {
    assert.equal(item.status, "failed", item.command);
    assert.match(item.aggregated_output, /Read-only file system/, item.command);
  }
  assert.equal(inside!.status, "completed");
  assert.equal(readFileSync(join(workspace, ".git", "config"), "utf8"), config);
  assert.equal(existsSync(join(workspace, ".git", "hooks", "pre-commit")), false);
  execFileSync("git", ["status"], { cwd: workspace, stdio: "ignore" });
  assert.equal(existsSync(marker), false, "the next git command ran nothing planted");
});

test("--approval untrusted: git status (core.fsmonitor), sort --outp, sort --compress-prog and uniq - F are not read-only", async () => {
  const workspace = freshDir("ws-");
  const marker = join(freshDir("marker-"), "pwned");
  trappedRepo(workspace, marker);
  // The trap is real: git status runs the repository's fsmonitor command.
  execFileSync("git", ["status"], { cwd: workspace, stdio: "ignore" });
  assert.equal(existsSync(marker), true);
  rmSync(marker);
  writeFileSync(join(workspace, "seen.txt"), "b\na\n");
  writeFileSync(join(workspace, "prog.sh"), `#!/bin/sh\ntouch ${marker}\ncat\n`, { mode: 0o755 });
  const commands = [
    "git status",
    "sort --outp=out.txt seen.txt",
    "sort -S 1 --compress-prog=./prog.sh seen.txt",
    "uniq - out2.txt",
    "cat seen.txt",
  ];
  const scriptPath = script([...commands.map((command) => [call("shell", { command })]), [say("Done.")]]);
  const { code, stderr, events } = await execScript(workspace, scriptPath, [
    "--approval",
    "untrusted",
    "look",
  ]);
  assert.equal(code, 0, stderr);
  assert.deepEqual(
    commandItems(events).map((item) => item.status),
    ["declined", "declined", "declined", "declined", "completed"],
  );
  assert.equal(existsSync(marker), false);
  assert.equal(existsSync(join(workspace, "out.txt")), false);
  assert.equal(existsSync(join(workspace, "out2.txt")), false);
});

test("commands see no secrets: the environment is filtered, ~/.ssh is hidden, host sockets are unreachable", async (t) => {
  const sandbox = await detectSandbox();
  // The sandbox gives commands a private /tmp, so the fake home must be outside /tmp to count.
  let home: string;
  try {
    home = mkdtempSync(join(homedir(), ".spark-exec-home-"));
  } catch (error) {
    t.skip(`cannot create a folder outside /tmp in ${homedir()}: ${(error as Error).message}`);
    return;
  }
  const servers: Server[] = [];
  try {
    mkdirSync(join(home, ".ssh"));
    writeFileSync(join(home, ".ssh", "id_rsa"), "PRIVATE KEY\n");
    const agentSocket = join(home, "agent.sock");
    const server = createServer((connection) => connection.end("agent\n"));
    servers.push(server);
    await new Promise<void>((resolve) => server.listen(agentSocket, resolve));
    const workspace = freshDir("ws-");
    const connect = `${process.execPath} -e 'require("net").connect("${agentSocket}").on("data", (d) => process.stdout.write(d)).on("error", (e) => { console.log(e.code); process.exitCode = 1; })'`;
    const scriptPath = script([
      [call("shell", { command: "env" })],
      [call("shell", { command: 'cat "$HOME/.ssh/id_rsa"' })],
      [call("shell", { command: connect })],
      [say("Done.")],
    ]);
    const env = {
      HOME: home,
      OPENAI_API_KEY: "sk-openai-test",
      AWS_SECRET_ACCESS_KEY: "aws-secret-test",
      GITHUB_TOKEN: "ghp-test",
      DATABASE_URL: "postgres://app:hunter2@db/app",
      SSH_AUTH_SOCK: agentSocket,
      MY_SETTING: "visible",
    };
    const outputs = async (...flags: string[]) => {
      const { code, stderr, events } = await execScript(
        workspace,
        scriptPath,
        [...flags, "peek"],
        undefined,
        env,
      );
      assert.equal(code, 0, stderr);
      return commandItems(events).map((item) => item.aggregated_output);
    };

    const [printed, key, agent] = await outputs();
    assert.match(printed!, /^MY_SETTING=visible$/m);
    assert.match(printed!, new RegExp(`^HOME=${home}$`, "m"));
    for (const name of [
      "OPENAI_API_KEY",
      "AWS_SECRET_ACCESS_KEY",
      "GITHUB_TOKEN",
      "DATABASE_URL",
      "SSH_AUTH_SOCK",
    ]) {
      assert.doesNotMatch(printed!, new RegExp(`^${name}=`, "m"), name);
    }
    if (sandbox.kind === "none") {
      t.diagnostic(`no sandbox here (${sandbox.reason}): only the environment is checked`);
      return;
    }
    assert.match(key!, /No such file or directory/);
    assert.doesNotMatch(key!, /PRIVATE KEY/);
    assert.match(agent!, /ECONNREFUSED|ENOENT/);

    // The user can let chosen variables and the secrets through.
    const [allowedEnv, allowedKey] = await outputs(
      "--allow-env",
      "OPENAI_API_KEY",
      "--sandbox-allow-secrets",
    );
    assert.match(allowedEnv!, /^OPENAI_API_KEY=sk-openai-test$/m);
    assert.doesNotMatch(allowedEnv!, /^GITHUB_TOKEN=/m);
    assert.equal(allowedKey, "PRIVATE KEY\n");
    // The same from the config file's client settings.
    const config = file("allow-env.json", JSON.stringify({ client: { allowEnv: ["GITHUB_TOKEN"] } }));
    const [configuredEnv] = await outputs("--config", config);
    assert.match(configuredEnv!, /^GITHUB_TOKEN=ghp-test$/m);
    assert.doesNotMatch(configuredEnv!, /^OPENAI_API_KEY=/m);
  } finally {
    await Promise.all(servers.map((server) => new Promise((resolve) => server.close(resolve))));
    rmSync(home, { recursive: true, force: true });
  }
});

test("bad settings exit 2 with a clear message: no server at --server, a missing or broken --script", async () => {
  const workspace = freshDir("ws-");
  const port = await closedPort();
  const noServer = await runToExit([
    "exec",
    "--json",
    "-C",
    workspace,
    "--server",
    `http://127.0.0.1:${port}`,
    "hi",
  ]);
  assert.equal(noServer.code, 2, noServer.stderr);
  assert.match(noServer.stderr, new RegExp(`cannot connect to ws://127\\.0\\.0\\.1:${port}/v1/responses`));
  assert.match(noServer.stderr, /connection refused/);
  assert.equal(noServer.stdout, "", "no events before the connection exists");

  const missing = join(workspace, "no-such-script.jsonl");
  const noScript = await runToExit([
    "exec",
    "--json",
    "-C",
    workspace,
    "--engine",
    "script",
    "--script",
    missing,
    "hi",
  ]);
  assert.equal(noScript.code, 2, noScript.stderr);
  assert.match(
    noScript.stderr,
    new RegExp(`cannot read script ${missing.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`),
  );
  assert.match(noScript.stderr, /ENOENT/);
  assert.equal(noScript.stdout, "");

  const broken = file(
    `broken-${randomUUID()}.jsonl`,
    '{"output":[{"type":"message","text":"ok"}]}\n{not json}\n',
  );
  const badScript = await runToExit([
    "exec",
    "--json",
    "-C",
    workspace,
    "--engine",
    "script",
    "--script",
    broken,
    "hi",
  ]);
  assert.equal(badScript.code, 2, badScript.stderr);
  assert.ok(badScript.stderr.includes(`${broken}:2: not valid JSON`), badScript.stderr);

  const noWorkspace = join(workspace, "missing-dir");
  const badCd = await runToExit([
    "exec",
    "--json",
    "-C",
    noWorkspace,
    "--engine",
    "script",
    "--script",
    broken,
    "hi",
  ]);
  assert.equal(badCd.code, 2, badCd.stderr);
  assert.ok(badCd.stderr.includes(`cannot use ${noWorkspace} as the workspace`), badCd.stderr);
});

test("without --json the answer streams to stdout and tool activity goes to stderr", async () => {
  const workspace = freshDir("ws-");
  const scriptPath = script([
    [call("shell", { command: "echo from-the-command" })],
    [say("The command printed its line.")],
  ]);
  const run = await runToExit(
    ["exec", "-C", workspace, "--engine", "script", "--script", scriptPath, "show me"],
    { SPARK_DATA_DIR: freshDir("data-") },
  );
  assert.equal(run.code, 0, run.stderr);
  assert.equal(run.stdout, "The command printed its line.\n");
  assert.match(run.stderr, /\$ echo from-the-command {2}\(completed, exit 0\)\nfrom-the-command/);
  assert.match(run.stderr, /done: \d+ input tokens \(0 cached\), \d+ output tokens/);
});

test("an answer cut off by the output token limit ends with cut off, not done", async () => {
  const workspace = freshDir("ws-");
  const scriptPath = script([
    [say("one two three four five six seven eight nine ten eleven twelve thirteen")],
  ]);
  const config = join(freshDir("config-"), "spark.json");
  writeFileSync(
    config,
    JSON.stringify({
      models: { spark: { engine: "script", script: scriptPath, defaults: { maxOutputTokens: 4 } } },
    }),
  );
  const run = await runToExit(["exec", "-C", workspace, "--config", config, "tell me"], {
    SPARK_DATA_DIR: freshDir("data-"),
  });
  assert.equal(run.code, 3, run.stderr);
  assert.match(run.stderr, /cut off \(the output token limit\): \d+ input tokens/);
  assert.doesNotMatch(run.stderr, /\bdone:/);
});

test("the server closes the connection between requests (its lifetime limit): exec reconnects and sends the transcript", async () => {
  // Connections live 3 s (exec connects while it loads: the first answer must end within them
  // on a loaded machine); the command sleeps 4 s, so the answer's request needs a new one.
  const scriptPath = script([
    [call("shell", { command: "sleep 4; echo slept" })],
    [say("answered on a new connection")],
  ]);
  const server = await serveScript(scriptPath, "--store", "memory", "--websocket-max-minutes", "0.05");
  try {
    const workspace = freshDir("ws-");
    const run = await runToExit(["exec", "--json", "-C", workspace, "--server", server.url, "go"], {
      SPARK_DATA_DIR: freshDir("data-"),
    });
    assert.equal(run.code, 0, run.stderr);
    const events = jsonLines<ExecEvent>(run.stdout);
    // The script engine picks line 2 only if the new connection's request carried the first turn.
    assert.equal(itemOf(completedItems(events).at(-1), "agent_message").text, "answered on a new connection");
    assert.equal(events.at(-1)!.type, "turn.completed");
  } finally {
    await stop(server);
  }
});

test("a turn that fails (the server dies mid-answer) prints turn.failed and exits 1", async () => {
  const scriptPath = script([[say("word ".repeat(5_000))]]);
  const server = await serveScript(scriptPath, "--rate", "50");
  const workspace = freshDir("ws-");
  const exec = spawnCli(["exec", "--json", "-C", workspace, "--server", server.url, "talk"]);
  await waitForStdout(exec, /"item\.started".*"agent_message"/);
  await stop(server, "SIGKILL");
  assert.equal(await exec.exited, 1, exec.stderr());
  const events = jsonLines<ExecEvent>(exec.stdout());
  assert.deepEqual(events.map(shape), [
    "thread.started",
    "turn.started",
    "item.started agent_message",
    "turn.failed",
  ]);
  const failure = events.at(-1)!.error!;
  assert.equal(failure.code, "connection_closed");
  assert.match(failure.message, /connection to the server closed/);
});

test("exec --resume continues a saved session: the model sees the earlier conversation", async () => {
  const workspace = freshDir("ws-");
  const dataDir = freshDir("data-");
  const scriptPath = script([
    [say("first answer")],
    [say("second answer: one earlier model turn")],
    [say("third answer: two earlier model turns")],
  ]);
  const first = await execScript(workspace, scriptPath, ["first task"], dataDir);
  assert.equal(first.code, 0, first.stderr);
  const id = first.events[0]!.thread_id!;
  assert.equal(itemOf(completedItems(first.events)[0], "agent_message").text, "first answer");

  // `--resume ID TASK`, with a unique prefix of the id.
  const second = await execScript(
    workspace,
    scriptPath,
    ["--resume", id.slice(0, -2), "second task"],
    dataDir,
  );
  assert.equal(second.code, 0, second.stderr);
  assert.equal(second.events[0]!.thread_id, id);
  assert.deepEqual(second.events.map(shape), [
    "thread.started",
    "turn.started",
    "item.started agent_message",
    "item.completed agent_message",
    "turn.completed",
  ]);
  assert.equal(
    itemOf(completedItems(second.events)[0], "agent_message").text,
    "second answer: one earlier model turn",
  );

  // "last": the newest session.
  const third = await execScript(workspace, scriptPath, ["--resume", "last", "third task"], dataDir);
  assert.equal(third.code, 0, third.stderr);
  assert.equal(third.events[0]!.thread_id, id);
  assert.equal(
    itemOf(completedItems(third.events)[0], "agent_message").text,
    "third answer: two earlier model turns",
  );

  assert.deepEqual(readdirSync(join(dataDir, "sessions")), [`${id}.jsonl`]);
  assert.deepEqual(userTexts(sessionItems(dataDir, id)), ["first task", "second task", "third task"]);

  const unknown = await execScript(workspace, scriptPath, ["--resume", "nope", "more"], dataDir);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /no saved session "nope"/);
});

test("exec usage errors exit 2: --resume without a session, no task", async () => {
  const workspace = freshDir("ws-");
  const scriptPath = script([[say("never")]]);
  const noSession = await execScript(workspace, scriptPath, ["--resume"], freshDir("data-"));
  assert.equal(noSession.code, 2);
  assert.match(noSession.stderr, /--resume <session>' argument missing/);
  const noTask = await execScript(workspace, scriptPath, [], freshDir("data-"));
  assert.equal(noTask.code, 2);
  assert.match(noTask.stderr, /missing required argument 'task'/);
});

test("exec --server uses a separate `spark serve` with API keys: the right key works, a wrong one exits 2", async () => {
  const keyFile = join(freshDir("keys-"), "keys.json");
  const created = await runToExit(["keys", "create", "--name", "exec", "--key-file", keyFile]);
  assert.equal(created.code, 0, created.stderr);
  const key = created.stdout.trim();
  assert.match(key, /^\S{20,}$/);

  const scriptPath = script([
    [patch("*** Add File: remote.txt\n+made through the remote server")],
    [say("Done remotely.")],
  ]);
  const server = await serveScript(scriptPath, "--key-file", keyFile);
  try {
    const workspace = freshDir("ws-");
    const ok = await runToExit(["exec", "--json", "-C", workspace, "--server", server.url, "remote task"], {
      SPARK_API_KEY: key,
    });
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(readFileSync(join(workspace, "remote.txt"), "utf8"), "made through the remote server\n");
    const events = jsonLines<ExecEvent>(ok.stdout);
    assert.deepEqual(events.map(shape), [
      "thread.started",
      "turn.started",
      "item.started file_change in_progress",
      "item.completed file_change completed",
      "item.started agent_message",
      "item.completed agent_message",
      "turn.completed",
    ]);
    assert.equal(itemOf(completedItems(events)[1], "agent_message").text, "Done remotely.");

    // The key can also come from another variable with --api-key-env.
    const otherEnv = freshDir("ws-");
    const viaFlag = await runToExit(
      [
        "exec",
        "--json",
        "-C",
        otherEnv,
        "--server",
        server.url,
        "--api-key-env",
        "MY_SPARK_KEY",
        "remote task",
      ],
      { MY_SPARK_KEY: key },
    );
    assert.equal(viaFlag.code, 0, viaFlag.stderr);
    assert.ok(existsSync(join(otherEnv, "remote.txt")));

    const untouched = freshDir("ws-");
    const wrong = await runToExit(
      ["exec", "--json", "-C", untouched, "--server", server.url, "remote task"],
      {
        SPARK_API_KEY: "sk-spark-wrong",
      },
    );
    assert.equal(wrong.code, 2, wrong.stderr);
    assert.match(wrong.stderr, /answered 401/);
    assert.match(wrong.stderr, /Incorrect API key/);
    assert.match(wrong.stderr, /SPARK_API_KEY/);
    assert.ok(!wrong.stderr.includes("sk-spark-wrong"), "the wrong key is not echoed");
    assert.equal(wrong.stdout, "");

    const none = await runToExit(["exec", "--json", "-C", untouched, "--server", server.url, "remote task"]);
    assert.equal(none.code, 2, none.stderr);
    assert.match(none.stderr, /answered 401/);
    assert.match(none.stderr, /API key/);
    assert.deepEqual(readdirSync(untouched), []);

    // The script engine reports no context size, so /v1/models has no context_window.
    const models = await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(models.status, 200);
    const body = (await models.json()) as { data: Record<string, unknown>[] };
    assert.ok(body.data.some((m) => m.id === "spark"));
    for (const model of body.data) assert.ok(!("context_window" in model), JSON.stringify(model));
  } finally {
    assert.equal(await stop(server), 0, server.stderr());
  }
});

test("WebSocket response.cancel stops a response mid-stream; an unknown id is an error, the socket lives on", async () => {
  const long = Array.from({ length: 2_000 }, (_, i) => `w${i}`).join(" ");
  const server = await startScriptServer(
    [{ output: [{ type: "message", text: long }] }, { output: [{ type: "message", text: "still here" }] }],
    20,
  );
  const client = await WsClient.connect(server.url);
  try {
    client.send({ type: "response.create", model: "spark", input: "talk" });
    const created = await client.waitForType("response.created");
    const id = (created.response as { id: string }).id;
    const isDelta = (e: ServerEvent): boolean => e.type === "response.output_text.delta";
    await client.waitFor(() => client.events.filter(isDelta).length >= 3);
    const sentAt = client.events.length;
    client.send({ type: "response.cancel", response_id: id });
    const terminal = await client.waitFor((e) => TERMINAL_TYPES.has(e.type));
    assert.equal(terminal.type, "response.incomplete");
    const response = terminal.response as {
      id: string;
      status: string;
      incomplete_details: { reason: string };
    };
    assert.equal(response.id, id);
    assert.equal(response.status, "incomplete");
    assert.equal(response.incomplete_details.reason, "cancelled");
    const events = client.responseEvents(id);
    const text = textOf(events);
    assert.ok(long.startsWith(text), "what streamed is a prefix of the script's text");
    assert.ok(text.length < long.length / 10, `cancelled early, not near the end (${text.length} chars)`);
    const afterCancel = client.events.slice(sentAt).filter(isDelta).length;
    assert.ok(afterCancel <= 3, `${afterCancel} deltas arrived after the cancel`);
    assert.equal(client.events.filter((e) => e.type === "error").length, 0);

    // Unknown id, then the same id once it has ended: both response_not_found, param response_id.
    for (const responseId of ["resp_does_not_exist", id]) {
      const from = client.events.length;
      client.send({ type: "response.cancel", response_id: responseId });
      const error = await client.waitForType("error", from);
      const body = error.error as { code: string; param: string; message: string };
      assert.equal(body.code, "response_not_found");
      assert.equal(body.param, "response_id");
      assert.ok(body.message.includes(responseId), body.message);
    }
    const from = client.events.length;
    client.send({ type: "response.cancel" });
    const missing = (await client.waitForType("error", from)).error as { code: string; param: string };
    assert.equal(missing.code, "invalid_input");
    assert.equal(missing.param, "response_id");

    // The socket still works: a conversation with one earlier model turn plays script line 2.
    const next = await client.turn({
      model: "spark",
      input: [
        { role: "user", content: "talk" },
        { role: "assistant", content: "w0 w1" },
        { role: "user", content: "again" },
      ],
    });
    assert.equal(terminalOf(next).type, "response.completed");
    assert.equal(textOf(next), "still here");
  } finally {
    await client.close();
    await server.close();
  }
});
