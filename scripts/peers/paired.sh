#!/usr/bin/env bash
# Tight pairs: one llama-bench test and the same Tandem measurement back to back, the order
# flipped every pair, so that both runs of a pair meet the same minute of a shared machine's
# memory speed (on the project's VMs the read bandwidth moves between ~25 and ~55 GB/s from minute
# to minute, more than the difference being measured). side_by_side.sh runs whole rounds instead,
# minutes apart per test. Summarise with paired_summary.py (median of the per-pair ratios).
# Usage: paired.sh PAIRS [TEST...] >> results.jsonl   TEST: pp64 pp512 tg d4096 (default: the
# first three; d4096 fills a 4096-token context on both sides, ~2 min a pair).
set -u
T="${TANDEM:-$(cd "$(dirname "$0")/../.." && pwd)/build/tandem}"
cd "${PEERS:-/work/peers}"  # holds llama1b-bf16/, llama1b-bf16.gguf and llama.cpp/build
LB=llama.cpp/build/bin/llama-bench
pairs=$1
shift
tests=("$@")
[ ${#tests[@]} -eq 0 ] && tests=(pp64 pp512 tg)
load() { cut -d' ' -f1 /proc/loadavg; }
tag() { sed "s/^{/{\"pair\":$1,\"test\":\"$2\",\"who\":\"$3\",\"load\":$(load),/"; }
llama() {  # pair test
  case $2 in
    pp64) $LB -m llama1b-bf16.gguf -p 64 -n 0 -t 2 -r 2 -o jsonl ;;
    pp512) $LB -m llama1b-bf16.gguf -p 512 -n 0 -t 2 -r 1 -o jsonl ;;
    tg) $LB -m llama1b-bf16.gguf -p 0 -n 32 -t 2 -r 1 -o jsonl ;;
    d4096) $LB -m llama1b-bf16.gguf -p 0 -n 16 -d 4096 -t 2 -r 1 -o jsonl ;;
  esac 2>/dev/null | tag "$1" "$2" llama.cpp
}
tandem() {  # pair test
  local common=(bench-decode --model llama1b-bf16 --batch 1 --threads 2)
  if [ "$2" = d4096 ]; then
    # The dense cache and the hybrid store (full policy), each with f32 KV and with f16 KV, the
    # type of llama.cpp's default cache (llama-bench's type_k / type_v).
    $T "${common[@]}" --depth 4096 --gen 17 --dense 2>/dev/null | tail -1 |
      tag "$1" "$2" tandem-dense
    $T "${common[@]}" --depth 4096 --gen 17 --dense --kv-dtype f16 2>/dev/null | tail -1 |
      tag "$1" "$2" tandem-dense-f16
    $T "${common[@]}" --depth 4096 --gen 17 --sparse full 2>/dev/null | tail -1 |
      tag "$1" "$2" tandem-full
    $T "${common[@]}" --depth 4096 --gen 17 --sparse full --kv-dtype f16 2>/dev/null | tail -1 |
      tag "$1" "$2" tandem-full-f16
    return
  fi
  case $2 in
    pp64) $T "${common[@]}" --prompt-len 64 --gen 2 ;;
    pp512) $T "${common[@]}" --prompt-len 512 --gen 2 ;;
    tg) $T "${common[@]}" --prompt-len 1 --gen 33 ;;
  esac 2>/dev/null | tail -1 | tag "$1" "$2" tandem
}
for ((i = 1; i <= pairs; ++i)); do
  for t in "${tests[@]}"; do
    if ((i % 2)); then llama $i $t; tandem $i $t; else tandem $i $t; llama $i $t; fi
  done
done
