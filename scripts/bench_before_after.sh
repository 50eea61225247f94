#!/usr/bin/env bash
# Decode step time of two tandem binaries side by side (the machines are shared and noisy: the
# runs are interleaved, before/after per configuration, for several rounds, each line with the
# load average). Prints JSON lines; the median per (build, policy, mode) is what to compare.
#
#   scripts/bench_before_after.sh BEFORE_BIN AFTER_BIN MODEL [rounds] [-- extra bench-decode flags]
#   e.g. scripts/bench_before_after.sh /tmp/tandem-c8f83a2 build/tandem /tmp/tiny-64k 3 -- \
#          --depth 8192 --batch 8 --gen 16
# MODEL: a checkpoint folder; the tiny-64k of scripts/bench_depth.sh suits depth 8192.
set -euo pipefail
[[ $# -ge 3 ]] || { sed -n '2,9p' "$0" >&2; exit 2; }
before="$1" after="$2" model="$3"
rounds="${4:-3}"
shift $(($# >= 4 ? 4 : 3))
[[ "${1:-}" == "--" ]] && shift
extra=("$@")
[[ ${#extra[@]} -gt 0 ]] || extra=(--depth 8192 --batch 8 --gen 16)
for round in $(seq 1 "$rounds"); do
  for policy in full hgca topk; do
    for mode in parallel ahead; do
      for build in before after; do
        bin="$before"
        [[ $build == after ]] && bin="$after"
        line=$("$bin" bench-decode --model "$model" --device cpu --sparse "$policy" \
          --cpu-attn "$mode" "${extra[@]}" 2>/dev/null | tail -1)
        printf '{"round":%d,"build":"%s","policy":"%s","mode":"%s","load_avg_1m":%s,"result":%s}\n' \
          "$round" "$build" "$policy" "$mode" "$(cut -d' ' -f1 /proc/loadavg)" "${line:-null}"
      done
    done
  done
done
