#!/usr/bin/env bash
# Host (CPU) attention benchmark (not a test): KV bytes scanned per second by HostAttention under
# the `full` policy, for 1 thread and all cores, at contexts 4K..64K, for a Llama-3-8B-like layer
# (8 KV heads, G=4, head_dim 128, blocks of 64) in bf16 and f32, batch 1 and 4, next to the
# machine's read bandwidth measured by the same run (at start, and right before each figure).
# Every configuration is validated against a float64 reference before it is timed.
# Prints one JSON object per line: first the machine, then one line per configuration; run it
# once with 4 KiB pages and once with 2 MiB (transparent huge) pages for the KV (the default, as
# the host store's pool).
#   [TANDEM_BUILD_DIR=build-x] scripts/bench_cpu_attn.sh [extra bench-cpu-attn flags, e.g. --contexts 4096,32768 --batch 1]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bin="${TANDEM_BUILD_DIR:-$root/build}/tandem"
[[ -x "$bin" ]] || scripts/build.sh >&2
echo "{\"machine\":{\"cpu\":\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')\",\"cores\":$(nproc),\"mem_gb\":$(awk '/MemTotal/ {printf "%.1f", $2/1048576}' /proc/meminfo),\"thp\":\"$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || echo unknown)\"}}"
"$bin" bench-cpu-attn --pages small "$@"
"$bin" bench-cpu-attn --pages huge "$@"
