"""The small runs the fit needs (one bench-decode process per (mode, layers, vocabulary)),
and the analytic counters of the same runs (`--write-analytic`), in the emulator's schema.
"""
import json
import os
import sys

from .analytic import analytic_run, window_of
from .params import (EMU_SHAPE, FIT_CTX, FIT_GEN, FIT_VOCAB, HELD_CTX, MODES, REGIMES,
                     WINDOW_FRAC)


def plan():
    """The processes: bench-decode runs every --batch x --depth pair of one (mode, L, V)."""
    procs = []
    g1, g2 = REGIMES["gemv"]
    m1, m2 = REGIMES["gemm"]
    v1, v2 = FIT_VOCAB
    for mode in MODES:
        t1, t2 = FIT_CTX[mode]
        procs.append(dict(mode=mode, layers=1, vocab=v1, batches=(g1, g2),
                          ctxs=(t1, t2, HELD_CTX[mode])))
        procs.append(dict(mode=mode, layers=2, vocab=v1, batches=(g1, g2, m1), ctxs=(t1,)))
        procs.append(dict(mode=mode, layers=1, vocab=v2, batches=(g1, g2), ctxs=(t1,)))
        procs.append(dict(mode=mode, layers=1, vocab=v1, batches=(m1, m2), ctxs=(t1,)))
    return procs


def kv_flags(mode):
    cpu = "ahead" if mode == "ahead" else "parallel"
    return ["--window-frac", str(WINDOW_FRAC[mode]), "--cpu-attn", cpu, "--sparse", "full",
            "--kv-dtype", "bf16"]


def write_analytic(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "counters.jsonl")
    with open(path, "w") as f:
        for p in plan():
            for B in p["batches"]:
                for ctx in p["ctxs"]:
                    depth = ctx - FIT_GEN
                    rec = dict(source="analytic", mode=p["mode"], layers=p["layers"],
                               vocab=p["vocab"], batch=B, depth=depth, gen=FIT_GEN,
                               window=window_of(WINDOW_FRAC[p["mode"]], ctx, EMU_SHAPE),
                               ffn=EMU_SHAPE["ffn"],
                               emulator=analytic_run(p["mode"], p["layers"], p["vocab"], B,
                                                     depth, FIT_GEN, EMU_SHAPE))
                    f.write(json.dumps(rec, sort_keys=True) + "\n")
    print("gpu_model: wrote %s" % path, file=sys.stderr)
