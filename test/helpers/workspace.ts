/** A temporary workspace with a sibling directory outside it, for the file tools' tests. */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after } from "node:test";
import { Workspace } from "../../src/agent/files/workspace.js";

export interface WorkspaceFixture {
  ws: Workspace;
  /** The workspace root. */
  root: string;
  /** A sibling directory outside the workspace. */
  outside: string;
  /** The temp directory holding both. */
  top: string;
}

const temps: string[] = [];
after(async () => {
  await Promise.all(temps.map((dir) => rm(dir, { recursive: true, force: true })));
});

/** Writes `files` into a new workspace and `outsideFiles` beside it (paths relative to each). */
export async function workspaceFixture(
  prefix: string,
  files: Record<string, string | Buffer> = {},
  outsideFiles: Record<string, string> = {},
): Promise<WorkspaceFixture> {
  const top = await mkdtemp(path.join(tmpdir(), prefix));
  temps.push(top);
  const root = path.join(top, "ws");
  const outside = path.join(top, "outside");
  await mkdir(root);
  await mkdir(outside);
  const write = async (base: string, entries: Record<string, string | Buffer>): Promise<void> => {
    for (const [rel, content] of Object.entries(entries)) {
      await mkdir(path.dirname(path.join(base, rel)), { recursive: true });
      await writeFile(path.join(base, rel), content);
    }
  };
  await write(outside, outsideFiles);
  await write(root, files);
  return { ws: await Workspace.open(root), root, outside, top };
}
