/**
 * `spark app` listens on as few TCP ports as it can (issue 34 item 17): its own model server (the
 * in-process `spark serve` its agents talk to) is on a Unix socket in a private folder, not on a
 * loopback port, so a remote editor's port forwarding (code-server, Codespaces) sees only the app
 * and its previews; `spark exec` (and the TUI, on the same start path) listens on none. A socket
 * folder left by a process killed outright is swept away by the next start; a live one stays. The tasks still work over the socket (the WebSocket turn, the model list the
 * page's tier picker shows), and the socket's folder is gone after the app stops.
 *
 * Real parts: `spark app` on the script engine, the kernel's socket tables (/proc/net).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import {
  existsSync,
  mkdirSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  statSync,
  utimesSync,
} from "node:fs";
import { createServer } from "node:net";
import { dirname, join } from "node:path";
import { after, describe, test } from "node:test";
import type { ServerMessage } from "../src/app/protocol.js";
import { AppClient } from "./helpers/app-client.js";
import { file, freshDir, spawnCli, stop, waitForStdout } from "./helpers/cli.js";
import { scriptAppArgs, startAppCli, stopApps, stopWithApps } from "./helpers/app.js";

after(stopApps);

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
    const cli = await startAppCli(
      scriptAppArgs(freshDir("ws-"), script, "--approval", "never"),
      { SPARK_DATA_DIR: freshDir("data-") },
      400_000,
    );
    const appPort = cli.port;
    const pid = cli.child.pid!;

    // The model server: one listening Unix socket, in a folder only this user can enter.
    const sockets = listeningUnixSockets(pid).filter((path) => path.endsWith("/server.sock"));
    assert.equal(sockets.length, 1, `listening Unix sockets: ${listeningUnixSockets(pid).join(", ")}`);
    const socket = sockets[0]!;
    assert.equal(statSync(dirname(socket)).mode & 0o777, 0o700);

    // A turn goes over it, and so does the model list the page's tier picker shows.
    const client = await AppClient.connect(cli.url);
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
    stopWithApps(exec);
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

  test("a socket folder left by a killed process is swept away at the next start; a live one stays", async () => {
    const tmp = freshDir("tmp-");
    const old = new Date(Date.now() - 10 * 60_000);
    // A socket nobody listens on any more: its process was killed (SIGKILL: no clean-up).
    const stale = join(tmp, "spark-server-STALE1");
    mkdirSync(stale, { mode: 0o700 });
    const holder = spawn(
      process.execPath,
      [
        "-e",
        `require("node:net").createServer().listen(${JSON.stringify(join(stale, "server.sock"))}, () => console.log("up"))`,
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    await once(holder.stdout!, "data");
    holder.kill("SIGKILL");
    await once(holder, "exit");
    assert.ok(existsSync(join(stale, "server.sock")));
    utimesSync(stale, old, old);
    // A live one, as old.
    const live = join(tmp, "spark-server-LIVE01");
    mkdirSync(live, { mode: 0o700 });
    const server = createServer().listen(join(live, "server.sock"));
    await once(server, "listening");
    utimesSync(live, old, old);
    try {
      const cli = await startAppCli(
        scriptAppArgs(
          freshDir("ws-"),
          file("sweep.jsonl", JSON.stringify({ output: [{ type: "message", text: "hi" }] }) + "\n"),
        ),
        { SPARK_DATA_DIR: freshDir("data-"), TMPDIR: tmp },
        400_000,
      );
      for (const deadline = Date.now() + 120_000; existsSync(stale);) {
        assert.ok(Date.now() < deadline, `${stale} is still there`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      assert.ok(existsSync(join(live, "server.sock")), "the live socket's folder stays");
      const own = readdirSync(tmp).filter((name) => /^spark-server-/.test(name) && !name.endsWith("LIVE01"));
      assert.equal(own.length, 1, own.join(", "));
      await stop(cli);
      assert.deepEqual(
        readdirSync(tmp).filter((name) => /^spark-server-/.test(name)),
        ["spark-server-LIVE01"],
      );
    } finally {
      server.close();
    }
  });
});
