/**
 * The read-only file tools, `read_file`, `list_files` and `search`: the text each gives the model
 * (their definitions are in definitions.ts). The reading itself is files/file-tools.ts's, through
 * the confined layer.
 */
import { listFiles, readFile, searchFiles } from "../files/file-tools.js";
import type { Workspace } from "../files/workspace.js";
import { optionalNumber, optionalString, stringArg } from "./call-helpers.js";

/** `read_file`: the lines asked for, and how to read more when they are cut. */
export async function readFileTool(workspace: Workspace, args: Record<string, unknown>): Promise<string> {
  const read = await readFile(workspace, {
    path: stringArg(args, "path"),
    ...optionalNumber(args, "offset"),
    ...optionalNumber(args, "limit"),
  });
  return read.truncated
    ? `${read.text}\n[file has ${read.totalLines} lines; read more with offset]`
    : read.text;
}

/** `list_files`: one path a line. */
export async function listFilesTool(workspace: Workspace, args: Record<string, unknown>): Promise<string> {
  const list = await listFiles(workspace, optionalString(args, "path"));
  if (list.files.length === 0) return "(no files)";
  return list.files.join("\n") + (list.truncated ? "\n[more files not shown]" : "");
}

/** `search`: `path:line: text` a match. */
export async function searchTool(
  workspace: Workspace,
  args: Record<string, unknown>,
  signal: AbortSignal,
): Promise<string> {
  const found = await searchFiles(
    workspace,
    {
      pattern: stringArg(args, "pattern"),
      ...optionalString(args, "path"),
      ...optionalString(args, "glob"),
      ...(args.ignore_case === true ? { ignoreCase: true } : {}),
    },
    { signal },
  );
  if (found.matches.length === 0) return "no matches";
  return (
    found.matches.map((m) => `${m.path}:${m.line}: ${m.text}`).join("\n") +
    (found.truncated ? "\n[more matches not shown]" : "")
  );
}
