import { randomBytes } from "node:crypto";

/** OpenAI-style ids: a type prefix and 48 hex characters (`resp_…`, `msg_…`, `fc_…`, `call_…`). */
export function newId(prefix: string): string {
  return `${prefix}_${randomBytes(24).toString("hex")}`;
}
