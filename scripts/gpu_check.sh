#!/usr/bin/env bash
# The GPU acceptance run of the CUDA backend, on a machine with an NVIDIA GPU: build (CUDA on),
# every test (the GPU parity tests must run, not skip), the model on the GPU against the CPU
# (test_cuda_model), compute-sanitizer memcheck and racecheck on the kernel tests and memcheck on
# the model test, `tandem bench-kernels`, the decode benchmark of the hybrid store against all KV
# on the GPU (scripts/bench_hybrid.sh on a random Llama-3.1-8B-shaped model, contexts 4K-32K;
# skipped with TANDEM_GPU_DECODE_BENCH=0, its arguments replaced by TANDEM_GPU_DECODE_ARGS), and
# docs/gpu.md with the device and the figures. Fails loudly (exit 1) where no GPU is visible.
#
#   scripts/gpu_check.sh                  build into build/ (or $TANDEM_BUILD_DIR) and run all
#   scripts/gpu_check.sh --stage DIR      (any machine, no GPU needed) copy the built
#                                         test_cuda_kernels, test_cuda_model and tandem and the
#                                         shared libraries
#                                         a bare CUDA image lacks (TBB, cpp-httplib, ...) to DIR
#   scripts/gpu_check.sh --prebuilt DIR   on a GPU machine that cannot install the build
#                                         dependencies: run the staged binaries of DIR (the
#                                         kernel and model tests, sanitizers and benchmark, the
#                                         model test reading tests/fixtures of this checkout; the
#                                         rest of the suite needs the build tree and is not run)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
build="${TANDEM_BUILD_DIR:-$root/build}"
mode=build
dir=""
case "${1:-}" in
  --stage) mode=stage; dir="${2:?--stage DIR}" ;;
  --prebuilt) mode=prebuilt; dir="$(cd "${2:?--prebuilt DIR}" && pwd)" ;;
  "") ;;
  *) echo "usage: $0 [--stage DIR | --prebuilt DIR]" >&2; exit 2 ;;
esac

if [[ $mode == stage ]]; then
  for exe in test_cuda_kernels test_cuda_model tandem; do
    [[ -x $build/$exe ]] || { echo "gpu_check: $build/$exe is not built" >&2; exit 1; }
  done
  mkdir -p "$dir/lib"
  cp "$build/test_cuda_kernels" "$build/test_cuda_model" "$build/tandem" "$dir/"
  # Every shared library outside glibc, the C++ runtime and CUDA (the GPU image has those).
  ldd "$build/test_cuda_kernels" "$build/test_cuda_model" "$build/tandem" | awk '$3 ~ /^\// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  echo "gpu_check: staged in $dir ($(du -sh "$dir" | cut -f1)); run: scripts/gpu_check.sh --prebuilt $dir"
  exit 0
fi

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: FAILED: no NVIDIA GPU is visible (nvidia-smi missing or finds none)." >&2
  echo "gpu_check: this script is the GPU acceptance run; on a CPU-only machine use scripts/test.sh" >&2
  exit 1
fi

log="$(mktemp -d /tmp/tandem-gpu-check.XXXXXX)"
status=0
if [[ $mode == build ]]; then
  scripts/build.sh -DTANDEM_CUDA=ON
  tests_bin="$build/test_cuda_kernels"
  model_bin="$build/test_cuda_model"
  tandem_bin="$build/tandem"
  if ctest --test-dir "$build" --output-on-failure -j "$(nproc)" 2>&1 | tee "$log/ctest.txt"; then
    ctest_result="passed"
  else
    ctest_result="FAILED"
    status=1
  fi
  if grep -qE "test_cuda_(kernels|model) .*Skipped" "$log/ctest.txt"; then
    echo "gpu_check: FAILED: a GPU test was skipped on a machine with a GPU" >&2
    ctest_result="FAILED (GPU tests skipped)"
    status=1
  fi
  ctest_summary="$(grep -E "tests passed|tests failed" "$log/ctest.txt" | tail -1 || true)"
else
  tests_bin="$dir/test_cuda_kernels"
  model_bin="$dir/test_cuda_model"
  tandem_bin="$dir/tandem"
  export LD_LIBRARY_PATH="$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export TANDEM_SOURCE_DIR="$root"  # the test models and reference files of this checkout
  ctest_result="not run (prebuilt binaries: test_cuda_kernels and test_cuda_model only)"
  ctest_summary=""
fi

# A GPU test program on its own, output in $log/NAME.txt: exit 0 required (4 would mean "skipped:
# no device"). Sets ${NAME}_result and ${NAME}_summary; a failure sets status=1.
run_gpu_test() {
  local name=$1 bin=$2 rc result
  set +e
  "$bin" 2>&1 | tee "$log/$name.txt"
  rc=${PIPESTATUS[0]}
  set -e
  case $rc in
    0) result="passed" ;;
    4) result="FAILED: skipped (the test saw no CUDA device)"; status=1 ;;
    *) result="FAILED (exit $rc)"; status=1 ;;
  esac
  printf -v "${name}_result" '%s' "$result"
  printf -v "${name}_summary" '%s' "$(grep -E "All tests passed|test cases" "$log/$name.txt" | tail -1 || true)"
}

run_gpu_test kernels "$tests_bin"  # the kernels against their CPU references
run_gpu_test model "$model_bin"    # the model on the GPU against the CPU backend (end-to-end logits)

# compute-sanitizer on the kernel tests.
sanitizer="$(command -v compute-sanitizer || true)"
[[ -z $sanitizer && -x /usr/local/cuda/bin/compute-sanitizer ]] &&
  sanitizer=/usr/local/cuda/bin/compute-sanitizer
declare -A san_result
for tool in memcheck racecheck; do
  if [[ -z $sanitizer ]]; then
    san_result[$tool]="not run (compute-sanitizer not found)"
    continue
  fi
  if "$sanitizer" --tool "$tool" --error-exitcode 1 "$tests_bin" >"$log/$tool.txt" 2>&1; then
    san_result[$tool]="clean ($(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log/$tool.txt" | tail -1))"
  else
    san_result[$tool]="FAILED (see below)"
    status=1
  fi
done
if [[ -z $sanitizer ]]; then
  san_result[model]="not run (compute-sanitizer not found)"
elif "$sanitizer" --tool memcheck --error-exitcode 1 "$model_bin" >"$log/model-memcheck.txt" 2>&1; then
  san_result[model]="clean ($(grep -E "ERROR SUMMARY" "$log/model-memcheck.txt" | tail -1))"
else
  san_result[model]="FAILED (see below)"
  status=1
fi

# Kernel benchmark (validated against the CPU backend before timing).
if "$tandem_bin" bench-kernels >"$log/bench.jsonl" 2>"$log/bench.err"; then
  bench_result="ok"
else
  bench_result="FAILED: $(tail -1 "$log/bench.err")"
  status=1
fi

# Decode throughput, hybrid vs all KV on the GPU, and the GPU's wait for the CPU (issue 7 (b), (c)).
decode_md="$log/decode.md"
if [[ ${TANDEM_GPU_DECODE_BENCH:-1} == 0 ]]; then
  decode_result="not run (TANDEM_GPU_DECODE_BENCH=0)"
else
  # shellcheck disable=SC2206  # word splitting of the override is intended
  decode_args=(${TANDEM_GPU_DECODE_ARGS:---shape llama-3.1-8b --contexts 4096,16384,32768 --batches 1,8,max --gen 16})
  bench_models="${TANDEM_BENCH_DIR:-$([[ $mode == build ]] && echo "$build" || echo "$dir")/bench-models}"
  if TANDEM_BIN="$tandem_bin" TANDEM_BENCH_DIR="$bench_models" scripts/bench_hybrid.sh \
    --device cuda "${decode_args[@]}" --out "$log/decode.jsonl" --md "$decode_md" 2>"$log/decode.err"; then
    decode_result="ok"
  else
    decode_result="FAILED: $(tail -1 "$log/decode.err")"
    status=1
  fi
fi

# The binary end to end on the GPU: greedy text of the bundled model, --device cuda against
# --device cpu (exit 0 required; the texts are recorded, equal unless a near-tie flips a token).
run_text() {
  "$tandem_bin" run --model models/tandem-demo --prompt "Once upon a time" --max-tokens 32 \
    --temperature 0 --seed 1 --device "$1" 2>"$log/run-$1.err"
}
if text_cuda="$(run_text cuda)"; then
  text_cpu="$(run_text cpu || true)"
  if [[ $text_cuda == "$text_cpu" ]]; then run_result="ok (same greedy text as --device cpu)"
  else run_result="ok (greedy text differs from --device cpu, see below)"; fi
else
  run_result="FAILED: $(tail -1 "$log/run-cuda.err")"
  status=1
fi

device="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)"
{
  echo "# CUDA backend on a GPU"
  echo
  echo "Written by \`scripts/gpu_check.sh\` on $(date -u +%Y-%m-%dT%H:%MZ) at commit"
  echo "\`$(git rev-parse --short HEAD 2>/dev/null || echo unknown)\`."
  echo
  echo "- Device: $device"
  echo "- ctest: $ctest_result${ctest_summary:+ ($ctest_summary)}"
  echo "- test_cuda_kernels (CPU-vs-CUDA parity): $kernels_result${kernels_summary:+ ($kernels_summary)}"
  echo "- compute-sanitizer memcheck: ${san_result[memcheck]}"
  echo "- compute-sanitizer racecheck: ${san_result[racecheck]}"
  echo "- test_cuda_model (forward logits, CUDA vs CPU): $model_result${model_summary:+ ($model_summary)}"
  echo "- compute-sanitizer memcheck on test_cuda_model: ${san_result[model]}"
  echo "- tandem bench-kernels: $bench_result"
  echo "- scripts/bench_hybrid.sh (decode, hybrid vs all-on-GPU): $decode_result"
  echo "- tandem run --device cuda (models/tandem-demo, greedy): $run_result"
  echo
  echo "## Kernel bandwidth"
  echo
  echo "Bytes are the fewest each kernel must move (merge: read o_a, o_b, both lse, write o_a and"
  echo "lse_a; attention: read q, K, V, write o and lse), against the device-to-device copy"
  echo "bandwidth measured by the same run (bytes read + written)."
  echo
  if command -v python3 >/dev/null && [[ -s $log/bench.jsonl ]]; then
    python3 - "$log/bench.jsonl" <<'EOF'
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
EOF
  fi
  echo
  echo "Raw benchmark output:"
  echo
  echo '```json'
  cat "$log/bench.jsonl"
  echo '```'
  if [[ -s $decode_md ]]; then
    echo
    echo "## Decode: hybrid store vs all KV on the GPU"
    echo
    cat "$decode_md"
    echo
    echo "Raw decode benchmark output:"
    echo
    echo '```json'
    cat "$log/decode.jsonl"
    echo '```'
  fi
  for tool in memcheck racecheck model-memcheck; do
    key=$tool
    [[ $tool == model-memcheck ]] && key=model
    if [[ ${san_result[$key]} == FAILED* ]]; then
      echo
      echo "## $tool output (last 60 lines)"
      echo
      echo '```'
      tail -60 "$log/$tool.txt"
      echo '```'
    fi
  done
  if [[ $run_result == *differs* ]]; then
    echo
    echo "## Greedy text, --device cuda then --device cpu"
    echo
    echo '```'
    echo "$text_cuda"
    echo "$text_cpu"
    echo '```'
  fi
  if [[ $model_result == FAILED* ]]; then
    echo
    echo "## test_cuda_model output (last 60 lines)"
    echo
    echo '```'
    tail -60 "$log/model.txt"
    echo '```'
  fi
} >docs/gpu.md

echo "gpu_check: wrote docs/gpu.md (logs in $log)"
if [[ $status -ne 0 ]]; then
  echo "gpu_check: FAILED (see docs/gpu.md)" >&2
fi
exit $status
