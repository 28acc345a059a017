import type { ClientFlags } from "../cli/agent-runtime.js";
export async function runTui(
  _flags: ClientFlags,
  _options: { prompt?: string; resume?: string | null },
): Promise<number> {
  return 1;
}
