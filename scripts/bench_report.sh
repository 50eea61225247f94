#!/usr/bin/env bash
# Runs the benchmark suite that fits this machine and writes docs/benchmarks.md with its plots
# (docs/bench-*.png) and the summary data (docs/benchmarks.jsonl):
#   1. serving: `tandem serve` on the model, `tandem bench` at concurrency 1..64 (random prompts,
#      --ignore-eos): throughput, TTFT/TPOT/ITL/E2E percentiles, and the server's own step time in
#      and outside the forward pass from its /metrics;
#   2. depth sweep (scripts/bench_depth.sh): decode tokens/s vs context depth per KV policy;
#   3. without --quick also scripts/bench_decode.sh (forward-pass decode speed, Llama-3.2-1B
#      shape) and a short scripts/bench_cpu_attn.sh (host attention GB/s vs read bandwidth).
# The machine (CPU model, cores, memory, measured read bandwidth, GPU if nvidia-smi sees one, load
# average) is written with the figures: the load average matters on a shared machine.
#   [TANDEM_BUILD_DIR=build-x] scripts/bench_report.sh [--quick] [--model DIR] [--port P]
#       [--out DIR (default docs)]
# Model: --model, else models/tandem-demo when it exists, else ../shared/models/tinystories-656k.
# Runtime on 2 cores: under a minute with --quick, about 10 minutes without (the first run also
# writes the random-weight models, 7.5 GB for bench_decode.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${TANDEM_BUILD_DIR:-$root/build}"
bin="$build/tandem"
quick=0 model="" port=18777 out="docs"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1; shift ;;
    --model) model="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "bench_report: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [[ -z "$model" ]]; then
  if [[ -f models/tandem-demo/config.json ]]; then model=models/tandem-demo
  else model=../shared/models/tinystories-656k; fi
fi
[[ -f "$model/config.json" ]] || { echo "bench_report: no model at $model" >&2; exit 1; }
[[ -x "$bin" ]] || scripts/build.sh >&2
if ! command -v gnuplot > /dev/null; then
  echo "bench_report: installing gnuplot-nox" >&2
  if [[ $(id -u) == 0 ]]; then apt-get update -qq && apt-get install -y -qq gnuplot-nox >&2
  else sudo apt-get update -qq && sudo apt-get install -y -qq gnuplot-nox >&2; fi
fi
for tool in python3 curl gnuplot; do
  command -v "$tool" > /dev/null || { echo "bench_report: $tool is needed" >&2; exit 1; }
done
work="$build/bench-report"
rm -rf "$work"
mkdir -p "$work" "$out"
t_start=$(date +%s)
log() { echo "bench_report [$(( $(date +%s) - t_start )) s]: $*" >&2; }

# ---- machine ------------------------------------------------------------------------------------
gpu="none"
if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then
  gpu="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1)"
fi
log "machine: $(nproc) cores, GPU: $gpu"
# Decode speed of the serving model's forward pass, with the measured read bandwidth (1 GiB).
"$bin" bench-decode --model "$model" --batch 1,8,64 --prompt-len 64 --gen 32 > "$work/decode_model.jsonl"
python3 - "$work/machine.json" "$gpu" "$model" "$quick" <<'EOF'
import json, os, platform, subprocess, sys
path, gpu, model, quick = sys.argv[1:5]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.processor())
mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal")) / 1048576
bw = json.loads(open(os.path.join(os.path.dirname(path), "decode_model.jsonl")).readline())["measured_read_bw_gbs"]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
json.dump({"cpu": cpu, "cores": os.cpu_count(), "mem_gb": round(mem, 1), "read_bw_gbs": bw,
           "gpu": gpu, "load_avg": open("/proc/loadavg").read().split()[:3], "kernel": platform.release(),
           "model": model, "quick": quick == "1", "commit": commit}, open(path, "w"))
EOF

# ---- serving sweep ------------------------------------------------------------------------------
if (( quick )); then concs="1 8 64"; else concs="1 2 4 8 16 32 64"; fi
ctx=$(grep -oE '"(max_position_embeddings|n_positions|max_seq_len)": *[0-9]+' "$model/config.json" | head -1 | grep -oE '[0-9]+$')
in_len=128 out_len=128
if (( ctx < 512 )); then in_len=$(( ctx / 4 )); out_len=$(( ctx / 4 )); fi
log "serving $model on port $port (inputs $in_len, outputs $out_len tokens)"
"$bin" serve --model "$model" --port "$port" --max-batch 64 --log-level warn > "$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2> /dev/null || true' EXIT
for _ in $(seq 1 300); do
  curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
  kill -0 $server 2> /dev/null || { cat "$work/serve.log" >&2; echo "bench_report: the server died" >&2; exit 1; }
  sleep 0.2
done
for c in $concs; do
  n=$(( c * 4 )); (( n < 32 )) && n=32
  (( quick )) && { n=$(( c * 2 )); (( n < 16 )) && n=16; }
  log "tandem bench: concurrency $c, $n prompts"
  "$bin" bench --base-url "http://127.0.0.1:$port" --model "$model" --num-prompts "$n" \
    --max-concurrency "$c" --random-input-len "$in_len" --random-output-len "$out_len" --ignore-eos \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 --seed 1 --quiet \
    --save-result "$work/serve_c$c.json" > "$work/serve_c$c.txt"
done
# Diagnostic: the top concurrency again with the client at nice 19, so that its threads yield the
# cores to the server's (how much of the step time outside the forward is the client's doing).
top=${concs##* }
log "tandem bench: concurrency $top, client at nice 19"
n=$(( top * 4 )); (( quick )) && n=$(( top * 2 ))
nice -n 19 "$bin" bench --base-url "http://127.0.0.1:$port" --model "$model" --num-prompts "$n" \
  --max-concurrency "$top" --random-input-len "$in_len" --random-output-len "$out_len" --ignore-eos \
  --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 --seed 1 --quiet \
  --save-result "$work/serve_nice_c$top.json" > "$work/serve_nice_c$top.txt"
if (( ! quick )); then
  log "tandem bench: Poisson arrivals at 20 req/s, no concurrency limit"
  "$bin" bench --base-url "http://127.0.0.1:$port" --model "$model" --num-prompts 128 \
    --request-rate 20 --random-input-len "$in_len" --random-output-len "$out_len" --ignore-eos \
    --percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99 --seed 1 --quiet \
    --goodput ttft:500 tpot:50 --save-result "$work/serve_rate20.json" > "$work/serve_rate20.txt"
fi
kill $server; wait $server 2> /dev/null || true
trap - EXIT

# ---- depth sweep and the other suites ----------------------------------------------------------
if (( quick )); then
  log "depth sweep (quick)"
  scripts/bench_depth.sh --quick > "$work/depth.jsonl"
else
  log "depth sweep, batch 1"
  scripts/bench_depth.sh --batch 1 --depths 512,1024,2048,4096,8192,16384,32768 > "$work/depth.jsonl"
  log "depth sweep, batch 4"
  scripts/bench_depth.sh --batch 4 --depths 512,2048,8192 | tail -n +2 >> "$work/depth.jsonl"
  log "scripts/bench_decode.sh"
  scripts/bench_decode.sh > "$work/decode.jsonl" || log "bench_decode.sh failed (skipped)"
  log "scripts/bench_cpu_attn.sh (short)"
  scripts/bench_cpu_attn.sh --contexts 8192,65536 --batch 1 --dtypes bf16 --min-time 0.3 \
    > "$work/cpu_attn.jsonl" || log "bench_cpu_attn.sh failed (skipped)"
fi

# ---- report -------------------------------------------------------------------------------------
log "writing $out/benchmarks.md"
python3 scripts/bench_report.py "$work" "$out" "$(( $(date +%s) - t_start ))"
for g in "$work"/*.gp; do gnuplot "$g"; done
log "done: $out/benchmarks.md, $(ls "$out"/bench-*.png | wc -l) plots"
