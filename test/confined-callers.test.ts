/**
 * Every caller of the confined file layer against every kind of hostile entry (bench/confined-cases.ts,
 * figure 30): links out, into `.git`, at secrets, dangling, chained, looping, FIFOs, a device, on
 * real files, real git and a real preview server. None may write outside the workspace or into a
 * protected name, show a secret, or block.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import { CALLERS, HOSTILE, confinedCasesFigure } from "../bench/confined-cases.js";

test("no caller of the confined layer escapes, whatever entry it meets", { timeout: 900_000 }, async () => {
  const tallies = await confinedCasesFigure();
  assert.equal(tallies.length, CALLERS.length);
  for (const tally of tallies) {
    assert.equal(tally.tried, HOSTILE.length, `${tally.caller} tried every kind`);
    assert.deepEqual(tally.escapes, [], `${tally.caller} escaped`);
  }
});
