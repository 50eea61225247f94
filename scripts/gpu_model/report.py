"""The document (docs/gpu-model.md): its header and headline, then the sections of the other
doc modules and before_after, in the order a reader needs them.
"""
from .before_after import before_after
from .doc_counters import section_counters
from .doc_format import fmt_ms, fmt_tps, wrap
from .doc_model import section_left_out, section_modelled
from .doc_results import largest_costs, section_results
from .params import BATCHES, CONTEXTS, DEVICES, MODES
from .timing import Model, max_batch


def report(model, fit, cpu, p, counters_path, cpu_path):
    out = []
    w = out.append
    src = ", ".join(sorted(fit.source))
    analytic = src == "analytic"
    dev0 = "H100 SXM"
    w("# GPU cost model of the decode step (a model, not a measurement)\n")
    w("Written by `scripts/gpu_model.py` from its inputs:\n")
    w("```bash\npython3 scripts/gpu_model.py --counters %s --cpu-attn %s \\\n"
      "  --out docs/gpu-model.md\n```\n" % (counters_path, cpu_path))
    w("(`scripts/gpu_model.sh` collects the inputs first.) **Nothing here ran on a GPU.** Every "
      "figure below is arithmetic on counted work, published device figures and the stated "
      "assumptions: it says where the time of today's CUDA decode path would go and which "
      "cost bounds it, not how fast it is. The first GPU session (`scripts/gpu_check.sh`, "
      "docs/cuda.md) measures the real thing.\n")
    if analytic:
        w("> **Counters: ANALYTIC.** The per-step counters were derived by reading the launch "
          "code")
        w("> (`models/model.cpp`, `kvstore/hybrid_kv.cpp`, `kernels/cuda/*.cu`) and written by")
        w("> `gpu_model.py --write-analytic`, in the emulator's schema; they are not the SIMT")
        w("> emulator's counts. `scripts/gpu_model.sh` replaces them with emulator counters")
        w("> once `build-emu/tandem` exists.\n")
    else:
        w("> **Counters: %s**: `build-emu/tandem bench-decode --device cuda` (the SIMT emulator"
          % src.upper())
        w("> running the project's CUDA kernels on the CPU) for launches, copies, syncs and")
        w("> PCIe bytes, fitted and extrapolated as below; kernel bytes from the analytic rules")
        w("> (see \"Counters\").\n")

    # Results first
    results, maxb = {}, {}
    for dev in DEVICES:
        for ctx in CONTEXTS:
            for mode in MODES:
                mb, limit, dseq, hseq = max_batch(mode, ctx, DEVICES[dev], p)
                maxb[(dev, ctx, mode)] = (mb, limit, dseq, hseq)
                for B in BATCHES + (mb,):
                    if B < 1 or B > mb or (dev, ctx, mode, B) in results:
                        continue
                    results[(dev, ctx, mode, B)] = model.step(mode, dev, ctx, B)

    w("## Headline (H100 SXM, modelled)\n")
    w("Decode tokens/s; in brackets the GPU idle time per step waiting for the CPU (ms).\n")
    w("| context | batch | all KV on the GPU | hybrid `parallel` | hybrid `ahead` |")
    w("|---:|---|---:|---:|---:|")
    for ctx in CONTEXTS:
        for B in BATCHES + ("max",):
            cells = []
            for mode in MODES:
                mb = maxb[(dev0, ctx, mode)][0]
                b = mb if B == "max" else B
                r = results.get((dev0, ctx, mode, b))
                if r is None:
                    cells.append("does not fit")
                    continue
                txt = fmt_tps(b / r["time"])
                if B == "max":
                    txt = "%s (B=%d)" % (txt, b)
                if mode != "dense":
                    txt += " [%s]" % fmt_ms(r["idle"])
                cells.append(txt)
            w("| %d | %s | %s |" % (ctx, B, " | ".join(cells)))
    w("")
    costs = largest_costs(results, maxb, p, cpu)
    w("The three largest costs the model finds in today's GPU path (details below): %s.\n"
      % "; ".join("(%d) %s" % (i, c[0][0].lower() + c[0][1:]) for i, c in
                  enumerate(costs[:3], 1)))
    q = dict(p, launch_us=0.0, sync_us=0.0)
    mh, md = maxb[(dev0, 32768, "ahead")][0], maxb[(dev0, 32768, "dense")][0]
    th = Model(fit, cpu, dict(q, host_fraction=0.125)).step("ahead", dev0, 32768, mh)["time"]
    td = Model(fit, cpu, q).step("dense", dev0, 32768, md)["time"]
    w("At 32K the hybrid store fits %d sequences against %d, but with `full` its throughput "
      "is %.1fx lower than with all KV on the GPU. Without launch and sync overheads and with the "
      "host part reading 1/8 of the host entries, the same rules give %s tokens/s for hybrid "
      "`ahead` at %d sequences against %s for all KV on the GPU at %d (what-if table below).\n"
      % (mh, md, (md / results[(dev0, 32768, "dense", md)]["time"]) /
         (mh / results[(dev0, 32768, "ahead", mh)]["time"]), fmt_tps(mh / th), mh,
         fmt_tps(md / td), md))

    for line in before_after(results, maxb, fit, p["before_dir"], counters_path,
                             p["launch_us"]):
        w(line)

    section_modelled(w, p, cpu)
    section_results(w, results, maxb, costs, fit, cpu, p)
    section_counters(w, model, fit, maxb, counters_path, src, analytic)
    section_left_out(w, p)
    return wrap("\n".join(out)) + "\n"
