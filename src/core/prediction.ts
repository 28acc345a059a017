/**
 * Predicted Outputs accounting. `accepted_prediction_tokens` are the predicted tokens that appear,
 * in order, in the generated text; the rest are rejected. Measured on word-like pieces (longest
 * common subsequence) and scaled to the engine's token count of the prediction.
 */
const PIECE = /\s*[\p{L}\p{N}_]+|\s*[^\s\p{L}\p{N}_]|\s+$/gu;

/** Above this many DP cells the measure falls back to common prefix plus suffix. */
const MAX_CELLS = 4_000_000;

export function predictionOverlap(prediction: string, output: string): number {
  const predicted = prediction.match(PIECE) ?? [];
  const produced = output.match(PIECE) ?? [];
  if (predicted.length === 0) return 0;
  return commonPieces(predicted, produced) / predicted.length;
}

function commonPieces(a: readonly string[], b: readonly string[]): number {
  if (a.length * b.length > MAX_CELLS) {
    let prefix = 0;
    while (prefix < a.length && prefix < b.length && a[prefix] === b[prefix]) prefix++;
    let suffix = 0;
    while (
      suffix < a.length - prefix &&
      suffix < b.length - prefix &&
      a[a.length - 1 - suffix] === b[b.length - 1 - suffix]
    ) {
      suffix++;
    }
    return prefix + suffix;
  }
  let previous = new Uint32Array(b.length + 1);
  let current = new Uint32Array(b.length + 1);
  for (const piece of a) {
    for (let j = 1; j <= b.length; j++) {
      current[j] = piece === b[j - 1] ? previous[j - 1]! + 1 : Math.max(previous[j]!, current[j - 1]!);
    }
    [previous, current] = [current, previous];
  }
  return previous[b.length]!;
}
