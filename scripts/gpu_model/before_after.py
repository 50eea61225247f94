"""The "Before / after the step plan" section: the document and emulator counters of c66c674
(kept in --before-dir) against this document's results and fit.
"""
import json
import os
import re

from .doc_format import fmt_ms, fmt_tps
from .fit import Fit
from .params import BATCHES, CONTEXTS, MODE_TEXT, MODES, SHAPE


def before_after(results, maxb, fit, before_dir, counters_path, launch_us):
    """The "Before / after the step plan" section: the headline of the document before the
    batch step (c66c674) against this one, and the per-layer counts of both counter sets."""
    doc = os.path.join(before_dir, "gpu-model.md")
    runs = os.path.join(before_dir, "counters.jsonl")
    if not (os.path.isfile(doc) and os.path.isfile(runs)):
        return []
    before = {}
    cell = re.compile(r"([\d.]+)(?: \(B=(\d+)\))?(?: \[([\d.]+)\])?")
    for line in open(doc):
        f = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(f) != 5 or not f[0].isdigit() or f[1] not in ("1", "8", "32", "max"):
            continue
        for mode, txt in zip(MODES, f[2:]):
            m = cell.fullmatch(txt)
            if m:
                before[(int(f[0]), f[1], mode)] = (m.group(1), m.group(2), m.group(3))
        if "## What is modelled" in line:
            break
    dev0 = "H100 SXM"
    out = ["## Before / after the step plan (2026-11-25)\n",
           "Before: the document of c66c674 (kept in `%s/gpu-model.md`), whose step ran every "
           "decode sequence on its own: its own host submission, device partial (sinks, paged "
           "window, own token, two merges), wait, host merge and row writes, and whose model "
           "charged one host call (%s) per sequence and layer. After: the batch step of f8c5281 "
           "and f5e82e8 (one submission, one `attention_batch`, one wait and one merge per "
           "layer, rows stored by one `scatter_rows` per tensor), with the counters of this "
           "document's runs. All KV on the GPU (`--window-frac 1`) runs the same hybrid step "
           "with no host part, so it changes too. H100 SXM, modelled decode tokens/s and GPU "
           "idle per step waiting for the CPU (ms):\n" % (before_dir, "20 us + its bytes"),
           "| context | batch | mode | tokens/s before | tokens/s after | GPU idle ms before "
           "| GPU idle ms after |", "|---:|---|---|---:|---:|---:|---:|"]
    for ctx in CONTEXTS:
        for B in BATCHES + ("max",):
            for mode in MODES:
                mb = maxb[(dev0, ctx, mode)][0]
                b = mb if B == "max" else B
                r = results.get((dev0, ctx, mode, b))
                old = before.get((ctx, str(B), mode))
                label = "max %d" % b if B == "max" else str(B)
                if old and old[1] and B == "max" and int(old[1]) != b:
                    label += " (before: %s)" % old[1]
                if r is None and old is None:
                    continue  # does not fit, before or after
                out.append("| %d | %s | %s | %s | %s | %s | %s |"
                           % (ctx, label, MODE_TEXT[mode], old[0] if old else "-",
                              fmt_tps(b / r["time"]) if r else "-",
                              old[2] if old and old[2] else "-",
                              fmt_ms(r["idle"]) if r and mode != "dense" else "-"))
    out.append("")
    r = results[(dev0, 4096, "ahead", 32)]
    out.append("Tokens/s rise at batch 8 and more, where the GPU's own time fell (the launches "
               "and copy calls a layer no longer issues per sequence); at batch 1 a layer issues "
               "about as many calls as before, and in `parallel` the host part now hides behind "
               "the device attention alone (attention and combine; the merges moved into the "
               "combine), so batch 1 barely moves either way. The GPU idle can rise while "
               "tokens/s rise, because "
               "the same host work now meets a shorter GPU layer: at 4096 and batch 32 in "
               "`ahead` a layer's GPU work is modelled at %.3f ms against %.3f ms for the "
               "batch's host part. Where the host part bounds the step (16K and 32K at batch 8 "
               "and more), the step stays close to L x the host part and the gain is small.\n"
               % (r["gpu_layer"] * 1e3, r["cpu_job"] * 1e3))
    old_fit = Fit([json.loads(x) for x in open(runs) if x.strip()])
    L, V, T = SHAPE["layers"], SHAPE["vocab"], 32768

    def per_layer(f, B, key):
        return (f.at("ahead", L, B, V, T)[key] - f.at("ahead", 0, B, V, T)[key]) / L

    out.append("Launches and copy calls per layer and host synchronisations per step, hybrid "
               "`ahead`, 32 layers, context 32768, from the fits of the emulator counters "
               "(before: `%s`; after: `%s`, whose emulator also counts copy calls). The "
               "before emulator did not count copy calls: there they are c66c674's one "
               "page-table upload per sequence and layer (its `h2d_bytes` agree). The before "
               "document's step times also charged a query download per sequence and layer "
               "(its analytic copy count) that c66c674 did not make (it wrote the query to "
               "pinned memory with a kernel, counted among the launches): its hybrid steps are "
               "L x B x %.0f us too long (%.1f ms at batch 32), which this comparison does not "
               "correct.\n"
               % (runs, counters_path, launch_us, L * 32 * launch_us / 1e3))
    out.append("| batch | launches per layer before / after | copy calls per layer before / "
               "after | launches + copies per layer before / after | host syncs per step "
               "before / after |")
    out.append("|---:|---|---|---|---|")
    for B in BATCHES:
        lb = per_layer(old_fit, B, "launches")
        cb = float(B)
        la = per_layer(fit, B, "launches")
        ca = per_layer(fit, B, "copies")
        sb = old_fit.at("ahead", L, B, V, T)["host_syncs"]
        sa = fit.at("ahead", L, B, V, T)["host_syncs"]
        out.append("| %d | %.1f / %.1f | %.0f / %.1f | %.1f / %.1f | %.0f / %.0f |"
                   % (B, lb, la, cb, ca, lb + cb, la + ca, sb, sa))
    out.append("")
    return out
