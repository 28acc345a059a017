#!/usr/bin/env bash
# Generates the weight-bound model (see make-weight-bound-model.py) into
# ~/.cache/spark-peer/models/weight-bound-q8_0.gguf (SPARK_PEER_DIR overrides ~/.cache/spark-peer),
# with the gguf-py of the llama.cpp commit node-llama-cpp ships. Needs python3 with numpy.
set -euo pipefail

here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="$here/node_modules/node-llama-cpp/llama/gitRelease.bundle"
root="${SPARK_PEER_DIR:-$HOME/.cache/spark-peer}"
tiny="${SPARK_TEST_MODEL:-$here/../shared/models/tiny-random-llama.gguf}"
out="$root/models/weight-bound-q8_0.gguf"
[ -f "$out" ] && { echo "model already generated: $out"; exit 0; }
[ -f "$tiny" ] || { echo "no tiny model at $tiny (set SPARK_TEST_MODEL)" >&2; exit 1; }
commit="$(git bundle list-heads "$bundle" | awk '/HEAD/ {print $1; exit}')"
src="$root/$commit/src"
if [ ! -d "$src/gguf-py" ]; then
  rm -rf "$src"
  git clone -q "$bundle" "$src"
  git -C "$src" -c advice.detachedHead=false checkout -q "$commit"
fi
mkdir -p "$root/models"
PYTHONPATH="$src/gguf-py" python3 "$here/bench/peer/make-weight-bound-model.py" "$tiny" "$out.tmp"
mv "$out.tmp" "$out"
echo "model generated: $out ($(du -h "$out" | cut -f1))"
