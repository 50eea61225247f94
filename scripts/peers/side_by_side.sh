#!/usr/bin/env bash
# One round: llama-bench and tandem bench-decode on the same weights, 2 threads, in turn.
# Usage: side_by_side.sh ROUND >> results.jsonl
set -u
T="${TANDEM:-$(cd "$(dirname "$0")/../.." && pwd)/build/tandem}"
cd "${PEERS:-/work/peers}"  # holds llama1b-bf16/, llama1b-bf16.gguf and llama.cpp/build
LB=llama.cpp/build/bin/llama-bench
r=$1
load() { cut -d' ' -f1 /proc/loadavg; }
tag() { sed "s/^{/{\"round\":$r,\"who\":\"$1\",\"load\":$(load),/"; }
$LB -m llama1b-bf16.gguf -p 64,512 -n 32 -t 2 -r 3 -o jsonl 2>/dev/null | tag llama.cpp
for pl in 64 512; do
  $T bench-decode --model llama1b-bf16 --batch 1 --prompt-len $pl --gen 8 --threads 2 2>/dev/null | tail -1 | tag "tandem-pp$pl"
done
$T bench-decode --model llama1b-bf16 --batch 1 --prompt-len 1 --gen 33 --threads 2 2>/dev/null | tail -1 | tag tandem-tg
$LB -m llama1b-bf16.gguf -p 0 -n 16 -d 4096 -t 2 -r 2 -o jsonl 2>/dev/null | tag llama.cpp-d4096
$T bench-decode --model llama1b-bf16 --batch 1 --depth 4096 --gen 17 --threads 2 --dense 2>/dev/null | tail -1 | tag tandem-d4096-dense
$T bench-decode --model llama1b-bf16 --batch 1 --depth 4096 --gen 17 --threads 2 --sparse full 2>/dev/null | tail -1 | tag tandem-d4096-full
