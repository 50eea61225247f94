#!/usr/bin/env bash
# Configures and builds Tandem into build/ (or $TANDEM_BUILD_DIR). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DTANDEM_CUDA=OFF -DTANDEM_SANITIZE=ON.
# With CI set, warnings are errors. TANDEM_BUILD_TARGET builds only these targets (e.g. "tandem"
# or "tandem test_cuda_model", space-separated).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${TANDEM_BUILD_DIR:-$root/build}"
flags=()
if [[ -n "${CI:-}" ]]; then flags+=(-DTANDEM_WERROR=ON); fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-Release}" "${flags[@]}" "$@" >/dev/null
target=()
if [[ -n "${TANDEM_BUILD_TARGET:-}" ]]; then read -r -a names <<<"$TANDEM_BUILD_TARGET" && target=(--target "${names[@]}"); fi
cmake --build "$build" -j "$(nproc)" "${target[@]}"
