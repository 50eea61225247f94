#!/usr/bin/env bash
# Soak test of `tandem serve`: starts the server, drives it with `tandem bench --soak-seconds`
# (streamed and whole responses on both generation routes, 1 in 10 aborted mid-stream, 1 in 20
# malformed, prompts from ~16 to ~300 tokens, up to 76 generated), samples the server's resident memory every 10 s,
# stops the server with SIGTERM, and writes docs/reliability/soak-DATE.json (the summary, the
# samples and the verdict) and .png (memory over time) through scripts/soak_report.py.
#   scripts/soak.sh [--minutes M] [--concurrency C] [--model DIR] [--out PREFIX]
#                   [--sample-seconds S] [--rss-bound-mb MB] [--bench "BENCH_FLAGS"] [-- SERVE_FLAGS]
# --bench replaces the prompt flags of the load (e.g. a prefix_repetition dataset; a --timeout
# there overrides the 120 s per request, for loads that queue long prompts); with
# --rss-bound-mb the verdict also needs every memory sample under it. After the load the server's
# /metrics is saved as PREFIX.metrics.txt: every KV block must be free or cached (no leak).
# Defaults: 60 minutes, concurrency 64, ../shared/models/tinystories-656k, the build in build/
# (TANDEM_BIN overrides; TANDEM_SERVE_BIN serves with another build, e.g. an older one, while
# TANDEM_BIN's bench drives it). Exit status: 0 when the verdict passes (no 5xx, no crash, memory growth
# under 5% over the last 45 minutes, or the last 75% of a shorter run), 1 otherwise.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
minutes=60
concurrency=64
model="$root/../shared/models/tinystories-656k"
out=""
sample_seconds=10
rss_bound=""
bench_flags="--random-input-len 160 --random-range-ratio 0.9 --random-output-len 40 --num-prompts 2000"
serve_flags=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --minutes) minutes="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --sample-seconds) sample_seconds="$2"; shift 2 ;;
    --rss-bound-mb) rss_bound="$2"; shift 2 ;;
    --bench) bench_flags="$2"; shift 2 ;;
    --) shift; serve_flags=("$@"); break ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "soak.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
bin="${TANDEM_BIN:-$root/build/tandem}"
serve_bin="${TANDEM_SERVE_BIN:-$bin}"
for b in "$bin" "$serve_bin"; do
  [[ -x "$b" ]] || { echo "soak.sh: no tandem binary at $b (scripts/build.sh, or TANDEM_BIN)" >&2; exit 2; }
done
[[ -f "$model/config.json" ]] || { echo "soak.sh: no model at $model" >&2; exit 2; }
# Debian's python3 (with python3-matplotlib), not whatever python3 comes first in PATH.
py="${PYTHON:-/usr/bin/python3}"
"$py" -c 'import matplotlib' 2>/dev/null || {
  echo "soak.sh: $py has no matplotlib (apt-get install python3-matplotlib)" >&2; exit 2; }
[[ -n "$out" ]] || out="$root/docs/reliability/soak-$(date -u +%Y%m%d-%H%M)"
mkdir -p "$(dirname "$out")"
log="$(mktemp /tmp/tandem-soak-XXXXXX.log)"

# Room for every client at once (no 429 by design: the soak looks for errors, not back-pressure).
"$serve_bin" serve --model "$model" --port 0 --max-batch "$concurrency" \
  --max-waiting "$((concurrency * 2))" "${serve_flags[@]}" >"$log" 2>&1 &
pid=$!
trap 'kill -TERM $pid 2>/dev/null || true' EXIT
port=""
for _ in $(seq 1 300); do
  port="$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log" | head -1)"
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; echo "soak.sh: the server exited" >&2; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { cat "$log" >&2; echo "soak.sh: the server did not start" >&2; exit 1; }
echo "soak.sh: server pid $pid on port $port; $minutes min at concurrency $concurrency" >&2

"$bin" bench --base-url "http://127.0.0.1:$port" --model "$model" \
  --soak-seconds "$((minutes * 60))" --soak-pid "$pid" --max-concurrency "$concurrency" \
  --sample-interval "$sample_seconds" --timeout 120 $bench_flags \
  --save-result "$out.json" >/dev/null || true

# What the KV pools hold once the load is over (the engine idle): free or cached, nothing leaked.
metrics_ok=1
for _ in $(seq 1 60); do
  curl -sf "http://127.0.0.1:$port/metrics" >"$out.metrics.txt" || { metrics_ok=0; break; }
  grep -q '^tandem_num_requests_running 0$' "$out.metrics.txt" && break
  sleep 1
done
[[ $metrics_ok == 1 ]] && grep -E '^tandem_(kv_|prefix_cache)' "$out.metrics.txt" >&2 || true

# The server must stop cleanly on SIGTERM: any other end counts as a crash.
trap - EXIT
server_exit=0
if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid"
  wait "$pid" || server_exit=$?
else
  wait "$pid" || server_exit=$?
  server_exit=${server_exit:-1}
  [[ $server_exit == 0 ]] && server_exit=1  # gone before the end of the soak
fi
grep -E '\[(error|critical)\]' "$log" | head -20 >&2 || true
[[ -f "$out.json" ]] || { cat "$log" >&2; echo "soak.sh: the driver wrote no summary" >&2; exit 1; }
rm -f "$log"
"$py" "$root/scripts/soak_report.py" "$out.json" --server-exit "$server_exit" \
  ${rss_bound:+--rss-bound-mb "$rss_bound"} --end-metrics "$out.metrics.txt"
