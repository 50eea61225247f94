#!/usr/bin/env bash
# The sanitizer stage of scripts/test.sh (CI runs it there); also runs alone.
#   scripts/sanitize.sh [asan] [tsan] [fuzz]     (default: all three)
# asan  clang, address + undefined-behaviour sanitizers (TANDEM_SANITIZE) in build-asan/: the unit
#       and server tests, every error fatal (halt_on_error), leaks reported at exit.
# fuzz  in the same build (TANDEM_FUZZ: the libFuzzer targets of tests/fuzz/ share it), each
#       target for TANDEM_FUZZ_SECONDS (default 15) on its seed corpus (scripts/fuzz.sh).
# tsan  g++, thread sanitizer (TANDEM_TSAN) in build-tsan/: the concurrent parts — the engine loop
#       with cancelling and shutting down streams, host attention workers, the scheduler, the HTTP
#       server and its connection pool. oneTBB's fork/join edges are made visible to the sanitizer
#       by kernels/cpu/parallel.h (Debian's libtbb is not instrumented).
# The slow end-to-end model runs (test_device_placement: bit equality of two backends over many
# store configurations) are left to the plain build, where they run in full. Under the thread
# sanitizer a model step is 20-50x slower, so it runs the tests whose point is concurrency and
# that stay within minutes there: the engine's loop, cancellation and shutdown (test_engine),
# continuous batching with streams joining and leaving (test_engine_batching, about 70 s),
# host-attention batches, tickets and jobs (test_host_batch), the scheduler, the HTTP connection
# layer (test_server_limits), streamed serving end to end (test_server_e2e_serving, about 70 s)
# and value offload's scoring on the workers beside the engine's stores (test_value_offload_model,
# about 15 s).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
stages=("$@")
[[ ${#stages[@]} -gt 0 ]] || stages=(asan fuzz tsan)
want() { [[ " ${stages[*]} " == *" $1 "* ]]; }

# Tests each sanitizer runs (ctest names; the GPU tests skip without a device either way). The load
# client's tests (test_bench_client, test_bench_soak) are left out: they assert on timings, which
# the sanitizers' slowdown breaks.
asan_tests="test_buffer test_catch_main test_chat_template test_config_checkpoints
  test_config_layouts test_cpu_attn test_cpu_ops_attention test_cpu_ops_dense test_engine
  test_engine_batching test_cpu_ops_gemm test_similarity_reuse test_device_budget test_value_offload
  test_value_offload_model test_forward_parity test_host_batch
  test_hybrid_kv test_model_errors
  test_openai_codec test_options test_sampler test_scheduler test_selection test_server_limits
  test_server_e2e_errors test_server_e2e_serving test_tokenizer test_utf8 test_hostile_input
  test_trained_models"
tsan_tests="test_engine test_engine_batching test_host_batch test_scheduler test_server_limits
  test_server_e2e_serving test_value_offload_model"

# Only tests that exist in this checkout (a list above may name one added later).
existing() {
  local out=()
  for t in $1; do [[ -f tests/$t.cpp ]] && out+=("$t"); done
  echo "${out[*]}"
}
regex() { echo "^($(echo "$1" | tr ' ' '|'))\$"; }

export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:abort_on_error=0:strict_string_checks=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$root/tests/tsan.supp"

if want asan || want fuzz; then
  start=$SECONDS
  asan="${TANDEM_ASAN_BUILD_DIR:-$root/build-asan}"
  tests=$(existing "$asan_tests")
  targets="tandem"
  want asan && targets+=" $tests"
  want fuzz && targets+=" fuzz"
  # Warnings are policed by the main g++ build (-Werror under CI); these builds check at run time.
  CC=clang CXX=clang++ TANDEM_BUILD_DIR="$asan" TANDEM_BUILD_TARGET="$targets" \
    scripts/build.sh -DTANDEM_CUDA=OFF -DTANDEM_SANITIZE=ON -DTANDEM_FUZZ=ON -DTANDEM_WERROR=OFF
  if want asan; then
    ctest --test-dir "$asan" -R "$(regex "$tests")" --output-on-failure -j "$(nproc)"
  fi
  if want fuzz; then
    # One fuzzer per core at a time (a libFuzzer run uses one), each for its full time; the
    # results are printed in target order once all have run.
    fuzz_one() {
      local rc=0
      TANDEM_BUILD_DIR="$asan" TANDEM_FUZZ_WORK="$(mktemp -d)" TANDEM_FUZZ_NO_BUILD=1 \
        scripts/fuzz.sh "$1" "${TANDEM_FUZZ_SECONDS:-15}" >/tmp/tandem-fuzz-$1.log 2>&1 || rc=$?
      echo "$rc" >/tmp/tandem-fuzz-$1.rc
    }
    fuzz_targets=$(scripts/fuzz.sh --list)
    cores=$(nproc)
    running=0
    for t in $fuzz_targets; do
      if ((running >= cores)); then
        wait -n || true
        running=$((running - 1))
      fi
      rm -f /tmp/tandem-fuzz-$t.rc  # a run that dies before writing its own must not pass
      fuzz_one "$t" &
      running=$((running + 1))
    done
    wait
    for t in $fuzz_targets; do
      if [[ "$(cat /tmp/tandem-fuzz-$t.rc 2>/dev/null)" != 0 ]]; then
        cat /tmp/tandem-fuzz-$t.log >&2
        echo "fuzz target $t failed" >&2
        exit 1
      fi
      echo "fuzz $t: $(grep -Eo '#[0-9]+[[:space:]]+DONE.*' /tmp/tandem-fuzz-$t.log | tail -1)"
    done
  fi
  echo "address + undefined sanitizers: $((SECONDS - start)) s (build, tests, fuzzing)"
fi

if want tsan; then
  start=$SECONDS
  tsan="${TANDEM_TSAN_BUILD_DIR:-$root/build-tsan}"
  tests=$(existing "$tsan_tests")
  TANDEM_BUILD_DIR="$tsan" TANDEM_BUILD_TARGET="tandem $tests" \
    scripts/build.sh -DTANDEM_CUDA=OFF -DTANDEM_TSAN=ON -DTANDEM_WERROR=OFF
  ctest --test-dir "$tsan" -R "$(regex "$tests")" --output-on-failure -j "$(nproc)"
  echo "thread sanitizer: $((SECONDS - start)) s (build and tests)"
fi
