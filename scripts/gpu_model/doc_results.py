"""The results sections of the document: step times per device, context, batch and mode, the
largest batches, the counts per step, and the three largest costs with the what-if table.
"""
from .doc_format import bound_of, fmt_ms, fmt_tps
from .params import BATCHES, CONTEXTS, DEVICES, MODE_TEXT, MODES, SHAPE
from .timing import Model, hybrid_tokens


def section_results(w, results, maxb, costs, fit, cpu, p):
    """"Results" up to the what-if table (H100 SXM for the per-step counts and the costs)."""
    dev0 = "H100 SXM"
    w("## Results\n")
    w("Step time, tokens/s, GPU idle per step waiting for the CPU, the modelled GPU time by "
      "kind, and what bounds the step: the largest of HBM (kernel bytes and flops), launches "
      "(launch and copy-call overhead), syncs, PCIe and CPU (GPU idle waiting for host "
      "parts). `max N (limit)`: the largest batch that fits and what limits it.\n")
    for dev in DEVICES:
        w("### %s\n" % dev)
        w("| context | batch | mode | step ms | tokens/s | GPU idle for CPU ms | HBM ms | "
          "launch ms | sync ms | PCIe ms | bound |")
        w("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
        for ctx in CONTEXTS:
            for B in BATCHES + ("max",):
                for mode in MODES:
                    mb, limit = maxb[(dev, ctx, mode)][:2]
                    b = mb if B == "max" else B
                    label = "max %d (%s)" % (mb, limit) if B == "max" else str(B)
                    r = results.get((dev, ctx, mode, b))
                    if r is None:
                        w("| %d | %s | %s | - | - | - | - | - | - | - | does not fit |"
                          % (ctx, label, MODE_TEXT[mode]))
                        continue
                    pt = r["parts"]
                    w("| %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |"
                      % (ctx, label, MODE_TEXT[mode], fmt_ms(r["time"]),
                         fmt_tps(b / r["time"]), fmt_ms(r["idle"]), fmt_ms(pt["hbm"]),
                         fmt_ms(pt["launch"]), fmt_ms(pt["sync"]), fmt_ms(pt["pcie"]),
                         bound_of(r)))
        w("")

    w("### Largest batch that fits\n")
    w("| device | context | mode | max batch | limit | device GB per sequence | host GB per "
      "sequence |")
    w("|---|---:|---|---:|---|---:|---:|")
    for dev in DEVICES:
        for ctx in CONTEXTS:
            for mode in MODES:
                mb, limit, dseq, hseq = maxb[(dev, ctx, mode)]
                w("| %s | %d | %s | %d | %s | %.2f | %.2f |"
                  % (dev, ctx, MODE_TEXT[mode], mb, limit, dseq / 1e9, hseq / 1e9))
    w("")

    w("### Counts per step (H100 SXM, context 32768)\n")
    w("| mode | batch | launches | copy calls | host syncs | HBM GB | PCIe MB | launch ms | "
      "sync ms | GEMV/GEMM ms | attention ms | host part per layer (the batch) ms |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for mode in MODES:
        for B in (1, 8, 32):
            r = results.get((dev0, 32768, mode, B))
            if r is None:
                continue
            c, pt = r["counters"], r["parts"]
            hbm_gb = (c["kernel_device_read_bytes"] + c["kernel_device_write_bytes"] +
                      c["cublas_bytes"]) / 1e9
            pcie_mb = (c["h2d_bytes"] + c["d2h_bytes"] + c["kernel_mapped_read_bytes"]) / 1e6
            mm = pt["by_cat"]["gemv"] + pt["by_cat"]["cublas"]
            att = sum(pt["by_cat"][k] for k in ("attention", "combine", "merge"))
            w("| %s | %d | %.0f | %.0f | %.0f | %.1f | %.1f | %s | %s | %s | %s | %s |"
              % (MODE_TEXT[mode], B, pt["launches"], pt["copies"], pt["syncs"], hbm_gb,
                 pcie_mb, fmt_ms(pt["launch"]), fmt_ms(pt["sync"]), fmt_ms(mm), fmt_ms(att),
                 "%.3f" % (r["cpu_job"] * 1e3) if "cpu_job" in r else "-"))
    w("")

    w("## The three largest costs in today's GPU path\n")
    for i, (name, text) in enumerate(costs[:3], 1):
        w("%d. **%s**: %s" % (i, name, text))
    w("")
    w("The same steps without those costs, one after another (H100 SXM, 32K, same rules; the "
      "last variant reads 1/8 of the host entries, about what `--sparse topk` with 48 of the "
      "384 host blocks would read):\n")
    w("| mode | batch | as today ms | no launch or copy-call overhead | and no syncs | and 1/8 "
      "of the host entries | tokens/s then |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    for mode in MODES:
        mb = maxb[(dev0, 32768, mode)][0]
        for B in sorted(set(b for b in (8, mb) if 1 <= b <= mb)):
            base = results[(dev0, 32768, mode, B)]["time"]
            steps = []
            for variant in (dict(launch_us=0.0), dict(launch_us=0.0, sync_us=0.0),
                            dict(launch_us=0.0, sync_us=0.0, host_fraction=0.125)):
                q = dict(p)
                q.update(variant)
                steps.append(Model(fit, cpu, q).step(mode, dev0, 32768, B)["time"])
            if mode == "dense":
                steps[2] = steps[1]
            w("| %s | %d | %s | %s | %s | %s | %s |"
              % (MODE_TEXT[mode], B, fmt_ms(base), fmt_ms(steps[0]), fmt_ms(steps[1]),
                 fmt_ms(steps[2]) if mode != "dense" else "-", fmt_tps(B / steps[2])))
    w("")


def largest_costs(results, maxb, p, cpu):
    """The largest costs at H100 32K, ranked by modelled ms, in words."""
    dev, ctx = "H100 SXM", 32768
    L = SHAPE["layers"]
    md, mh = maxb[(dev, ctx, "dense")][0], maxb[(dev, ctx, "ahead")][0]
    rd = results[(dev, ctx, "dense", md)]
    rh = results[(dev, ctx, "ahead", mh)]
    rp = results[(dev, ctx, "parallel", mh)]
    r1 = results[(dev, ctx, "ahead", 1)]
    ph = rh["parts"]
    per_l = (ph["launches"] + ph["copies"]) / L
    per_l1 = (r1["parts"]["launches"] + r1["parts"]["copies"]) / L
    hk = hybrid_tokens("ahead", ctx)[1]
    entries = [
        (rh["idle"], "Host attention over 75% of the context on the CPU (`full`)",
         "at 32K a sequence's host part reads %.0f MB per layer; at %.0f GB/s the batch's "
         "host part of one layer takes %.3f ms at the largest hybrid batch (%d) against %.3f "
         "ms of GPU work per layer, so the GPU idles %s of a %s ms step in `ahead` (%s ms in "
         "`parallel`): %s tokens/s against %s for all KV on the GPU at its largest batch (%d)."
         " The 4x batch the hybrid store fits does not pay while the host part reads every "
         "host entry." % (hk * 4096 / 1e6, cpu.rate_gbs, rh["cpu_job"] * 1e3, mh,
                          rh["gpu_layer"] * 1e3, fmt_ms(rh["idle"]), fmt_ms(rh["time"]),
                          fmt_ms(rp["idle"]), fmt_tps(mh / rh["time"]),
                          fmt_tps(md / rd["time"]), md)),
        (ph["launch"], "Launches and copy calls",
         "%.1f kernel launches and copy calls per layer (the step's, divided by its layers) at "
         "batch %d against %.1f at batch 1 (a layer's attention is a fixed number of calls "
         "whatever the batch), %.0f per step: %s ms at %.0f us each, %.1fx the step's HBM "
         "time (%s ms). All on the GPU "
         "at its largest batch (%d): %s ms of launches against %s ms of HBM work."
         % (per_l, mh, per_l1, ph["launches"] + ph["copies"], fmt_ms(ph["launch"]),
            p["launch_us"], ph["launch"] / ph["hbm"], fmt_ms(ph["hbm"]), md,
            fmt_ms(rd["parts"]["launch"]), fmt_ms(rd["parts"]["hbm"]))),
        (ph["sync"], "Host synchronisations",
         "%.0f per step at batch %d (%s ms at %.0f us each): the counted step's and the "
         "amortised downloads of evicted blocks; each drains the stream, so no launch can hide "
         "behind a running kernel." % (ph["syncs"] + 2 * L * mh / 64, mh,
                                                       fmt_ms(ph["sync"]), p["sync_us"])),
        (ph["pcie"], "Bytes over PCIe",
         "logits, queries, mapped partials and evicted blocks: %s ms per step at batch %d."
         % (fmt_ms(ph["pcie"]), mh)),
    ]
    entries.sort(key=lambda e: -e[0])
    return [(name, text) for _, name, text in entries]
