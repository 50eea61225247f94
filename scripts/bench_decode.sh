#!/usr/bin/env bash
# Decode benchmark of the forward pass (not a test): prefill and decode tokens/s at batch 1 and 8
# for ../shared/models/tinystories-656k and for random-weight checkpoints with the shape of
# Llama-3.2-1B in f32 and bf16, with the threads used, the weight bytes read per step and the
# machine's measured read bandwidth. Prints one JSON object per line.
#   [TANDEM_BUILD_DIR=build-x] scripts/bench_decode.sh [--threads N]   (models are cached in
#   $TANDEM_BENCH_DIR, by default the build folder's bench-models/)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
threads=0
if [[ "${1:-}" == "--threads" ]]; then threads="$2"; fi
build="${TANDEM_BUILD_DIR:-$root/build}"
bin="$build/tandem"
[[ -x "$bin" ]] || scripts/build.sh >&2
cache="${TANDEM_BENCH_DIR:-$build/bench-models}"
mkdir -p "$cache"
for dt in f32 bf16; do
  if [[ ! -f "$cache/llama-3.2-1b-$dt/model.safetensors" ]]; then
    echo "bench_decode: writing random Llama-3.2-1B-shaped weights ($dt) to $cache" >&2
    "$bin" make-model --shape llama-3.2-1b --dtype "$dt" --out "$cache/llama-3.2-1b-$dt"
  fi
done
echo "{\"machine\":{\"cpu\":\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\",\"cores\":$(nproc)}}"
"$bin" bench-decode --model ../shared/models/tinystories-656k --batch 1,8 --prompt-len 128 --gen 64 --threads "$threads"
for dt in f32 bf16; do
  "$bin" bench-decode --model "$cache/llama-3.2-1b-$dt" --batch 1,8 --prompt-len 64 --gen 8 --threads "$threads"
done
