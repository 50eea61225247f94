#!/usr/bin/env bash
# Prints tests/logit_digest.cpp's digests of a build: every test model x policy x start mode x
# window, one sequence and a batch of three; two builds' outputs are equal line for line when
# their logits are bit-identical. The program is compiled from this tree against BUILD's
# libtandem_core.a and headers of BUILD's own source tree, so an older build can be compared.
#
#   scripts/logit_digest.sh BUILD_DIR [cpu|cuda] > digests.txt
#   e.g. an emulated build:  scripts/logit_digest.sh build-emu cuda
# Needs ../shared/models (the reference models) beside BUILD's source tree.
set -euo pipefail
[[ $# -ge 1 ]] || { sed -n '2,9p' "$0" >&2; exit 2; }
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)"
device="${2:-cpu}"
src="$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")"
defs=(-DTANDEM_SOURCE_DIR="\"$src\"")
if grep -q '^TANDEM_CUDA:STRING=EMULATE' "$build/CMakeCache.txt"; then
  defs+=(-DTANDEM_CUDA_EMULATE=1 -DTANDEM_HAVE_CUDA=1)
fi
libs=(-ltbb -lspdlog -lfmt -lpcre2-32 -lcpp-httplib)
[[ -e /usr/lib/x86_64-linux-gnu/libboost_context.so ]] && libs+=(-lboost_context)
bin="$(mktemp -d)/logit_digest"
trap 'rm -rf "$(dirname "$bin")"' EXIT
c++ -O2 -std=c++20 -mavx2 -mfma -mf16c -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DFMT_SHARED \
  -DSPDLOG_SHARED_LIB "${defs[@]}" -I"$src" "$here/tests/logit_digest.cpp" -o "$bin" \
  "$build/libtandem_core.a" "${libs[@]}"
cd "$src" && "$bin" "$device"
