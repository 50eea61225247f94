#!/usr/bin/env bash
# Decode throughput of the hybrid store against all KV on the device (issue 7's benchmark (b) and
# (c); not a test). For each context: `tandem bench-decode --fill import` (random K/V rows stored
# directly: a 32K prefill would take longer than the measurement) at the given batches and at the
# largest batch each mode fits (`--batch max`), in three modes, all with bf16 KV and the exact
# `full` policy:
#   all-device       --window-frac 1     every token in the device window (no host part)
#   hybrid-parallel  --window-frac 0.25  25% of the context on the device, host part started with
#                                        the layer's query
#   hybrid-ahead     --window-frac 0.25  the host part started one layer early
# Writes the JSON lines to --out and a markdown report (tables, the issue's goals) to --md.
#
#   scripts/bench_hybrid.sh [--shape llama-3.1-8b | --model DIR] [--device cuda|cpu|auto]
#       [--contexts 4096,16384,32768] [--batches 1,8,max] [--gen 16] [--dtype bf16]
#       [--out FILE.jsonl] [--md FILE.md] [-- extra bench-decode flags, e.g. --cpu-threads 12]
# Random-weight models are cached in $TANDEM_BENCH_DIR (default: the build folder's
# bench-models/). TANDEM_BIN overrides the tandem binary (scripts/gpu_check.sh --prebuilt).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${TANDEM_BUILD_DIR:-$root/build}"
bin="${TANDEM_BIN:-$build/tandem}"
shape=llama-3.1-8b
model=""
device=auto
contexts=4096,16384,32768
batches=1,8,max
gen=16
dtype=bf16
out="$build/bench-hybrid.jsonl"
md=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shape) shape="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --contexts) contexts="$2"; shift 2 ;;
    --batches) batches="$2"; shift 2 ;;
    --gen) gen="$2"; shift 2 ;;
    --dtype) dtype="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --md) md="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "bench_hybrid: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ -x "$bin" ]] || scripts/build.sh >&2
if [[ -z $model ]]; then
  cache="${TANDEM_BENCH_DIR:-$build/bench-models}"
  model="$cache/$shape-$dtype"
  if [[ ! -f "$model/model.safetensors" ]]; then
    echo "bench_hybrid: writing random $shape-shaped weights ($dtype) to $model" >&2
    "$bin" make-model --shape "$shape" --dtype "$dtype" --out "$model"
  fi
fi
# The depths: the context minus the generated tokens, so that depth + gen = the context.
depths=""
IFS=, read -ra ctx_list <<<"$contexts"
for c in "${ctx_list[@]}"; do depths="${depths:+$depths,}$((c - gen))"; done

mkdir -p "$(dirname "$out")"
: >"$out"
for mode in all-device hybrid-parallel hybrid-ahead; do
  case $mode in
    all-device) kv=(--window-frac 1 --cpu-attn parallel) ;;
    hybrid-parallel) kv=(--window-frac 0.25 --cpu-attn parallel) ;;
    hybrid-ahead) kv=(--window-frac 0.25 --cpu-attn ahead) ;;
  esac
  echo "bench_hybrid: $mode, contexts $contexts, batches $batches" >&2
  "$bin" bench-decode --model "$model" --device "$device" --fill import --depth "$depths" \
    --gen "$gen" --batch "$batches" --sparse full --kv-dtype bf16 "${kv[@]}" "${extra[@]}" |
    sed "s/^{/{\"mode\":\"$mode\",/" >>"$out"
done

report() {
  if ! command -v python3 >/dev/null; then
    echo "(python3 not found: the raw JSON lines are in $out)"
    return
  fi
  python3 - "$out" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
if not rows:
    sys.exit("bench_hybrid: no results")
r0 = rows[0]
print(f"Model `{r0['model']}` ({r0['params'] / 1e9:.2f}B parameters, {r0['weights_dtype']} weights, "
      f"random), device `{r0['device']}`, bf16 KV, policy `full`, KV filled by import, "
      f"{int(r0['decode_steps'])} timed decode steps per point (median step time).\n")
key = lambda r: (r["depth"] + r["decode_steps"] + 1, r["batch"])
by = {}
for r in rows:
    by[(r["mode"], r["depth"], r["batch"])] = r
contexts = sorted({r["depth"] for r in rows})
modes = ["all-device", "hybrid-parallel", "hybrid-ahead"]

def tps(r):
    return r["decode_tokens_per_s_median"]

print("### (b) Decode tokens/s, hybrid (window = 25% of the context) vs all KV on the device\n")
print("| context | batch | all-device tok/s | hybrid-parallel tok/s | × | hybrid-ahead tok/s | × |")
print("|---:|---:|---:|---:|---:|---:|---:|")
ratios = []
for d in contexts:
    ctx = d + int(r0["decode_steps"]) + 1
    batches = sorted({r["batch"] for r in rows if r["depth"] == d and not r["batch_is_max"]})
    for b in batches:
        a = by.get(("all-device", d, b))
        cells = [f"{tps(a):.1f}" if a else "-"]
        for m in ("hybrid-parallel", "hybrid-ahead"):
            h = by.get((m, d, b))
            if h and a:
                ratios.append((tps(h) / tps(a), m, ctx, b))
                cells += [f"{tps(h):.1f}", f"{tps(h) / tps(a):.2f}"]
            else:
                cells += [f"{tps(h):.1f}" if h else "-", "-"]
        print(f"| {ctx} | {b} | " + " | ".join(cells) + " |")
print()
print("Largest batch each mode fits (`--batch max`: KV bytes against the free device memory and, "
      "for the hybrid, the free host memory, 2 GiB kept free in each):\n")
print("| context | all-device batch (limit) | tok/s | hybrid batch (limit) | parallel tok/s | "
      "ahead tok/s | batch × |")
print("|---:|---:|---:|---:|---:|---:|---:|")
batch_ratio = {}
for d in contexts:
    ctx = d + int(r0["decode_steps"]) + 1
    mx = {m: next((r for r in rows if r["mode"] == m and r["depth"] == d and r["batch_is_max"]),
                  None) for m in modes}
    a, p, h = mx["all-device"], mx["hybrid-parallel"], mx["hybrid-ahead"]
    if not a or not p:
        continue
    batch_ratio[ctx] = p["batch"] / a["batch"]
    print(f"| {ctx} | {a['batch']} ({a['batch_limit']}) | {tps(a):.1f} | {p['batch']} "
          f"({p['batch_limit']}) | {tps(p):.1f} | {tps(h):.1f} | {p['batch'] / a['batch']:.2f} |"
          if h else
          f"| {ctx} | {a['batch']} ({a['batch_limit']}) | {tps(a):.1f} | {p['batch']} "
          f"({p['batch_limit']}) | {tps(p):.1f} | - | {p['batch'] / a['batch']:.2f} |")
print()
if ratios:
    worst = min(ratios)
    print(f"Goal hybrid ≥ 0.9× all-device at equal batch: worst {worst[0]:.2f}× "
          f"({worst[1]}, context {worst[2]}, batch {worst[3]}): "
          f"{'met' if worst[0] >= 0.9 else 'NOT met'}.")
if batch_ratio:
    ctx = max(batch_ratio)
    print(f"Goal ≥ 4× the batch at the longest context ({ctx}): {batch_ratio[ctx]:.2f}×: "
          f"{'met' if batch_ratio[ctx] >= 4 else 'NOT met'}.")
print()
print("### (c) Time per step the device side waits for the host partials\n")
print("`host wait` is the time the thread driving the device spends in the merge waiting for the "
      "CPU attention of the layer (the pipeline is synchronous, so the GPU idles meanwhile); "
      "`cpu busy` is the CPU attention thread-time per step.\n")
print("| context | batch | mode | ms/step | host wait ms/step | wait share | cpu busy ms/step |")
print("|---:|---:|---|---:|---:|---:|---:|")
for d in contexts:
    ctx = d + int(r0["decode_steps"]) + 1
    for b in sorted({r["batch"] for r in rows if r["depth"] == d}):
        for m in ("hybrid-parallel", "hybrid-ahead"):
            r = by.get((m, d, b))
            if r:
                print(f"| {ctx} | {b} | {m} | {r['ms_per_step_median']:.2f} | "
                      f"{r['host_wait_ms_per_step']:.2f} | "
                      f"{r['host_wait_ms_per_step'] / r['ms_per_step']:.0%} | "
                      f"{r['cpu_attn_busy_ms_per_step']:.2f} |")
EOF
}
if [[ -n $md ]]; then report >"$md"; else report; fi
echo "bench_hybrid: $(wc -l <"$out") results in $out" >&2
