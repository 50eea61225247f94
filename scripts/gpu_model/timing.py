"""The time model: counters at the target shape turned into a step time with the device
figures and the assumptions, the hybrid step simulated layer by layer; and the largest batch
that fits the device and host memory.
"""
import math

from .analytic import analytic_flat, window_of
from .categories import CAT_NAMES, structural_keys
from .params import DEVICES, FIT_GEN, MAX_BATCH_CAP, SHAPE, WINDOW_FRAC


def hybrid_tokens(mode, ctx, s=SHAPE):
    """(device keys, host keys) per sequence and layer, in steady state at context ctx."""
    window = window_of(WINDOW_FRAC[mode], ctx, s)
    if window >= ctx:
        return ctx, 0
    dev = s["sinks"] + window - (s["block"] - 1) / 2.0  # the ring fills between evictions
    return dev, ctx - dev


def max_batch(mode, ctx, dev, p, s=SHAPE):
    """Largest batch that fits, and what limits it (device, host, cap)."""
    L, hkv, d, blk = s["layers"], s["kv_heads"], s["head_dim"], s["block"]
    dev_block = 2 * blk * hkv * d * s["kvbytes"] + blk * hkv * 4          # K, V, MAW
    host_block = dev_block + 2 * hkv * d * 4                               # + digest min/max
    window = min(window_of(WINDOW_FRAC[mode], ctx, s), ctx)
    per_layer = 1 + -(-window // blk) + 1  # KvStore's device pool per sequence and layer
    dev_seq = per_layer * L * dev_block + 2 * s["vocab"] * 4 + (1 << 20)  # + logits, scratch
    weights = weight_bytes(s)
    free = dev["mem_gb"] * 1e9 - weights - (p["workspace_gib"] + p["reserve_gib"]) * 2**30
    fit_dev = int(free // dev_seq)
    _, host_keys = hybrid_tokens(mode, ctx, s)
    host_seq = math.ceil(host_keys / blk) * L * host_block
    fit_host = int((p["host_gib"] - p["host_keep_gib"]) * 2**30 // host_seq) if host_seq else None
    best, limit = fit_dev, "device"
    if fit_host is not None and fit_host < best:
        best, limit = fit_host, "host"
    if best >= MAX_BATCH_CAP:
        best, limit = MAX_BATCH_CAP, "cap"
    return max(0, best), limit, dev_seq, host_seq


def weight_bytes(s=SHAPE):
    h, hq, hkv, d, ffn, V = (s["hidden"], s["heads"], s["kv_heads"], s["head_dim"], s["ffn"],
                             s["vocab"])
    layer = (2 * h * hq * d + 2 * h * hkv * d + 3 * h * ffn) * s["wbytes"] + 2 * h * 4
    return s["layers"] * layer + 2 * V * h * s["wbytes"] + h * 4


class Model:
    def __init__(self, fit, cpu, p):
        self.fit, self.cpu, self.p = fit, cpu, p

    def counters(self, mode, B, ctx, L=SHAPE["layers"], V=SHAPE["vocab"], source="fit"):
        """The step's counters at the target: the structural ones (launches, copies, syncs,
        PCIe and mapped bytes) from the fit of the counted runs, the kernel and cuBLAS bytes
        and flops from the analytic rules at the full 8B shape (source="direct": all
        analytic)."""
        a = dict(analytic_flat(mode, L, V, B, ctx - FIT_GEN, FIT_GEN, SHAPE["ffn"]))
        if source != "fit":
            return a
        f = self.fit.at(mode, L, B, V, ctx)
        for k in structural_keys():
            if k.endswith("copies") and not (k == "copies" and self.fit.has_copies):
                continue  # copy calls the emulator does not count: analytic
            a[k] = f[k]
        return a

    def gpu_parts(self, c, dev, B):
        """Seconds of one step's worth of counters c, by kind."""
        p = self.p
        bw = dev["hbm_tbs"] * 1e12 * p["hbm_eff"]
        hbm = 0.0
        by_cat = {}
        for cat in CAT_NAMES:
            nbytes = c[cat + ".device_read_bytes"] + c[cat + ".device_write_bytes"]
            t = nbytes / bw
            if cat == "gemv":  # 2 FMA-flops per weight and row on the CUDA cores
                wbytes = c[cat + ".device_read_bytes"]
                t = max(t, B * wbytes / (dev["fp32_tflops"] * 1e12 * p["compute_eff"]))
            by_cat[cat] = t
            hbm += t
        gemm = 0.0
        if c["cublas_calls"] > 0:
            gemm = max(c["cublas_bytes"] / bw,
                       c["cublas_flops"] / (dev["bf16_tflops"] * 1e12 * p["compute_eff"]))
        by_cat["cublas"] = gemm
        hbm += gemm + 2 * (c["d2d_bytes"] + c["memset_bytes"]) / bw
        copies = c["copies"]
        launch = (c["launches"] + copies) * p["launch_us"] * 1e-6
        sync = c["host_syncs"] * p["sync_us"] * 1e-6
        pcie = (c["h2d_bytes"] + c["d2h_bytes"] + c["kernel_mapped_read_bytes"] +
                c["kernel_mapped_write_bytes"]) / (p["pcie_gbs"] * 1e9)
        return dict(hbm=hbm, launch=launch, sync=sync, pcie=pcie, by_cat=by_cat,
                    launches=c["launches"], copies=copies, syncs=c["host_syncs"])

    def step(self, mode, dev_name, ctx, B, source="fit"):
        p, s = self.p, SHAPE
        dev = DEVICES[dev_name]
        L = s["layers"]
        c = self.counters(mode, B, ctx, source=source)
        c0 = self.counters(mode, B, ctx, L=0, source=source)
        whole = self.gpu_parts(c, dev, B)
        dev_keys, host_keys = hybrid_tokens(mode, ctx)
        # Eviction (amortised, not in the counted steps): every `block` steps a sequence's
        # layer downloads its oldest window block (K and V) with two synchronisations.
        if host_keys > 0:
            ev = L * B / s["block"]
            blk = s["block"] * s["kv_heads"] * s["head_dim"] * s["kvbytes"]
            whole["sync"] += 2 * ev * p["sync_us"] * 1e-6
            whole["launch"] += 2 * ev * p["launch_us"] * 1e-6
            whole["pcie"] += 2 * ev * blk / (p["pcie_gbs"] * 1e9)
        gpu = whole["hbm"] + whole["launch"] + whole["sync"] + whole["pcie"]
        res = dict(mode=mode, device=dev_name, ctx=ctx, batch=B, gpu=gpu, parts=whole,
                   idle=0.0, cpu_busy=0.0, counters=c)
        if host_keys == 0:
            res["time"] = gpu
            return res
        # The timeline of the hybrid step, per layer (kvstore/hybrid_runner.h): the batch's
        # query rows handed to the host (one copy to pinned memory and one flag), the batch's
        # device attention (attention_batch: table upload, attention, combine), one flag wait
        # for the batch's host part, one merge, the rest of the layer (GEMVs, norms, stores).
        fixed = self.gpu_parts(c0, dev, B)
        f_t = fixed["hbm"] + fixed["launch"] + fixed["sync"] + fixed["pcie"]
        layer_t = (gpu - f_t) / L
        bw = dev["hbm_tbs"] * 1e12 * p["hbm_eff"]
        lu = p["launch_us"] * 1e-6

        def per_layer(cats, extra_launches=0.0):
            nbytes = sum(c[k + ".device_read_bytes"] + c[k + ".device_write_bytes"] -
                         c0[k + ".device_read_bytes"] - c0[k + ".device_write_bytes"]
                         for k in cats)
            n = sum(c[k + ".launches"] - c0[k + ".launches"] for k in cats)
            return nbytes / bw / L + (n / L + extra_launches) * lu

        att = per_layer(("attention", "combine"), 1.0)  # + the table upload
        merge = per_layer(("merge",)) + lu  # + the flag wait's launch
        pcie_bs = p["pcie_gbs"] * 1e9
        q_bytes = B * s["heads"] * s["head_dim"] * 4
        hand = 2 * lu + q_bytes / pcie_bs  # query copy and flag raise, per submission
        # One submission per layer in both modes (ahead: layer 0's true query, then L - 1
        # predicted ones), so one hand-over per layer comes out of the layer's time.
        rest = max(0.0, layer_t - att - merge - hand)
        hd, hkv_d = s["hidden"], s["kv_heads"] * s["head_dim"]
        w_q = s["heads"] * s["head_dim"] * hd
        w_pred = w_q if mode == "ahead" else 0
        w_pre = w_q + 2 * hkv_d * hd
        w_post = w_q + 3 * hd * s["ffn"]
        w_all = w_pred + w_pre + w_post
        pred, pre = rest * w_pred / w_all, rest * w_pre / w_all
        post = rest - pred - pre
        kv_bytes = host_keys * s["kv_heads"] * s["head_dim"] * 2 * s["kvbytes"]
        # One submission per layer for the batch: B x KV-head items split over all cores.
        job = self.cpu.overhead_s + B * kv_bytes * p["host_fraction"] / (self.cpu.rate_gbs * 1e9)
        t, cpu_free, idle = 0.0, 0.0, 0.0
        done = {}

        def submit(li, at):
            nonlocal cpu_free
            start = max(at, cpu_free)  # FIFO: one batch after another
            cpu_free = start + job
            done[li] = cpu_free

        for li in range(L):
            if mode == "ahead" and li + 1 < L:  # predicted queries: layer li+1's batch queued
                t += pred + hand
                submit(li + 1, t)
            t += pre
            if mode == "parallel" or li == 0:
                t += hand
                submit(li, t)
            t += att
            if done[li] > t:  # the one wait of the layer, for the whole batch
                idle += done[li] - t
                t = done[li]
            t += merge + post
        res["time"] = t + f_t
        res["idle"] = idle
        res["cpu_busy"] = job * L
        res["cpu_job"] = job
        res["gpu_layer"] = layer_t
        return res
