#!/usr/bin/env bash
# Builds the peer for the engine-vs-llama-server figures: llama-server and llama-batched-bench from the
# exact llama.cpp commit node-llama-cpp ships (its llama/gitRelease.bundle), CPU only, with the ggml CPU
# options of node-llama-cpp's prebuilt linux-x64 binary (its CI build: GGML_NATIVE=OFF,
# GGML_BACKEND_DL=ON, GGML_CPU_ALL_VARIANTS=ON, GGML_OPENMP=OFF, Release). Of the prebuilt's CPU variants
# only the one ggml's loader picks on this machine is compiled, as a single CPU backend with that variant's
# feature options (so the same -m flags as the prebuilt's libggml-cpu-<variant>.so); building all 14
# variants would take most of an hour on 2 cores. SPARK_PEER_ALL_VARIANTS=1 builds all of them.
#
# Output: ~/.cache/spark-peer/<commit>/bin/{llama-server,llama-batched-bench,libggml-cpu-*.so}
# (SPARK_PEER_DIR overrides ~/.cache/spark-peer). Needs cmake and a C++ compiler; ~15 min on 2 cores.
set -euo pipefail

here="$(cd "$(dirname "$0")/../.." && pwd)"
bundle="$here/node_modules/node-llama-cpp/llama/gitRelease.bundle"
[ -f "$bundle" ] || { echo "no $bundle (npm ci first)" >&2; exit 1; }
root="${SPARK_PEER_DIR:-$HOME/.cache/spark-peer}"
commit="$(git bundle list-heads "$bundle" | awk '/HEAD/ {print $1; exit}')"
dir="$root/$commit"
jobs="${JOBS:-$(nproc)}"

if [ -x "$dir/bin/llama-server" ] && [ -x "$dir/bin/llama-batched-bench" ]; then
  echo "peer already built: $dir/bin"
  exit 0
fi
mkdir -p "$dir"
if [ ! -d "$dir/src/.git" ]; then
  rm -rf "$dir/src"
  git clone -q "$bundle" "$dir/src"
  git -C "$dir/src" -c advice.detachedHead=false checkout -q "$commit"
fi

# The x86 variant ggml's loader would choose here: the last one in ggml/src/CMakeLists.txt's list whose
# features this CPU has (the loader scores variants by feature count; later entries have more).
variant=""
variant_feats=""
if [ "$(uname -m)" = "x86_64" ] && [ -z "${SPARK_PEER_ALL_VARIANTS:-}" ]; then
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  has() {
    local f
    for f in "$@"; do
      case "$f" in
        SSE42) f=sse4_2 ;; AVX) f=avx ;; F16C) f=f16c ;; FMA) f=fma ;; AVX2) f=avx2 ;; BMI2) f=bmi2 ;;
        AVX512) f=avx512f ;; AVX512_VBMI) f=avx512vbmi ;; AVX512_VNNI) f=avx512_vnni ;;
        AVX512_BF16) f=avx512_bf16 ;; AVX_VNNI) f=avx_vnni ;; AMX_TILE) f=amx_tile ;; AMX_INT8) f=amx_int8 ;;
      esac
      case "$flags" in *" $f "*) ;; *) return 1 ;; esac
    done
  }
  while read -r name feats; do
    # shellcheck disable=SC2086
    if has $feats; then variant="$name" variant_feats="$feats"; fi
  done < <(awk '/GGML_SYSTEM_ARCH STREQUAL "x86"\)/ && inall { on = 1; next }
                /GGML_CPU_ALL_VARIANTS\)/ { inall = 1 }
                on && /elseif/ { exit }
                on && /ggml_add_cpu_backend_variant\(/ { gsub(/.*variant\(|\).*/, ""); print }' \
    "$dir/src/ggml/src/CMakeLists.txt")
fi
opts=(-DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_OPENMP=OFF)
if [ -n "$variant" ]; then
  opts+=(-DGGML_CPU_ALL_VARIANTS=OFF)
  for f in SSE42 AVX AVX2 BMI2 AVX_VNNI FMA F16C AVX512 AVX512_VBMI AVX512_VNNI AVX512_BF16 AMX_TILE AMX_INT8 AMX_BF16; do
    case " $variant_feats " in *" $f "*) opts+=("-DGGML_$f=ON") ;; *) opts+=("-DGGML_$f=OFF") ;; esac
  done
else
  opts+=(-DGGML_CPU_ALL_VARIANTS=ON)
fi
echo "building llama-server, llama-batched-bench at $commit with $jobs jobs, cpu variant ${variant:-all}: ${opts[*]}"

cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release "${opts[@]}" \
  -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF \
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON >"$dir/cmake.log"
cmake --build "$dir/build" --config Release -j "$jobs" --target llama-server llama-batched-bench
mkdir -p "$dir/bin"
# llama-server loads libggml-cpu-*.so from its own directory (GGML_BACKEND_DL).
find "$dir/build/bin" -maxdepth 1 \( -name 'llama-server' -o -name 'llama-batched-bench' -o -name '*.so' \) \
  -exec cp -a {} "$dir/bin/" \;
echo "peer built: $dir/bin (cpu variant: ${variant:-all})"
