"""The "Counters" section of the document: the runs, the fit and its held-out checks, the fit
carried to the target against the analytic rules, and the emulator against the analytic rules.
"""
from .analytic import analytic_flat, kv_state, window_of
from .categories import CAT_NAMES, STEP_FIELDS, structural_keys
from .doc_format import fmt_ms
from .params import (EMU_SHAPE, FEATURES, FIT_CTX, FIT_GEN, FIT_VOCAB, HELD_CTX, MODE_TEXT,
                     MODES, REGIMES, SHAPE)


def section_counters(w, model, fit, maxb, counters_path, src, analytic):
    """"Counters: the runs, the fit and its checks" (H100 SXM for the step times)."""
    dev0 = "H100 SXM"
    w("## Counters: the runs, the fit and its checks\n")
    ctxs = "; ".join("%s: T1, T2 = %d, %d and T3 = %d" % (MODE_TEXT[m], FIT_CTX[m][0],
                                                          FIT_CTX[m][1], HELD_CTX[m])
                     for m in ("dense", "parallel"))
    t1 = FIT_CTX["parallel"][0]
    win = window_of(0.25, t1, SHAPE)
    free = win - kv_state(t1 - FIT_GEN, FIT_GEN, win, SHAPE)[0][0]
    w("Runs (`%s`, %s): `bench-decode --device cuda --fill import --gen %d --sparse full "
      "--kv-dtype bf16` with `--window-frac 1 --cpu-attn parallel` (all on the GPU), "
      "`--window-frac 0.25 --cpu-attn parallel` and `--window-frac 0.25 --cpu-attn ahead`, "
      "under `TANDEM_EMU_PROTECT=0`, on random checkpoints of the Llama-3.1-8B shape with L = 1 "
      "or 2 layers, a vocabulary V = %d or %d and an FFN of %d instead of 14336 (written by "
      "`gpu_model.py --collect`; `make-model` has no flag for any of the three). Contexts "
      "(depth + gen): %s (hybrid `ahead` as `parallel`): the fewest keys for which the window "
      "is still split into chunks (>= 512 device keys), since the emulator's time goes into "
      "attention. The depth leaves the hybrid window %d steps before its next eviction, so the "
      "counted step evicts nothing. Counters are per counted step (the warm-up excluded).\n"
      % (counters_path, src, FIT_GEN, FIT_VOCAB[0], FIT_VOCAB[1], EMU_SHAPE["ffn"], ctxs,
         free))
    b1, b2 = REGIMES["gemv"]
    c1, c2 = REGIMES["gemm"]
    w("Fit, per mode. GEMV regime (batch <= 8): each counter is solved exactly as a linear "
      "function of %s (L layers, B sequences, V vocabulary, T context tokens) from the 7 runs "
      "(L, B, V, T) = (1, %d, V1, T1), (1, %d, V1, T1), (2, %d, V1, T1), (2, %d, V1, T1), "
      "(1, %d, V1, T2), (1, %d, V2, T1), (1, %d, V2, T1); held out: (1, %d, V1, T2), (1, %d, "
      "V1, T3), (1, %d, V1, T3). cuBLAS regime (batch > 8: a conversion launch and a cuBLAS "
      "call instead of each GEMV): the difference from the GEMV regime's prediction as d0 + "
      "d1 L, from (1, %d, V1, T1) and (2, %d, V1, T1); held out: (1, %d, V1, T1).\n"
      % (", ".join("`%s`" % f for f in FEATURES), b1, b2, b1, b2, b1, b1, b2, b2, b1, b2, c1,
         c1, c2))
    w("What the model takes from the fit, at 32 layers, vocab 128256 and the target contexts: "
      "the structural counters (launches per kernel family, copy calls (%s), host syncs, "
      "bytes over PCIe each way, mapped bytes, cuBLAS calls), none of which depends on the FFN "
      "width. The "
      "kernel and cuBLAS bytes and flops come from the analytic rules at the full shape: "
      "unique bytes, each byte a kernel touches counted once per launch (the DRAM traffic with "
      "perfect reuse inside a kernel and none across kernels). The emulator counts every load "
      "and store its threads make (`kernels/cuda/emu/hooks.cpp`), so a GEMV's x rows, re-read "
      "per weight row from L1 on a GPU, count once per weight row there: its byte counts are "
      "compared with the analytic ones below, not used.\n"
      % ("counted by the emulator since f5e82e8" if fit.has_copies else
         "from the analytic rules: these counters hold no copy count"))
    w("Held-out check: the largest relative error of a structural counter, and of three "
      "counters:\n")
    w("| mode | regime | worst structural counter | its error | launches | host syncs | d2h "
      "bytes |")
    w("|---|---|---|---:|---:|---:|---:|")
    skeys = set(structural_keys())
    for (mode, regime), worst in sorted(fit.check.items()):
        ws = {k: v for k, v in worst.items() if k in skeys}
        if not ws:
            w("| %s | %s | (no held-out run) | - | - | - | - |" % (mode, regime))
            continue
        k = max(sorted(ws), key=lambda x: ws[x][0])
        name = "`%s`" % k if ws[k][0] > 0 else "(all exact)"
        w("| %s | %s | %s | %.2g | %.2g | %.2g | %.2g |"
          % (mode, regime, name, ws[k][0], ws.get("launches", (0,))[0],
             ws.get("host_syncs", (0,))[0], ws.get("d2h_bytes", (0,))[0]))
    w("")
    w("The fit carried to the target against the analytic rules evaluated there directly (H100 "
      "SXM; with emulator counters, the emulator's structure against the reading of the "
      "code):\n")
    w("| mode | context | batch | launches fit / analytic | host syncs fit / analytic | PCIe MB "
      "fit / analytic | step ms fit / analytic |")
    w("|---|---:|---:|---|---|---|---|")
    for mode in MODES:
        for ctx in (4096, 32768):
            for B in (1, 32):
                if B > maxb[(dev0, ctx, mode)][0]:
                    continue
                a = model.step(mode, dev0, ctx, B)
                b = model.step(mode, dev0, ctx, B, source="direct")
                ca, cb = a["counters"], b["counters"]
                pa = (ca["h2d_bytes"] + ca["d2h_bytes"] + ca["kernel_mapped_read_bytes"]) / 1e6
                pb = (cb["h2d_bytes"] + cb["d2h_bytes"] + cb["kernel_mapped_read_bytes"]) / 1e6
                w("| %s | %d | %d | %.0f / %.0f | %.0f / %.0f | %.2f / %.2f | %s / %s |"
                  % (mode, ctx, B, ca["launches"], cb["launches"], ca["host_syncs"],
                     cb["host_syncs"], pa, pb, fmt_ms(a["time"]), fmt_ms(b["time"])))
    w("")
    if not analytic:
        w("Emulator against the analytic rules at the emulated shape, run by run (L = 1, V = "
          "%d, T = T1): launches and bytes per kernel family, then every per-step counter "
          "that differs. Read bytes above the analytic ones are re-reads a GPU serves from "
          "L1/L2 (GEMV x rows, the attention's page table and batch table, q and "
          "positions).\n" % FIT_VOCAB[0])
        w("| mode | batch | family | launches emulator / analytic | read MB emulator / analytic "
          "| write MB emulator / analytic |")
        w("|---|---:|---|---|---|---|")
        for mode in MODES:
            for B in (REGIMES["gemv"][0], REGIMES["gemm"][0]):
                t1 = FIT_CTX[mode][0]
                key = (mode, 1, B, FIT_VOCAB[0], t1)
                if key not in fit.by:
                    continue
                e = fit.by[key]
                a = dict(analytic_flat(mode, 1, FIT_VOCAB[0], B, t1 - FIT_GEN, FIT_GEN,
                                       EMU_SHAPE["ffn"]))
                for cat in CAT_NAMES:
                    if e[cat + ".launches"] == 0 and a[cat + ".launches"] == 0:
                        continue
                    w("| %s | %d | %s | %.0f / %.0f | %.3f / %.3f | %.3f / %.3f |"
                      % (mode, B, cat, e[cat + ".launches"], a[cat + ".launches"],
                         e[cat + ".device_read_bytes"] / 1e6,
                         a[cat + ".device_read_bytes"] / 1e6,
                         e[cat + ".device_write_bytes"] / 1e6,
                         a[cat + ".device_write_bytes"] / 1e6))
                for k in STEP_FIELDS:
                    if k.endswith("_copies") or e[k] == a[k]:
                        continue
                    w("| %s | %d | step `%s` | %.6g / %.6g | | |" % (mode, B, k, e[k], a[k]))
        w("")
