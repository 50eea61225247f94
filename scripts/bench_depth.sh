#!/usr/bin/env bash
# Depth sweep (not a test; llama-bench -d): decode tokens/s and ms per step with D tokens already
# in the cache, for the dense KV and the hybrid policies (full, hgca, topk), at several batch
# sizes. Each depth is filled by chunked prefill into fresh sequences, then `--gen` decode steps
# are timed (ms_per_step: mean; ms_per_step_median: median, robust to preempted steps on a
# shared machine). Prints one JSON object per line: the machine first, then one line per
# (policy, batch, depth) from `tandem bench-decode --depth`.
#
# The default model is a random-weight Llama of the `tiny` shape (2 layers, 4 heads, 2 KV heads,
# head_dim 32) with its context raised to 64K+, written once to $TANDEM_BENCH_DIR: its weights are
# small, so the time per step is the attention over the cache. Depths that do not fit the model's
# context are skipped.
#   [TANDEM_BUILD_DIR=build-x] scripts/bench_depth.sh [--model DIR] [--depths 512,2048,...]
#       [--batch 1,4] [--policies dense,full,hgca,topk] [--gen N] [--threads N] [--quick]
#       [-- extra bench-decode flags, e.g. --window 512 --topk-blocks 8]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${TANDEM_BUILD_DIR:-$root/build}"
bin="$build/tandem"
model="" depths="512,1024,2048,4096,8192,16384,32768,65536" batch="1,4"
policies="dense,full,hgca,topk" gen=32 threads=0 extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --depths) depths="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --policies) policies="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --quick) depths="512,2048,8192"; batch="1"; gen=8; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench_depth: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ -x "$bin" ]] || scripts/build.sh >&2
if [[ -z "$model" ]]; then
  cache="${TANDEM_BENCH_DIR:-$build/bench-models}"
  model="$cache/tiny-64k"
  if [[ ! -f "$model/model.safetensors" ]]; then
    echo "bench_depth: writing a random-weight tiny Llama with a 66K context to $model" >&2
    "$bin" make-model --shape tiny --dtype f32 --out "$model" >&2
    sed -i -E 's/("max_position_embeddings": *)[0-9]+/\167584/' "$model/config.json"
  fi
fi
[[ -f "$model/config.json" ]] || { echo "bench_depth: no $model/config.json" >&2; exit 1; }
ctx=$(grep -oE '"(max_position_embeddings|n_positions|max_seq_len)": *[0-9]+' "$model/config.json" |
  head -1 | grep -oE '[0-9]+$')
fits=()
for d in ${depths//,/ }; do
  if (( d + gen + 1 <= ctx )); then fits+=("$d"); else echo "bench_depth: depth $d skipped (context $ctx)" >&2; fi
done
(( ${#fits[@]} > 0 )) || { echo "bench_depth: no depth fits the context of $ctx" >&2; exit 1; }
fit_list=$(IFS=,; echo "${fits[*]}")

echo "{\"machine\":{\"cpu\":\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\",\"cores\":$(nproc),\"mem_gb\":$(awk '/MemTotal/ {printf "%.1f", $2/1048576}' /proc/meminfo),\"load_avg_1m\":$(cut -d' ' -f1 /proc/loadavg)},\"model\":\"$model\",\"context\":$ctx}"
for p in ${policies//,/ }; do
  case "$p" in
    dense) kv=(--dense) ;;
    full|hgca|topk) kv=(--sparse "$p") ;;
    *) echo "bench_depth: unknown policy $p (dense, full, hgca, topk)" >&2; exit 2 ;;
  esac
  echo "bench_depth: $p, batch $batch, depths $fit_list" >&2
  "$bin" bench-decode --model "$model" --batch "$batch" --depth "$fit_list" --gen "$gen" \
    --threads "$threads" --bw-bytes 268435456 "${kv[@]}" "${extra[@]}"
done
