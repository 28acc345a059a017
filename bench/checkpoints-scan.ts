/**
 * What checkpoints cost (src/agent/checkpoints): a workspace of DIRS×100 files (default 10,000), in
 * git and outside it: the first scan (every file stored; it runs in the background while the first
 * turn's model answers), the scans around a later command (stat only), a turn's end (the private
 * ref or the manifest) and an undo of one file.
 *
 *   node --import tsx bench/checkpoints-scan.ts        (DIRS=10 for 1,000 files)
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Checkpoints } from "../src/agent/checkpoints/checkpoints.js";
import { Workspace } from "../src/agent/files/workspace.js";

async function run(withGit: boolean): Promise<void> {
  const root = mkdtempSync(path.join(tmpdir(), "w5bench-"));
  const home = mkdtempSync(path.join(tmpdir(), "w5bench-home-"));
  for (let d = 0; d < Number(process.env.DIRS ?? 100); d++) {
    mkdirSync(path.join(root, `d${d}`));
    for (let f = 0; f < 100; f++)
      writeFileSync(path.join(root, `d${d}`, `f${f}.ts`), `// ${d} ${f}\n`.repeat(60));
  }
  if (withGit) {
    execFileSync("git", ["init", "-q"], { cwd: root });
    execFileSync("git", ["add", "-A"], { cwd: root });
    execFileSync("git", ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"], { cwd: root });
  }
  await new Promise((r) => setTimeout(r, 3500)); // past the racy window
  const ws = await Workspace.open(root);
  const cp = await Checkpoints.open(ws, "bench", home);
  cp.beginTurn();
  let t = performance.now();
  await cp.beforeCommand();
  const first = performance.now() - t;
  writeFileSync(path.join(root, "d1", "f1.ts"), "changed\n");
  t = performance.now();
  await cp.afterCommand();
  const after = performance.now() - t;
  const times: number[] = [];
  for (let i = 0; i < 5; i++) {
    t = performance.now();
    await cp.beforeCommand();
    await cp.afterCommand();
    times.push(performance.now() - t);
  }
  t = performance.now();
  await cp.endTurn();
  const end = performance.now() - t;
  t = performance.now();
  const r = await cp.undo();
  const undo = performance.now() - t;
  console.log(
    `${withGit ? "git" : "folder"}: ${Number(process.env.DIRS ?? 100) * 100} files · first scan ${first.toFixed(0)} ms · scan after a command ${after.toFixed(0)} ms · before+after a later command median ${times.sort((a, b) => a - b)[2]!.toFixed(0)} ms · endTurn ${end.toFixed(0)} ms · undo ${undo.toFixed(0)} ms (${r.files.length} file)`,
  );
  rmSync(root, { recursive: true, force: true });
  rmSync(home, { recursive: true, force: true });
}
await run(true);
await run(false);
