/**
 * What the UI says when the server could not start or be reached: what to do now, in this UI's
 * own commands (/retry, /model FILE.gguf, /quit), and next time (the flags), for a remote server,
 * the in-process llama engine or another engine; and how many messages wait for the connection.
 * The UI stays up after a failed start; these lines follow the error itself.
 */
import type { ClientFlags } from "../client/agent-runtime.js";

/** `waiting`: how many messages wait for the connection (read once the settings are). */
export async function failureHelp(flags: ClientFlags, waiting: () => number): Promise<string[]> {
  let server: string | undefined;
  let llama: boolean;
  try {
    const { resolveClient } = await import("../client/agent-runtime.js");
    const client = await resolveClient(flags, true);
    server = client.server;
    llama = client.settings.engine === "llama";
  } catch {
    return ["Fix the setting above and start spark again; /quit leaves."];
  }
  const messages = waiting();
  return [
    server !== undefined
      ? `Not connected to ${server}: /retry tries again · /quit leaves.`
      : llama
        ? "Not connected: /model FILE.gguf loads a model file you have · /retry tries again · /quit leaves."
        : "Not connected: /retry tries again · /quit leaves.",
    server !== undefined
      ? "Start the server with `spark serve`, or pick another with `spark --server URL`."
      : llama
        ? "Next time: `spark --model FILE.gguf`, or `spark --server URL` to use a running `spark serve`."
        : "Fix the engine's settings (above), or use a running server: `spark --server URL`.",
    ...(messages > 0 ? [`${messages} message${messages === 1 ? "" : "s"} wait for the connection.`] : []),
  ];
}
