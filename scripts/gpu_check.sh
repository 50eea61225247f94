#!/usr/bin/env bash
# The GPU acceptance run of the CUDA backend, on a machine with an NVIDIA GPU, in steps:
#   build     build with CUDA on (build mode only)
#   ctest     every test of the build, the GPU tests required to run, not skip (build mode only)
#   kernels   test_cuda_kernels_*: every kernel against its CPU reference
#   model     test_cuda_model: the forward pass on the GPU against the CPU backend
#   engine    test_cuda_engine: generations with GPU sampling against the CPU backend
#   sanitize  compute-sanitizer memcheck and racecheck on the kernel tests, memcheck on the model
#   bench     tandem bench-kernels: merge and attention GB/s against the device's copy bandwidth
#   decode    scripts/bench_hybrid.sh: decode tokens/s, hybrid vs all KV on the GPU, and the GPU's
#             wait for the CPU (random Llama-3.1-8B shape, contexts 4K-32K; TANDEM_GPU_DECODE_ARGS
#             replaces its arguments)
#   run       tandem run --device cuda on models/tandem-demo against --device cpu (greedy text)
# Each step writes its result into the results folder (RESULTS/STEP.env, logs beside it); the
# report, docs/gpu.md (or --report-to FILE), is assembled from every result there, so a GPU
# session with short calls can run the steps in several calls (--steps), bring the results folder
# back, and assemble the report anywhere with --report-only. Fails loudly (exit 1) where a step
# needs a GPU and none is visible.
#
#   scripts/gpu_check.sh [--steps a,b,...] [--results DIR] [--report-to FILE]
#                                         build into build/ (or $TANDEM_BUILD_DIR), run the steps
#   scripts/gpu_check.sh --stage DIR      (any machine, no GPU needed) copy the built
#                                         test_cuda_kernels_*, test_cuda_model, test_cuda_engine
#                                         and tandem and the shared libraries a bare CUDA image
#                                         lacks (TBB,
#                                         cpp-httplib, ...) to DIR, and DIR.txz (xz-compressed,
#                                         about 5 MB, to carry to a GPU machine)
#   scripts/gpu_check.sh --prebuilt DIR|DIR.txz [--steps ...] [--results DIR2]
#                                         on a GPU machine that cannot install the build
#                                         dependencies: run the staged binaries of DIR (steps
#                                         kernels, model, sanitize, bench, decode, run; the model
#                                         test reads tests/fixtures of this checkout)
#   scripts/gpu_check.sh --report-only DIR [--report-to FILE]
#                                         (any machine) assemble the report from results in DIR
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${TANDEM_BUILD_DIR:-$root/build}"
mode=build
dir=""
steps=""
results=""
report_to="docs/gpu.md"
# The kernel tests: one program per group of kernels (tests/test_cuda_kernels_*.cpp).
kernel_tests=()
for src in tests/test_cuda_kernels_*.cpp; do kernel_tests+=("$(basename "$src" .cpp)"); done
while [[ $# -gt 0 ]]; do
  case "$1" in
    --stage) mode=stage; dir="${2:?--stage DIR}"; shift 2 ;;
    --prebuilt)
      mode=prebuilt
      dir="${2:?--prebuilt DIR}"
      if [[ $dir == *.txz ]]; then  # the archive --stage writes: unpacked beside it
        mkdir -p "${dir%.txz}"
        tar xJf "$dir" -C "${dir%.txz}"
        dir="${dir%.txz}"
      fi
      dir="$(cd "$dir" && pwd)"
      shift 2 ;;
    --report-only) mode=report; results="${2:?--report-only DIR}"; shift 2 ;;
    --steps) steps="${2:?--steps LIST}"; shift 2 ;;
    --results) results="${2:?--results DIR}"; shift 2 ;;
    --report-to) report_to="${2:?--report-to FILE}"; shift 2 ;;
    *) echo "usage: see the header of $0" >&2; exit 2 ;;
  esac
done

if [[ $mode == stage ]]; then
  staged=()
  for exe in "${kernel_tests[@]}" test_cuda_model test_cuda_engine tandem; do
    [[ -x $build/$exe ]] || { echo "gpu_check: $build/$exe is not built" >&2; exit 1; }
    staged+=("$build/$exe")
  done
  mkdir -p "$dir/lib"
  cp "${staged[@]}" "$dir/"
  # Every shared library outside glibc, the C++ runtime and CUDA (the GPU image has those).
  ldd "${staged[@]}" | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  # One compressed file as well: the device tool carries at most 64 MiB with the working tree.
  tar cJf "$dir.txz" -C "$dir" .
  echo "gpu_check: staged in $dir ($(du -sh "$dir" | cut -f1)) and $dir.txz ($(du -sh "$dir.txz" | cut -f1));"
  echo "gpu_check: on the GPU machine: scripts/gpu_check.sh --prebuilt $dir (or $dir.txz)"
  exit 0
fi

case $mode in
  build) all_steps=build,ctest,kernels,model,engine,sanitize,bench,decode,run
         results="${results:-$build/gpu-check}" ;;
  prebuilt) all_steps=kernels,model,engine,sanitize,bench,decode,run
            results="${results:-$dir/gpu-check}" ;;
  report) all_steps="" ;;
esac
steps="${steps:-$all_steps}"
mkdir -p "$results"
results="$(cd "$results" && pwd)"
IFS=, read -ra step_list <<<"$steps"
for s in "${step_list[@]}"; do
  [[ ",$all_steps," == *",$s,"* ]] || { echo "gpu_check: no step \"$s\" in $mode mode (steps: $all_steps)" >&2; exit 2; }
done

status=0
if [[ ${#step_list[@]} -gt 0 ]]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu_check: FAILED: no NVIDIA GPU is visible (nvidia-smi missing or finds none)." >&2
    echo "gpu_check: this script is the GPU acceptance run; on a CPU-only machine use scripts/test.sh" >&2
    exit 1
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1 >"$results/device.txt"
  git rev-parse --short HEAD >"$results/commit.txt" 2>/dev/null || echo unknown >"$results/commit.txt"
fi
if [[ $mode == prebuilt ]]; then
  bin_dir="$dir"
  model_bin="$dir/test_cuda_model"
  tandem_bin="$dir/tandem"
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TANDEM_SOURCE_DIR="$root"  # the test models and reference files of this checkout
else
  bin_dir="$build"
  model_bin="$build/test_cuda_model"
  tandem_bin="$build/tandem"
fi
kernel_bins=()
for t in "${kernel_tests[@]}"; do kernel_bins+=("$bin_dir/$t"); done

# A step's result: RESULTS/STEP.env holds result=... and summary=... (one line each).
record() {
  local step=$1 result=$2 summary=${3:-}
  printf 'result=%s\nsummary=%s\n' "$result" "$summary" >"$results/$step.env"
  [[ $result == FAILED* ]] && status=1
  echo "gpu_check: $step: $result${summary:+ ($summary)}"
}

# GPU test programs on their own, one after another, output in RESULTS/STEP.txt: each must exit 0
# (4 would mean "skipped: no device"). The summary has each program's result line, named when
# there are several.
run_gpu_test() {
  local step=$1 bin rc result=passed summary="" line
  shift
  : >"$results/$step.txt"
  for bin in "$@"; do
    set +e
    "$bin" 2>&1 | tee "$results/$step.part"
    rc=${PIPESTATUS[0]}
    set -e
    cat "$results/$step.part" >>"$results/$step.txt"
    line="$(grep -E "All tests passed|test cases" "$results/$step.part" | tail -1 || true)"
    [[ $# -gt 1 ]] && line="$(basename "$bin"): $line"
    summary+="${summary:+; }$line"
    if [[ $rc -ne 0 && $result == passed ]]; then
      case $rc in
        4) result="FAILED: skipped (the test saw no CUDA device)" ;;
        *) result="FAILED ($([[ $# -gt 1 ]] && echo "$(basename "$bin") ")exit $rc)" ;;
      esac
    fi
  done
  rm -f "$results/$step.part"
  record "$step" "$result" "$summary"
}

sanitizer="$(command -v compute-sanitizer || true)"
[[ -z $sanitizer && -x /usr/local/cuda/bin/compute-sanitizer ]] &&
  sanitizer=/usr/local/cuda/bin/compute-sanitizer

for step in "${step_list[@]}"; do
  case $step in
    build)
      if scripts/build.sh -DTANDEM_CUDA=ON >"$results/build.txt" 2>&1; then record build passed
      else record build "FAILED: $(tail -1 "$results/build.txt")"; fi ;;
    ctest)
      if ctest --test-dir "$build" --output-on-failure -j "$(nproc)" >"$results/ctest.txt" 2>&1; then
        result=passed
      else
        result=FAILED
      fi
      if grep -qE "test_cuda_[a-z_]+ .*Skipped" "$results/ctest.txt"; then
        result="FAILED (GPU tests skipped)"
      fi
      record ctest "$result" "$(grep -E "tests passed|tests failed" "$results/ctest.txt" | tail -1 || true)" ;;
    kernels) run_gpu_test kernels "${kernel_bins[@]}" ;;
    model) run_gpu_test model "$model_bin" ;;
    engine) run_gpu_test engine "${model_bin%test_cuda_model}test_cuda_engine" ;;
    sanitize)
      if [[ -z $sanitizer ]]; then
        record sanitize "not run (compute-sanitizer not found)"
        continue
      fi
      summary="" result=clean
      for tool in memcheck racecheck; do
        failed="" lines=""
        for bin in "${kernel_bins[@]}"; do
          out="$tool-$(basename "$bin").txt"
          if "$sanitizer" --tool "$tool" --error-exitcode 1 "$bin" >"$results/$out" 2>&1; then
            lines+="$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$results/$out" | tail -1)"$'\n'
          else
            failed+="${failed:+, }$out"
          fi
        done
        if [[ -z $failed ]]; then  # the programs' summary lines, each different one once
          summary+="$tool on the kernel tests: $(printf '%s' "$lines" | sort -u | paste -sd ' ' -); "
        else
          summary+="$tool on the kernel tests FAILED (see $failed); "
          result=FAILED
        fi
      done
      if "$sanitizer" --tool memcheck --error-exitcode 1 "$model_bin" >"$results/model-memcheck.txt" 2>&1; then
        summary+="memcheck on the model test: $(grep -E "ERROR SUMMARY" "$results/model-memcheck.txt" | tail -1)"
      else
        summary+="memcheck on the model test FAILED (see model-memcheck.txt)"
        result=FAILED
      fi
      record sanitize "$result" "$summary" ;;
    bench)
      if "$tandem_bin" bench-kernels >"$results/bench.jsonl" 2>"$results/bench.err"; then record bench ok
      else record bench "FAILED: $(tail -1 "$results/bench.err")"; fi ;;
    decode)
      # shellcheck disable=SC2206  # word splitting of the override is intended
      decode_args=(${TANDEM_GPU_DECODE_ARGS:---shape llama-3.1-8b --contexts 4096,16384,32768 --batches 1,8,max --gen 16})
      bench_models="${TANDEM_BENCH_DIR:-$([[ $mode == build ]] && echo "$build" || echo "$dir")/bench-models}"
      if TANDEM_BIN="$tandem_bin" TANDEM_BENCH_DIR="$bench_models" scripts/bench_hybrid.sh \
        --device cuda "${decode_args[@]}" --out "$results/decode.jsonl" --md "$results/decode.md" \
        2>"$results/decode.err"; then
        record decode ok
      else
        record decode "FAILED: $(tail -1 "$results/decode.err")"
      fi ;;
    run)
      run_text() {
        "$tandem_bin" run --model models/tandem-demo --prompt "Once upon a time" --max-tokens 32 \
          --temperature 0 --seed 1 --device "$1" 2>"$results/run-$1.err"
      }
      if run_text cuda >"$results/run-cuda.txt"; then
        run_text cpu >"$results/run-cpu.txt" || true
        if cmp -s "$results/run-cuda.txt" "$results/run-cpu.txt"; then
          record run "ok (same greedy text as --device cpu)"
        else
          record run "ok (greedy text differs from --device cpu, see below)"
        fi
      else
        record run "FAILED: $(tail -1 "$results/run-cuda.err")"
      fi ;;
  esac
done

# ---- The report, from every result in the folder ------------------------------------------------
res() {  # the result line of a step, or "not run"
  local f="$results/$1.env"
  if [[ -f $f ]]; then
    local r s
    r="$(sed -n 's/^result=//p' "$f")"
    s="$(sed -n 's/^summary=//p' "$f")"
    echo "$r${s:+ ($s)}"
  else
    echo "not run"
  fi
}
{
  echo "# CUDA backend on a GPU"
  echo
  echo "Written by \`scripts/gpu_check.sh\` on $(date -u +%Y-%m-%dT%H:%MZ) from the results in"
  echo "\`$(basename "$results")\`, measured at commit \`$(cat "$results/commit.txt" 2>/dev/null || echo unknown)\`."
  echo
  echo "- Device: $(cat "$results/device.txt" 2>/dev/null || echo unknown)"
  echo "- build: $(res build)"
  echo "- ctest: $(res ctest)"
  echo "- test_cuda_kernels_* (CPU-vs-CUDA parity): $(res kernels)"
  echo "- test_cuda_model (forward logits, CUDA vs CPU): $(res model)"
  echo "- test_cuda_engine (generations with GPU sampling, CUDA vs CPU): $(res engine)"
  echo "- compute-sanitizer: $(res sanitize)"
  echo "- tandem bench-kernels: $(res bench)"
  echo "- scripts/bench_hybrid.sh (decode, hybrid vs all-on-GPU): $(res decode)"
  echo "- tandem run --device cuda (models/tandem-demo, greedy): $(res run)"
  if [[ -s $results/bench.jsonl ]]; then
    echo
    echo "## Kernel bandwidth"
    echo
    echo "Bytes are the fewest each kernel must move (merge: read o_a, o_b, both lse, write o_a and"
    echo "lse_a; attention: read q, K, V, write o and lse), against the device-to-device copy"
    echo "bandwidth measured by the same run (bytes read + written)."
    echo
    if command -v python3 >/dev/null; then
      python3 - "$results/bench.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    if r["bench"] == "d2d_copy":
        print(f"Device-to-device copy: {r['gbs']:.0f} GB/s ({r['device']}, sm {r['sm']}).\n")
print("| kernel | shape | bytes | µs | GB/s | of copy |")
print("|---|---|---:|---:|---:|---:|")
for r in rows:
    if r["bench"] == "merge":
        shape = f"n={r['n']} heads={r['heads']} d={r['head_dim']}, b in {r['b_memory']}"
    elif r["bench"] == "attention":
        shape = (f"n={r['n']} Hq={r['n_head_q']} Hkv={r['n_head_kv']} d={r['head_dim']} "
                 f"T={r['keys']} {r['kv']} KV")
    else:
        continue
    print(f"| {r['bench']} | {shape} | {r['bytes']:.3g} | {r['us']:.1f} | {r['gbs']:.0f} | "
          f"{r['of_copy']:.2f} |")
PY
    fi
    echo
    echo "Raw benchmark output:"
    echo
    echo '```json'
    cat "$results/bench.jsonl"
    echo '```'
  fi
  if [[ -s $results/decode.md ]]; then
    echo
    echo "## Decode: hybrid store vs all KV on the GPU"
    echo
    cat "$results/decode.md"
    echo
    echo "Raw decode benchmark output:"
    echo
    echo '```json'
    cat "$results/decode.jsonl"
    echo '```'
  fi
  for log in memcheck racecheck model-memcheck; do
    if [[ -f $results/sanitize.env ]] && grep -q "see $log.txt" "$results/sanitize.env"; then
      echo
      echo "## $log output (last 60 lines)"
      echo
      echo '```'
      tail -60 "$results/$log.txt"
      echo '```'
    fi
  done
  if [[ "$(res run)" == *differs* ]]; then
    echo
    echo "## Greedy text, --device cuda then --device cpu"
    echo
    echo '```'
    cat "$results/run-cuda.txt"
    echo
    cat "$results/run-cpu.txt"
    echo '```'
  fi
  for step in kernels model; do
    if [[ "$(res $step)" == FAILED* && -f $results/$step.txt ]]; then
      echo
      echo "## $step test output (last 60 lines)"
      echo
      echo '```'
      tail -60 "$results/$step.txt"
      echo '```'
    fi
  done
} >"$report_to"

echo "gpu_check: wrote $report_to (results in $results)"
if [[ $status -ne 0 ]]; then
  echo "gpu_check: FAILED (see $report_to)" >&2
fi
exit $status
