"""Analytic counters: what the CUDA path does in one decode step, read off the launch code
(models/model.cpp, kvstore/hybrid_kv.cpp, kernels/cuda/*.cu). Bytes are unique bytes (each
byte a kernel touches counted once per launch): the DRAM traffic with perfect on-chip reuse
inside a kernel and none across kernels.
"""
import functools
import math

from .categories import flatten
from .params import SHAPE, WINDOW_FRAC


class Step:
    def __init__(self):
        self.c = dict(launches=0, h2d_bytes=0, d2h_bytes=0, d2d_bytes=0, memset_bytes=0,
                      host_syncs=0, kernel_device_read_bytes=0, kernel_device_write_bytes=0,
                      kernel_mapped_read_bytes=0, kernel_mapped_write_bytes=0, cublas_calls=0,
                      cublas_flops=0, cublas_bytes=0, copies=0, h2d_copies=0, d2h_copies=0,
                      d2d_copies=0)
        self.k = {}

    def kernel(self, name, blocks, threads, read, write, mapped_read=0):
        e = self.k.setdefault(name, dict(launches=0, blocks=0, threads=0, device_read_bytes=0,
                                         device_write_bytes=0, mapped_read_bytes=0,
                                         mapped_write_bytes=0))
        e["launches"] += 1
        e["blocks"] += blocks
        e["threads"] += blocks * threads
        e["device_read_bytes"] += read
        e["device_write_bytes"] += write
        e["mapped_read_bytes"] += mapped_read
        self.c["launches"] += 1
        self.c["kernel_device_read_bytes"] += read
        self.c["kernel_device_write_bytes"] += write
        self.c["kernel_mapped_read_bytes"] += mapped_read

    def copy(self, kind, nbytes, sync=False):
        self.c[kind + "_bytes"] += nbytes
        self.c[kind + "_copies"] += 1
        self.c["copies"] += 1
        if sync:
            self.c["host_syncs"] += 1


def grid_for(n, threads):
    return max(1, min((n + threads - 1) // threads, 65536))


def op_matmul(st, n, m, k, wb):
    """Backend::matmul, x f32 [n, k], w [m, k] of wb bytes, y f32 [n, m] (matmul.cu)."""
    if n <= 8:  # GEMV: the weight row once, the x rows once (L1/L2), y once
        st.kernel("gemv_kernel<T, NMAX, true>", (m + 7) // 8, 256, m * k * wb + n * k * 4,
                  n * m * 4)
        return
    # x converted to the weight type, then cublasGemmEx (counted as one launch)
    st.kernel("convert_kernel<TS, __nv_bfloat16>", grid_for(n * k, 256), 256, n * k * 4,
              n * k * wb)
    st.c["launches"] += 1
    st.c["cublas_calls"] += 1
    st.c["cublas_flops"] += 2 * m * n * k
    st.c["cublas_bytes"] += m * k * wb + n * k * wb + n * m * 4


def op_norm(st, rows, cols):
    st.kernel("norm_kernel<kLayerNorm>", rows, 256, rows * cols * 4 + cols * 4, rows * cols * 4)


def op_rope(st, n, heads, d):
    st.kernel("rope_kernel", n, 128, n * 4 + d // 2 * 4 + n * heads * d * 4, n * heads * d * 4)


def op_elementwise(st, total):
    st.kernel("elementwise_kernel<kOp>", grid_for(total, 256), 256, 2 * total * 4, total * 4)


def kv_state(depth, gen, window, s):
    """(window tokens, host tokens, evicts) per step 0..gen-1 of a sequence imported to depth."""
    b, sinks = s["block"], s["sinks"]
    u = max(0, depth - sinks)
    if u <= window:
        wt, ht = u, 0
    else:
        ev = -(-(u - window) // b)
        wt, ht = u - ev * b, ev * b
    out = []
    for _ in range(gen):
        evict = wt + 1 > window
        out.append((wt, ht, evict))
        if evict:
            wt, ht = wt - b, ht + b
        wt += 1
    return out


def window_of(frac, ctx, s):
    b = s["block"]
    return max(1, math.ceil(frac * ctx / b)) * b


def op_attention_batch(st, s, B, segs, sms):
    """Backend::attention_batch (attention_batch.cu): one table upload, one attention launch over
    every segment's blocks (each planned as its single call), one combine over the groups.
    segs: per sequence, [(keys, kv dtype name, kv bytes, pages)] in merge order. Every group
    here has more than one segment, so every segment writes split partials and the combine
    folds them (combine_splits, then merge_element) into the group's rows."""
    hq, hkv, d = s["heads"], s["kv_heads"], s["head_dim"]
    heads_blocks = hkv * ((hq // hkv + 3) // 4)
    part = hq * d * 4 + hq * 4
    read = write = blocks = pages_all = nseg = 0
    for seq in segs:
        for keys, _, kvb, pages in seq:
            nsplit = 1
            if heads_blocks < 2 * sms and keys >= 512:
                nsplit = min(-(-2 * sms // heads_blocks), keys // 256, 64)
            read += hq * d * 4 + 4 + 2 * keys * hkv * d * kvb + pages * 8
            write += nsplit * part
            blocks += heads_blocks * nsplit
            pages_all += pages
            nseg += 1
    # The table: segment entries (taken as 256 bytes each: an AttnParams and its plan), block
    # and pair prefixes, groups, page offsets. The emulator counts the real bytes.
    st.copy("h2d", nseg * 264 + B * 24 + 16 + pages_all * 8)
    st.kernel("attention_batch_kernel", blocks, 128, read, write)
    st.kernel("combine_batch_kernel", B * hq, 128, write, B * part)


def analytic_step(mode, L, V, B, depth, gen, step, s=SHAPE, sms=132):
    """Counters of decode step `step` (0 = the warm-up) of `bench-decode --fill import`, read
    off the batch step of kvstore/hybrid_runner.h (one host submission, one attention_batch,
    one flag wait and one merge per layer, the rows stored by one scatter_rows per tensor, the
    evicted blocks handed to a host job by one gather_rows and a flag: kvstore/hybrid_jobs.cpp).
    The host reads nothing back within the step but the logits."""
    st = Step()
    h, hq, hkv, d, ffn = s["hidden"], s["heads"], s["kv_heads"], s["head_dim"], s["ffn"]
    wb, kvb, blk = s["wbytes"], s["kvbytes"], s["block"]
    window = window_of(WINDOW_FRAC[mode], depth + gen, s)
    wt, ht, evict = kv_state(depth, gen, window, s)[step]
    ahead = mode == "ahead"
    part = hq * d * 4 + hq * 4

    def hand_over():  # the batch's query rows to pinned memory, then the flag that starts it
        st.kernel("convert_kernel<TS, float>", grid_for(B * hq * d, 256), 256, B * hq * d * 4,
                  0)
        st.c["kernel_mapped_write_bytes"] += B * hq * d * 4
        st.kernel("raise_flag_kernel", 1, 1, 0, 0)
        st.c["kernel_mapped_write_bytes"] += 4

    st.copy("h2d", B * 4)  # ids
    st.copy("h2d", B * 4)  # positions
    st.kernel("embedding_kernel", B, 256, B * 4 + B * h * wb, B * h * 4)
    for li in range(L):
        if ahead and li + 1 < L and ht > 0:  # the predicted query of layer li+1, handed over
            op_norm(st, B, h)
            op_matmul(st, B, hq * d, h, wb)
            op_rope(st, B, hq, d)
            hand_over()
        op_norm(st, B, h)
        op_matmul(st, B, hq * d, h, wb)
        op_rope(st, B, hq, d)
        op_matmul(st, B, hkv * d, h, wb)
        op_matmul(st, B, hkv * d, h, wb)
        op_rope(st, B, hkv, d)
        host = ht > 0
        if host and (not ahead or li == 0):  # the true query, for the host part
            hand_over()
        pages = -(-wt // blk)
        seq = [(s["sinks"], "__nv_bfloat16", kvb, 0), (wt, "__nv_bfloat16", kvb, pages),
               (1, "float", 4, 0)]
        op_attention_batch(st, s, B, [seq] * B, sms)
        if host:  # one flag wait, one merge of every row with its partial in pinned memory
            st.kernel("wait_flag_kernel", 1, 1, 0, 0)
            st.c["kernel_mapped_read_bytes"] += 4
            st.kernel("merge_kernel", (B * hq + 7) // 8, 256, B * part, B * part, B * part)
        moved = 2 * blk * hkv * d * kvb  # one evicted block's K and V
        if evict:  # every sequence's oldest window block into pinned memory, one gather
            st.copy("h2d", B * 8)  # block offsets
            st.kernel("gather_kernel<uint16_t>", grid_for(B * moved // kvb, 256), 256,
                      B * moved + B * 8, 0)
            st.c["kernel_mapped_write_bytes"] += B * moved
        for _ in range(2):  # the new K and V rows into the device blocks (f32 -> bf16)
            st.copy("h2d", B * 8)  # row offsets
            st.kernel("scatter_kernel<__nv_bfloat16>", grid_for(B * hkv * d, 256), 256,
                      B * hkv * d * 4 + B * 8, B * hkv * d * kvb)
        if evict:  # the flag the layer's host job (the moves into host blocks) starts on
            st.kernel("raise_flag_kernel", 1, 1, 0, 0)
            st.c["kernel_mapped_write_bytes"] += 4
        op_matmul(st, B, h, hq * d, wb)
        op_elementwise(st, B * h)
        op_norm(st, B, h)
        op_matmul(st, B, ffn, h, wb)
        op_matmul(st, B, ffn, h, wb)
        op_elementwise(st, B * ffn)
        op_matmul(st, B, h, ffn, wb)
        op_elementwise(st, B * h)
    for _ in range(B):
        st.copy("d2d", h * 4)  # the row that needs logits
    op_norm(st, B, h)
    op_matmul(st, B, V, h, wb)
    st.copy("d2h", B * V * 4, sync=True)  # logits
    return st


def analytic_run(mode, L, V, B, depth, gen, s=SHAPE, sms=132):
    """Per-step averages over the timed steps 1..gen-1, in the emulator's schema."""
    steps = [analytic_step(mode, L, V, B, depth, gen, i, s, sms) for i in range(1, gen)]
    n = len(steps)
    per = {k: sum(x.c[k] for x in steps) / n for k in steps[0].c}
    kern = {}
    for x in steps:
        for name, e in x.k.items():
            t = kern.setdefault(name, {f: 0 for f in e})
            for f, v in e.items():
                t[f] += v / n
    return {"steps": n, "per_step": per, "kernels": kern}


@functools.lru_cache(maxsize=None)
def analytic_flat(mode, L, V, B, depth, gen, ffn):
    """analytic_run of the 8B shape with this FFN width, flattened (see flatten)."""
    return tuple(sorted(flatten(analytic_run(mode, L, V, B, depth, gen,
                                             dict(SHAPE, ffn=ffn))).items()))
