/**
 * The search worker thread: runs one `searchFilesInThread` per message and replies with its result
 * or its error. file-tools.ts `searchFiles` starts it and terminates it when a search runs past its
 * time budget or is cancelled.
 */
import { parentPort } from "node:worker_threads";
import { searchFilesInThread, type SearchReply, type SearchRequest } from "./file-tools.js";
import { ToolError, Workspace } from "./workspace.js";

const port = parentPort;
if (port === null) throw new Error("search-worker.ts runs only as a worker thread");

port.on("message", (request: SearchRequest) => {
  void (async (): Promise<SearchReply> => {
    try {
      const workspace = await Workspace.open(request.root, { secrets: request.secrets });
      return { ok: true, result: await searchFilesInThread(workspace, request.args) };
    } catch (error) {
      return {
        ok: false,
        code: error instanceof ToolError ? error.code : undefined,
        message: error instanceof Error ? error.message : String(error),
      };
    }
  })().then((reply) => port.postMessage(reply));
});
