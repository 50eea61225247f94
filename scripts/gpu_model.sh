#!/usr/bin/env bash
# The GPU cost model (docs/gpu-model.md; not a test, not a measurement): collects its inputs and
# writes the document with scripts/gpu_model.py.
#   - counters: with the SIMT emulator build (build-emu/tandem, -DTANDEM_CUDA=EMULATE), the small
#     bench-decode runs of the fit (docs/gpu-model/emulator/counters.jsonl, a few minutes);
#     without it, the analytic counters derived from the launch code
#     (docs/gpu-model/analytic/counters.jsonl);
#   - host attention: build/tandem bench-cpu-attn (docs/gpu-model/cpu-attn.jsonl, ~1 minute).
#
#   scripts/gpu_model.sh [--analytic] [--no-cpu] [-- extra gpu_model.py flags, e.g. --cpu-cores 64]
#     --analytic  use the analytic counters even when the emulator build exists
#     --no-cpu    keep docs/gpu-model/cpu-attn.jsonl (no new host attention measurement)
# The "Before / after the step plan" section compares with docs/gpu-model/before-c66c674 (the
# document and emulator counters before the batch step; gpu_model.py --before-dir).
# TANDEM_EMU_BIN and TANDEM_BIN override build-emu/tandem and build/tandem.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
emu="${TANDEM_EMU_BIN:-build-emu/tandem}"
bin="${TANDEM_BIN:-build/tandem}"
analytic=0
cpu=1
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --analytic) analytic=1; shift ;;
    --no-cpu) cpu=0; shift ;;
    --) shift; extra=("$@"); break ;;
    *) echo "gpu_model.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [[ $analytic == 0 && -x $emu ]]; then
  counters=docs/gpu-model/emulator
  python3 scripts/gpu_model.py --collect --skip-cpu --emu-bin "$emu" --counters-out "$counters"
else
  counters=docs/gpu-model/analytic
  python3 scripts/gpu_model.py --write-analytic "$counters"
fi
if [[ $cpu == 1 ]]; then
  [[ -x $bin ]] || TANDEM_BUILD_TARGET=tandem scripts/build.sh >&2
  python3 scripts/gpu_model.py --collect --skip-emulator --cpu-bin "$bin" \
    --cpu-attn-out docs/gpu-model/cpu-attn.jsonl
fi
python3 scripts/gpu_model.py --counters "$counters" --cpu-attn docs/gpu-model/cpu-attn.jsonl \
  --out docs/gpu-model.md "${extra[@]}"
