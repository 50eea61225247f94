#!/usr/bin/env python3
"""GPU cost model of Tandem's decode step (writes docs/gpu-model.md). A model, not a measurement.

Inputs: per-step counters of the CUDA path (launches, bytes each kernel reads and writes, bytes
over PCIe, host synchronisations, cuBLAS work) for small configurations of a Llama-3-8B-shaped
model, either measured by the SIMT emulator (`build-emu/tandem bench-decode --device cuda`, key
"emulator" of each JSON line) or derived here from the launch code (`--write-analytic`); and a
CPU attention measurement (`build/tandem bench-cpu-attn`). The counters are fitted exactly as
linear functions of layers, sequences, context tokens and vocabulary (checked on held-out runs),
evaluated at 32 layers / vocab 128256 / contexts 4K-32K, and turned into a step time with
published device figures and stated assumptions.

  python3 scripts/gpu_model.py --counters DIR --cpu-attn FILE --out docs/gpu-model.md
  python3 scripts/gpu_model.py --write-analytic DIR          # code-derived counters, same runs
  python3 scripts/gpu_model.py --collect [--emu-bin B] [--cpu-bin B] [--counters-out DIR]
                                         [--cpu-attn-out FILE]   # runs the small configurations

Standard library only. Deterministic: the same inputs give the same document.

This file is the command line; the model lives in the package scripts/gpu_model/ beside it
(parameters, analytic counters, runs and their collection, the fit, host attention, the time
model, the document). Python puts this file's directory first on sys.path, and a package
directory wins over a same-named module there, so `gpu_model` below is the package.
"""
import argparse
import glob
import json
import os
import sys

from gpu_model.collect import collect
from gpu_model.cpu_attn import CpuAttn
from gpu_model.fit import Fit
from gpu_model.params import DEFAULTS
from gpu_model.report import report
from gpu_model.runs import write_analytic
from gpu_model.timing import Model


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--counters", help="directory (or file) of counters JSON lines")
    ap.add_argument("--cpu-attn", help="bench-cpu-attn JSON lines (with a 'collected' head)")
    ap.add_argument("--out", help="markdown to write (default: stdout)")
    ap.add_argument("--write-analytic", metavar="DIR", help="write code-derived counters")
    ap.add_argument("--collect", action="store_true", help="run the small configurations")
    ap.add_argument("--emu-bin")
    ap.add_argument("--cpu-bin")
    ap.add_argument("--models-dir")
    ap.add_argument("--counters-out", default="docs/gpu-model/emulator")
    ap.add_argument("--cpu-attn-out", default="docs/gpu-model/cpu-attn.jsonl")
    ap.add_argument("--skip-emulator", action="store_true")
    ap.add_argument("--skip-cpu", action="store_true")
    ap.add_argument("--jobs", type=int, default=2, help="emulator processes at once")
    ap.add_argument("--time-only", action="store_true", help=argparse.SUPPRESS)
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=type(v), default=v)
    args = ap.parse_args()
    if args.write_analytic:
        write_analytic(args.write_analytic)
        return
    if args.collect:
        collect(args)
        return
    if not args.counters or not args.cpu_attn:
        ap.error("--counters and --cpu-attn are required (or --collect / --write-analytic)")
    files = [args.counters] if os.path.isfile(args.counters) else \
        sorted(glob.glob(os.path.join(args.counters, "*.jsonl")))
    runs = [json.loads(line) for f in files for line in open(f) if line.strip()]
    if not runs:
        sys.exit("gpu_model: no counters in %s" % args.counters)
    p = {k: getattr(args, k) for k in DEFAULTS}
    fit = Fit(runs)
    cpu = CpuAttn(args.cpu_attn, p["cpu_cores"], p["cpu_bw_cap_gbs"], p["cpu_call_us"])
    model = Model(fit, cpu, p)
    text = report(model, fit, cpu, p, args.counters, args.cpu_attn)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        print("gpu_model: wrote %s" % args.out, file=sys.stderr)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
