#!/usr/bin/env bash
# The prefix cache's figures: the same workloads against `tandem serve` with and without it
# (--no-prefix-cache), in one run on this machine, written as the "Prefix cache (hand-run)"
# section of docs/benchmarks.md with its plot (docs/bench-prefix.png) and the raw JSON
# (docs/prefix-cache/*.json):
#   - a repeated 3,171-token prompt (TTFT of each send, cached tokens): scripts/prefix_ttft.py
#   - an 8-turn chat to ~4K context, each turn with the whole history (prefilled tokens per turn
#     from the server's metrics): scripts/prefix_ttft.py
#   - `tandem bench --dataset-name prefix_repetition` and `--dataset-name multi_turn`
#   scripts/prefix_bench.sh [--model DIR] [--repeats N]
# Defaults: models/tandem-long, the build in build/ (TANDEM_BIN overrides), 2 repeats of each
# configuration (alternating, so that the machine's load hits both alike).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
model="$root/models/tandem-long"
repeats=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --repeats) repeats="$2"; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prefix_bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin="${TANDEM_BIN:-$root/build/tandem}"
[[ -x "$bin" ]] || { echo "prefix_bench.sh: no tandem binary at $bin" >&2; exit 2; }
py=/usr/bin/python3
"$py" -c 'import matplotlib' 2>/dev/null || {
  echo "prefix_bench.sh: $py has no matplotlib (apt-get install python3-matplotlib)" >&2; exit 2; }
out="$root/docs/prefix-cache"
mkdir -p "$out"
rm -f "$out"/*.json
name="$(basename "$model")"

serve() {  # serve FLAGS...: starts the server, sets pid and port
  log="$(mktemp /tmp/tandem-prefix-XXXXXX.log)"
  "$bin" serve --model "$model" --port 0 --max-batch 16 "$@" >"$log" 2>&1 &
  pid=$!
  port=""
  for _ in $(seq 1 300); do
    port="$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)"
    [[ -n "$port" ]] && return 0
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "prefix_bench.sh: the server did not start" >&2
  exit 1
}

for r in $(seq 1 "$repeats"); do
  for cache in on off; do
    flags=()
    [[ $cache == off ]] && flags=(--no-prefix-cache)
    serve "${flags[@]}"
    tag="$cache-$r"
    echo "prefix_bench.sh: $tag (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
    { echo "{\"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"result\": "
      "$py" "$root/scripts/prefix_ttft.py" --base-url "http://127.0.0.1:$port" --model "$name" \
        --tokens 3171 --repeats 3 --turns 8 --turn-tokens 300 --output-len 16
      echo "}"; } >"$out/ttft-$tag.json"
    "$bin" bench --base-url "http://127.0.0.1:$port" --model "$model" --seed "$r" \
      --dataset-name prefix_repetition --prefix-repetition-prefix-len 2048 \
      --prefix-repetition-suffix-len 512 --prefix-repetition-num-prefixes 4 \
      --prefix-repetition-output-len 32 --num-prompts 32 --max-concurrency 8 --ignore-eos \
      --save-result "$out/prefix-repetition-$tag.json" >/dev/null
    "$bin" bench --base-url "http://127.0.0.1:$port" --model "$model" --seed "$r" \
      --dataset-name multi_turn --multi-turn-turns 6 --multi-turn-input-len 256 \
      --multi-turn-output-len 32 --num-prompts 8 --max-concurrency 4 --ignore-eos \
      --endpoint /v1/chat/completions --save-result "$out/multi-turn-$tag.json" >/dev/null
    kill -TERM "$pid"
    wait "$pid" || true
    rm -f "$log"
  done
done
"$py" "$root/scripts/prefix_report.py" "$out" "$root/docs/benchmarks.md" "$root/docs/bench-prefix.png" \
  "$(git -C "$root" rev-parse --short HEAD)"
