/**
 * `spark app` listens on as few TCP ports as it can (issue 34 item 17): its own model server (the
 * in-process `spark serve` its agents talk to) is on a Unix socket in a private folder, not on a
 * loopback port, so a remote editor's port forwarding (code-server, Codespaces) sees only the app
 * and its previews; `spark exec` (and the TUI, on the same start path) listens on none. The tasks still work over the socket (the WebSocket turn, the model list the
 * page's tier picker shows), and the socket's folder is gone after the app stops.
 *
 * Real parts: `spark app` on the script engine, the kernel's socket tables (/proc/net).
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, readdirSync, readlinkSync, statSync } from "node:fs";
import { dirname } from "node:path";
import { after, describe, test } from "node:test";
import type { ServerMessage } from "../src/app/protocol.js";
import { AppClient } from "./helpers/app-client.js";
import { file, firstLine, freshDir, spawnCli, stop, waitForStdout, type Cli } from "./helpers/cli.js";

const APP_LINE = /^spark app on (http:\/\/127\.0\.0\.1:(\d+)\/) \(workspace (.+)\)$/;
const running: Cli[] = [];
after(async () => {
  await Promise.all(running.map((cli) => stop(cli).catch(() => {})));
});

/** The inodes of the sockets process `pid` holds open. */
function socketInodes(pid: number): Set<string> {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const match = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (match) inodes.add(match[1]!);
    } catch {
      // closed meanwhile
    }
  }
  return inodes;
}

/** The TCP ports process `pid` listens on (IPv4 and IPv6). */
function listeningTcpPorts(pid: number): number[] {
  const mine = socketInodes(pid);
  const ports: number[] = [];
  for (const table of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    if (!existsSync(table)) continue;
    for (const line of readFileSync(table, "utf8").trim().split("\n").slice(1)) {
      const fields = line.trim().split(/\s+/);
      // local_address is HEX_IP:HEX_PORT; state 0A is LISTEN; the inode is the 10th field.
      if (fields[3] === "0A" && mine.has(fields[9]!)) ports.push(parseInt(fields[1]!.split(":")[1]!, 16));
    }
  }
  return ports.sort((a, b) => a - b);
}

/** The paths of the Unix sockets process `pid` listens on. */
function listeningUnixSockets(pid: number): string[] {
  const mine = socketInodes(pid);
  const paths: string[] = [];
  for (const line of readFileSync("/proc/net/unix", "utf8").trim().split("\n").slice(1)) {
    // Num RefCount Protocol Flags Type St Inode Path; flag 0x10000 (__SO_ACCEPTCON): listening.
    const fields = line.trim().split(/\s+/);
    if (fields[7] !== undefined && mine.has(fields[6]!) && (parseInt(fields[3]!, 16) & 0x10000) !== 0)
      paths.push(fields[7]);
  }
  return paths;
}

describe("spark app's ports", { timeout: 300_000 }, () => {
  test("its model server is on a private Unix socket, not a TCP port; tasks are answered over it", async () => {
    const script = file(
      "ports.jsonl",
      JSON.stringify({ output: [{ type: "message", text: "ANSWERED OVER THE SOCKET" }] }) + "\n",
    );
    const cli = spawnCli(
      [
        "app",
        freshDir("ws-"),
        "--port",
        "0",
        "--quiet",
        "--sandbox",
        "off",
        "--approval",
        "never",
        "--engine",
        "script",
        "--script",
        script,
      ],
      { SPARK_DATA_DIR: freshDir("data-") },
      400_000,
    );
    running.push(cli);
    const line = await firstLine(cli);
    const match = APP_LINE.exec(line);
    assert.ok(match, `unexpected first line: ${line}\n${cli.stderr()}`);
    const appPort = Number(match[2]);
    const pid = cli.child.pid!;

    // The model server: one listening Unix socket, in a folder only this user can enter.
    const sockets = listeningUnixSockets(pid).filter((path) => path.endsWith("/server.sock"));
    assert.equal(sockets.length, 1, `listening Unix sockets: ${listeningUnixSockets(pid).join(", ")}`);
    const socket = sockets[0]!;
    assert.equal(statSync(dirname(socket)).mode & 0o777, 0o700);

    // A turn goes over it, and so does the model list the page's tier picker shows.
    const client = await AppClient.connect(match[1]!);
    try {
      const hello = client.messages.find((m) => m.type === "hello") as Extract<
        ServerMessage,
        { type: "hello" }
      >;
      assert.ok(hello.models.includes("spark") && hello.models.includes("deep"), hello.models.join(","));
      const from = client.send({ type: "task.create", model: "spark", text: "hello" });
      await client.next(
        (m) =>
          m.type === "entry" && m.entry.kind === "assistant" && m.entry.text === "ANSWERED OVER THE SOCKET",
        from,
      );
    } finally {
      client.close();
    }

    // TCP: the app's own port, and at most the previews' server; no model server's port (there
    // were three: the app, its model server, the previews).
    const ports = listeningTcpPorts(pid);
    assert.ok(ports.includes(appPort), `the app's port ${appPort} among ${ports.join(", ")}`);
    assert.ok(ports.length <= 2, `TCP ports listened on: ${ports.join(", ")}`);

    // Stopped, the app takes its socket's folder away.
    await stop(cli);
    assert.equal(existsSync(dirname(socket)), false, `${dirname(socket)} is left`);
  });

  test("spark exec's in-process server is on a Unix socket too: exec listens on no TCP port", async () => {
    const long = Array.from({ length: 200 }, (_, i) => `word${i}`).join(" ");
    const script = file(
      "exec-ports.jsonl",
      JSON.stringify({ output: [{ type: "message", text: long }] }) + "\n",
    );
    const exec = spawnCli(
      [
        "exec",
        "--json",
        "-C",
        freshDir("ws-"),
        "--engine",
        "script",
        "--script",
        script,
        "--rate",
        "20",
        "talk",
      ],
      { SPARK_DATA_DIR: freshDir("data-") },
      400_000,
    );
    running.push(exec);
    // While the answer streams (200 words at 20 a second), the server is up.
    await waitForStdout(exec, /"item\.started".*"agent_message"/);
    const pid = exec.child.pid!;
    const sockets = listeningUnixSockets(pid).filter((path) => path.endsWith("/server.sock"));
    const ports = listeningTcpPorts(pid);
    assert.equal(sockets.length, 1, `listening Unix sockets: ${listeningUnixSockets(pid).join(", ")}`);
    assert.deepEqual(ports, [], `TCP ports listened on: ${ports.join(", ")}`);
    assert.equal(await exec.exited, 0, exec.stderr());
    assert.match(exec.stdout(), /word199/);
    assert.equal(existsSync(dirname(sockets[0]!)), false, `${dirname(sockets[0]!)} is left`);
  });
});
