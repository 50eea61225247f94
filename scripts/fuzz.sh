#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz/ (docs/fuzzing.md).
#   scripts/fuzz.sh TARGET SECONDS   build if needed, then fuzz TARGET (e.g. jinja) for SECONDS
#   scripts/fuzz.sh all SECONDS      every target, SECONDS each, one after the other
#   scripts/fuzz.sh --list           the target names
#   scripts/fuzz.sh --cpu TARGET|all SECONDS
#                                    SECONDS of the fuzzer's CPU time instead of wall time (on a
#                                    shared or niced machine wall time says little of the work done)
# Builds with clang into build-fuzz/ (TANDEM_BUILD_DIR overrides; an existing build directory
# configured with TANDEM_FUZZ=ON, e.g. CI's sanitizer build, is reused as is). The seed corpus
# tests/fuzz/corpus/TARGET/ is copied to a scratch corpus (TANDEM_FUZZ_WORK, default
# /tmp/tandem-fuzz/TARGET, kept between runs so coverage accumulates); the repository is never
# written. Exit status: 0 when the time ran out without a finding; otherwise non-zero, with the
# reproducer path (crash / leak / timeout / OOM input) printed: rerun it with
# build-fuzz/tests/fuzz/fuzz_TARGET PATH. TANDEM_FUZZ_TIMEOUT (default 10) is the seconds one input
# may take: wall time, so a fuzzer stopped (SIGSTOP) or starved for longer reports a timeout
# that replays in milliseconds; raise it for long runs on a shared machine.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TANDEM_BUILD_DIR:-$root/build-fuzz}"
targets() { (cd "$root/tests/fuzz" && ls fuzz_*.cpp | sed 's/^fuzz_//; s/\.cpp$//'); }

# Longest input per target: large enough for real request bodies, templates and headers, small
# enough that a run makes many executions per second.
max_len_of() {
  case "$1" in
    jinja | chat_template | tokenizer_json) echo 16384 ;;
    tokenizer) echo 4096 ;;
    *) echo 8192 ;;
  esac
}

usage() { sed -n '2,17p' "$0" >&2; exit 2; }

if [[ "${1:-}" == "--list" ]]; then targets; exit 0; fi
cpu_time=0
if [[ "${1:-}" == "--cpu" ]]; then cpu_time=1; shift; fi
[[ $# -eq 2 ]] || usage
target="$1"
seconds="$2"
[[ "$seconds" =~ ^[0-9]+$ ]] || usage
if [[ "$target" != all ]] && ! targets | grep -qx "$target"; then
  echo "unknown fuzz target '$target'; targets: $(targets | tr '\n' ' ')" >&2
  exit 2
fi

# Build (cmake only rebuilds what changed). A fresh directory is configured with clang.
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DTANDEM_CUDA=OFF -DTANDEM_TESTS=OFF -DTANDEM_FUZZ=ON >/dev/null
elif ! grep -q '^TANDEM_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "$build is not configured with -DTANDEM_FUZZ=ON" >&2
  exit 2
fi
if [[ "$target" == all ]]; then names=$(targets); else names="$target"; fi
bins=()
for t in $names; do bins+=("fuzz_$t"); done
# TANDEM_FUZZ_NO_BUILD=1: the caller has built the targets (scripts/sanitize.sh, which runs
# several fuzzers at once: concurrent builds of one directory would race).
if [[ "${TANDEM_FUZZ_NO_BUILD:-0}" != 1 ]]; then
  cmake --build "$build" -j "$(nproc)" --target "${bins[@]}"
fi

run_one() {
  local t="$1"
  local bin="$build/tests/fuzz/fuzz_$t"
  local work="${TANDEM_FUZZ_WORK:-/tmp/tandem-fuzz}/$t"
  local artifacts="$work/findings/"
  mkdir -p "$work/corpus" "$artifacts"
  cp -n "$root/tests/fuzz/corpus/$t/"* "$work/corpus/" 2>/dev/null || true
  local dict=()
  if [[ -f "$root/tests/fuzz/dict/$t.dict" ]]; then dict=(-dict="$root/tests/fuzz/dict/$t.dict"); fi
  local log="$work/last-run.log"
  echo "== fuzz_$t for ${seconds}s (corpus $work/corpus, log $log)"
  local status=0
  # -timeout: one input may take 10 s (the tokenizer's regex budget is 2 s per text);
  # -rss_limit_mb/-malloc_limit_mb: one allocation or the process past 2 GB is a finding.
  local limit=(-max_total_time="$seconds")
  if [[ $cpu_time -eq 1 ]]; then limit=(); fi
  local t0=$SECONDS
  "$bin" "$work/corpus" "${dict[@]}" "${limit[@]}" -max_len="$(max_len_of "$t")" \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout="${TANDEM_FUZZ_TIMEOUT:-10}" -print_final_stats=1 \
    -artifact_prefix="$artifacts" >"$log" 2>&1 &
  local pid=$!
  if [[ $cpu_time -eq 1 ]]; then
    # utime + stime of the fuzzer (fields 14 and 15 of /proc/PID/stat, in clock ticks); SIGINT
    # makes libFuzzer print its final stats and exit 0 (72 on some versions: both mean "stopped").
    local hz cpu=0
    hz=$(getconf CLK_TCK)
    while kill -0 "$pid" 2>/dev/null; do
      cpu=$(awk -v hz="$hz" '{sub(/^.*\) /, ""); print int(($12 + $13) / hz)}' \
        "/proc/$pid/stat" 2>/dev/null || echo "$cpu")
      if ((cpu >= seconds)); then kill -INT "$pid" 2>/dev/null || true; break; fi
      sleep 5
    done
  fi
  wait "$pid" || status=$?
  if [[ $cpu_time -eq 1 && $status -eq 72 ]]; then status=0; fi
  if [[ $cpu_time -eq 1 ]]; then
    echo "   wall $((SECONDS - t0)) s, cpu ${cpu} s"
  else
    echo "   wall $((SECONDS - t0)) s"
  fi
  grep -E '^#[0-9]+[[:space:]]+DONE|^stat::number_of_executed_units|^stat::peak_rss_mb' "$log" || true
  echo "   corpus: $(ls "$work/corpus" | wc -l) files"
  if [[ $status -ne 0 ]]; then
    grep -E 'ERROR: |SUMMARY: |runtime error|invariant broken' "$log" | head -5 >&2 || true
    local repro
    repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
    echo "FINDING in fuzz_$t (exit $status): reproducer ${repro:-<none written, see $log>}" >&2
    return 1
  fi
}

failed=0
for t in $names; do run_one "$t" || failed=1; done
exit $failed
