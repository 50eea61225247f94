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
"""
import argparse
import functools
import glob
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from fractions import Fraction

# ---------------------------------------------------------------------------------------------
# The model shape (Llama-3-8B; `make-model --shape llama-3.1-8b` is the same with a 128K context)

SHAPE = dict(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336,
             vocab=128256, wbytes=2, kvbytes=2, block=64, sinks=4)

# Published device figures (sources in the document) and the assumptions of the model.
DEVICES = {
    "H100 SXM": dict(hbm_tbs=3.35, bf16_tflops=989.0, fp32_tflops=67.0, mem_gb=80.0, sms=132),
    "H200 SXM": dict(hbm_tbs=4.8, bf16_tflops=989.0, fp32_tflops=67.0, mem_gb=141.0, sms=132),
}
DEFAULTS = dict(
    pcie_gbs=55.0,       # PCIe 5.0 x16, effective, each way
    launch_us=4.0,       # per kernel launch (and per cuBLAS call, per async copy call), no graphs
    sync_us=10.0,        # per host synchronisation (cudaStreamSynchronize after a download)
    hbm_eff=0.7,         # fraction of HBM peak a memory-bound kernel reaches
    compute_eff=0.7,     # fraction of the bf16 tensor peak a cuBLAS GEMM reaches
    host_gib=512.0,      # host RAM of the GPU box
    host_keep_gib=18.0,  # host RAM not available to the KV host tier (OS, process, 2 GiB reserve)
    cpu_cores=32,        # cores the host attention runs on
    cpu_bw_cap_gbs=300.0,  # achievable socket read bandwidth: host attention cannot exceed it
    workspace_gib=1.0,   # CUDA context, cuBLAS workspace, activations
    reserve_gib=2.0,     # kept free on the device (as `bench-decode --batch max`)
    host_fraction=1.0,   # fraction of host KV entries the host attention reads (`full`: 1)
    before_dir="docs/gpu-model/before-c66c674",  # the document and counters before the plan
    cpu_call_us=20.0,    # fixed cost of one host attention call (submit, task spawn, wait)
)

CONTEXTS = (4096, 16384, 32768)
BATCHES = (1, 8, 32)
MODES = ("dense", "parallel", "ahead")
MODE_TEXT = {"dense": "all KV on the GPU", "parallel": "hybrid `parallel`",
             "ahead": "hybrid `ahead`"}
WINDOW_FRAC = {"dense": 1.0, "parallel": 0.25, "ahead": 0.25}
MAX_BATCH_CAP = 1024

# The small runs the fit needs (see plan()): contexts, generated tokens, vocabularies, batches.
# Contexts of the fit (T1, T2) and a held-out one (T3), per mode: the fewest device keys that
# still split the window's keys (>= 512: the combine kernel runs, as at the target contexts).
# The emulator spends most of its time in attention (a fiber per CUDA thread).
FIT_CTX = {"dense": (640, 768), "parallel": (2304, 2816), "ahead": (2304, 2816)}
HELD_CTX = {"dense": 704, "parallel": 2560, "ahead": 2560}
FIT_GEN = 2      # bench-decode's least: one warm-up step and one counted step
FIT_VOCAB = (1024, 2048)
# The emulated checkpoints: the 8B shape with an FFN of 512 (the FFN GEMVs are most of the
# emulator's time; no counter the fit feeds the model depends on the FFN width: see Model).
EMU_SHAPE = dict(SHAPE, ffn=512)
REGIMES = {"gemv": (1, 2), "gemm": (9, 10)}  # matmul n <= 8: GEMV kernel; n > 8: cuBLAS
FEATURES = ("1", "B", "V", "V*B", "L", "L*B", "L*B*T")


# ---------------------------------------------------------------------------------------------
# Analytic counters: what the CUDA path does in one decode step, read off the launch code
# (models/model.cpp, kvstore/hybrid_kv.cpp, kernels/cuda/*.cu). Bytes are unique bytes (each
# byte a kernel touches counted once per launch): the DRAM traffic with perfect on-chip reuse
# inside a kernel and none across kernels.

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
    one flag wait and one merge per layer, the rows stored by one scatter_rows per tensor)."""
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
        if evict:  # oldest window block to the host: K and V downloaded (per sequence)
            for _ in range(B):
                st.copy("d2h", blk * hkv * d * kvb, sync=True)
                st.copy("d2h", blk * hkv * d * kvb, sync=True)
        for _ in range(2):  # the new K and V rows into the device blocks (f32 -> bf16)
            st.copy("h2d", B * 8)  # row offsets
            st.kernel("scatter_kernel<__nv_bfloat16>", grid_for(B * hkv * d, 256), 256,
                      B * hkv * d * 4 + B * 8, B * hkv * d * kvb)
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


# ---------------------------------------------------------------------------------------------
# The small runs (emulator or analytic) and their collection

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


def write_bf16_pattern(f, n, scale, seed):
    """n bf16 values, uniform in [-scale, scale], as a repeated 64 KiB pattern (fast)."""
    x = seed * 0x9E3779B97F4A7C15 + 1 & (2**64 - 1)
    vals = bytearray()
    for _ in range(32768):
        x ^= (x >> 12)
        x ^= (x << 25) & (2**64 - 1)
        x ^= (x >> 27)
        r = (x * 0x2545F4914F6CDD1D & (2**64 - 1)) >> 40
        v = (r / 2.0**24 * 2.0 - 1.0) * scale
        bits = int.from_bytes(__import__("struct").pack("<f", v), "little") >> 16
        vals += bits.to_bytes(2, "little")
    pat = bytes(vals)
    full, rest = divmod(n * 2, len(pat))
    for _ in range(full):
        f.write(pat)
    f.write(pat[:rest])


def make_model(out, layers, vocab, s=SHAPE):
    """A random-weight Llama-3.1-8B-shaped checkpoint with `layers` layers and `vocab` tokens
    (what `tandem make-model --shape llama-3.1-8b` writes, with those two changed)."""
    if os.path.exists(os.path.join(out, "model.safetensors")):
        return
    os.makedirs(out, exist_ok=True)
    h, hq, hkv, d, ffn = s["hidden"], s["heads"], s["kv_heads"], s["head_dim"], s["ffn"]
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
           "num_hidden_layers": layers, "num_attention_heads": hq, "num_key_value_heads": hkv,
           "intermediate_size": ffn, "vocab_size": vocab, "max_position_embeddings": 131072,
           "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
           "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                            "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192},
           "tie_word_embeddings": False, "hidden_act": "silu", "bos_token_id": 1,
           "eos_token_id": 2, "torch_dtype": "bfloat16"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f)
    tensors = [("model.embed_tokens.weight", [vocab, h])]
    for li in range(layers):
        p = "model.layers.%d." % li
        tensors += [(p + "input_layernorm.weight", [h]),
                    (p + "post_attention_layernorm.weight", [h]),
                    (p + "self_attn.q_proj.weight", [hq * d, h]),
                    (p + "self_attn.k_proj.weight", [hkv * d, h]),
                    (p + "self_attn.v_proj.weight", [hkv * d, h]),
                    (p + "self_attn.o_proj.weight", [h, hq * d]),
                    (p + "mlp.gate_proj.weight", [ffn, h]),
                    (p + "mlp.up_proj.weight", [ffn, h]),
                    (p + "mlp.down_proj.weight", [h, ffn])]
    tensors += [("model.norm.weight", [h]), ("lm_head.weight", [vocab, h])]
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in tensors:
        nb = math.prod(shape) * 2
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [off, off + nb]}
        off += nb
    hs = json.dumps(header).encode()
    hs += b" " * (-len(hs) % 8)
    tmp = os.path.join(out, "model.safetensors.tmp")
    with open(tmp, "wb") as f:
        f.write(len(hs).to_bytes(8, "little"))
        f.write(hs)
        for i, (name, shape) in enumerate(tensors):
            n = math.prod(shape)
            if len(shape) == 1:
                f.write(b"\x80\x3f" * n)  # bf16 1.0
            else:
                write_bf16_pattern(f, n, 1.7320508 / math.sqrt(shape[-1]), i + 1)
    os.replace(tmp, os.path.join(out, "model.safetensors"))


def collect(args):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    emu = args.emu_bin or os.path.join(root, "build-emu", "tandem")
    cpu = args.cpu_bin or os.path.join(root, "build", "tandem")
    t0 = time.time()
    if not args.skip_emulator:
        if not os.access(emu, os.X_OK):
            sys.exit("gpu_model: no emulator binary %s (build it with -DTANDEM_CUDA=EMULATE)"
                     % emu)
        models = args.models_dir or os.path.join(os.path.dirname(emu), "gpu-model-models")
        os.makedirs(args.counters_out, exist_ok=True)
        out = os.path.join(args.counters_out, "counters.jsonl")
        lines, running, todo = [], [], list(plan())
        env = dict(os.environ, TANDEM_EMU_PROTECT="0")  # no page protection: faster copies
        while todo or running:
            while todo and len(running) < args.jobs:
                p = todo.pop(0)
                mdir = os.path.join(models, "l8b-f%d-L%d-V%d" % (EMU_SHAPE["ffn"], p["layers"],
                                                                  p["vocab"]))
                make_model(mdir, p["layers"], p["vocab"], EMU_SHAPE)
                depths = ",".join(str(c - FIT_GEN) for c in p["ctxs"])
                cmd = [emu, "bench-decode", "--model", mdir, "--device", "cuda", "--fill",
                       "import", "--depth", depths, "--gen", str(FIT_GEN), "--batch",
                       ",".join(str(b) for b in p["batches"])] + kv_flags(p["mode"])
                proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, env=env)
                running.append((p, cmd, proc, time.time()))
            p, cmd, proc, ts = running.pop(0)
            stdout, stderr = proc.communicate()
            if proc.returncode != 0:
                sys.exit("gpu_model: %s failed:\n%s" % (" ".join(cmd), stderr[-4000:]))
            for line in stdout.splitlines():
                if not line.startswith("{"):
                    continue
                j = json.loads(line)
                if "emulator" not in j and not args.time_only:
                    sys.exit("gpu_model: no \"emulator\" key in the bench-decode output: %s"
                             % line[:200])
                rec = dict(source="emulator", mode=p["mode"], layers=p["layers"],
                           vocab=p["vocab"], batch=j["batch"], depth=j["depth"], gen=FIT_GEN,
                           window=j.get("window", 0), emulator=j.get("emulator"),
                           ffn=EMU_SHAPE["ffn"],
                           bench={k: j[k] for k in ("ms_per_step", "device", "kv", "cpu_attn")
                                  if k in j})
                lines.append(json.dumps(rec, sort_keys=True))
            print("gpu_model: %s L=%d V=%d batches %s contexts %s: %.0f s"
                  % (p["mode"], p["layers"], p["vocab"], p["batches"], p["ctxs"],
                     time.time() - ts), file=sys.stderr)
        lines.sort()
        if args.time_only:
            print("gpu_model: --time-only: %.0f s, nothing written" % (time.time() - t0),
                  file=sys.stderr)
            return
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
        print("gpu_model: wrote %s (%.0f s)" % (out, time.time() - t0), file=sys.stderr)
    if not args.skip_cpu:
        if not os.access(cpu, os.X_OK):
            sys.exit("gpu_model: no CPU binary %s (scripts/build.sh)" % cpu)
        up0 = open("/proc/loadavg").read().split()[:3]
        cmd = [cpu, "bench-cpu-attn", "--contexts", "4096,16384", "--batch", "1", "--dtypes",
               "bf16", "--threads", "1,0", "--min-time", "0.3"]
        r = subprocess.run(cmd, capture_output=True, text=True, check=True)
        up1 = open("/proc/loadavg").read().split()[:3]
        cpuinfo = [ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                   if ln.startswith("model name")][:1]
        head = {"collected": {"command": " ".join(["build/tandem"] + cmd[1:]),
                              "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                              "cpu": cpuinfo[0] if cpuinfo else "?",
                              "nproc": os.cpu_count(),
                              "loadavg_before": up0, "loadavg_after": up1}}
        with open(args.cpu_attn_out, "w") as f:
            f.write(json.dumps(head, sort_keys=True) + "\n" + r.stdout)
        print("gpu_model: wrote %s" % args.cpu_attn_out, file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# Kernel categories and the fit

CATEGORIES = (("gemv", "gemv"), ("attention", "attention_kernel"),
              ("attention", "attention_batch"), ("combine", "combine"), ("merge", "merge"),
              ("convert", "convert"), ("scatter", "scatter"), ("flag", "_flag_kernel"),
              ("norm", "norm"), ("rope", "rope"), ("elementwise", "elementwise"),
              ("embedding", "embedding"))
CAT_NAMES = tuple(dict.fromkeys(c for c, _ in CATEGORIES)) + ("other",)
CAT_FIELDS = ("launches", "device_read_bytes", "device_write_bytes", "mapped_read_bytes",
              "mapped_write_bytes")
STEP_FIELDS = ("launches", "copies", "h2d_bytes", "d2h_bytes", "d2d_bytes", "memset_bytes",
               "host_syncs", "kernel_device_read_bytes", "kernel_device_write_bytes",
               "kernel_mapped_read_bytes", "kernel_mapped_write_bytes", "cublas_calls",
               "cublas_flops", "cublas_bytes", "h2d_copies", "d2h_copies", "d2d_copies")


def structural_keys():
    """Counters that do not depend on the FFN width: what the fit carries to the target."""
    keys = ["launches", "copies", "h2d_bytes", "d2h_bytes", "d2d_bytes", "memset_bytes",
            "host_syncs",
            "kernel_mapped_read_bytes", "kernel_mapped_write_bytes", "cublas_calls",
            "h2d_copies", "d2h_copies", "d2d_copies"]
    for cat in CAT_NAMES:
        keys += ["%s.launches" % cat, "%s.mapped_read_bytes" % cat,
                 "%s.mapped_write_bytes" % cat]
    return keys


def category(name):
    for cat, key in CATEGORIES:
        if key in name:
            return cat
    return "other"


def flatten(em):
    """One run's counters as a flat dict: step fields and category.field."""
    out = {k: float(em["per_step"].get(k, 0) or 0) for k in STEP_FIELDS}
    for cat in CAT_NAMES:
        for fld in CAT_FIELDS:
            out["%s.%s" % (cat, fld)] = 0.0
    for name, e in em.get("kernels_per_step", em.get("kernels", {})).items():
        cat = category(name)
        for fld in CAT_FIELDS:
            out["%s.%s" % (cat, fld)] += float(e.get(fld, 0) or 0)
    # The per-kernel table holds totals over the run's steps or per-step values: per step.
    steps = max(1, em.get("steps", 1))
    launches = sum(out["%s.launches" % c] for c in CAT_NAMES)
    if launches > out["launches"] * 1.5:
        for k in list(out):
            if "." in k:
                out[k] /= steps
    return out


def features(L, B, V, T):
    return [1, B, V, V * B, L, L * B, L * B * T]


def solve(rows, rhs):
    """Exact solution of a square linear system (Fractions, Gauss-Jordan)."""
    n = len(rows)
    a = [[Fraction(x) for x in r] + [Fraction(y)] for r, y in zip(rows, rhs)]
    for c in range(n):
        p = next((r for r in range(c, n) if a[r][c] != 0), None)
        if p is None:
            raise ValueError("singular design")
        a[c], a[p] = a[p], a[c]
        for r in range(n):
            if r != c and a[r][c] != 0:
                f = a[r][c] / a[c][c]
                a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    return [a[i][n] / a[i][i] for i in range(n)]


def design(mode):
    """GEMV regime: 7 runs solve the 7 features, 2 more are held out. cuBLAS regime: the
    change from the GEMV regime's structure (a conversion launch and a cuBLAS call instead of
    a GEMV per matmul) as d0 + d1 * L from 2 runs, a third held out."""
    b1, b2 = REGIMES["gemv"]
    c1, c2 = REGIMES["gemm"]
    v1, v2 = FIT_VOCAB
    t1, t2 = FIT_CTX[mode]
    t3 = HELD_CTX[mode]
    fit = [(1, b1, v1, t1), (1, b2, v1, t1), (2, b1, v1, t1), (2, b2, v1, t1), (1, b1, v1, t2),
           (1, b1, v2, t1), (1, b2, v2, t1)]
    held = [(1, b2, v1, t2), (1, b1, v1, t3), (1, b2, v1, t3)]
    gemm_fit = [(1, c1, v1, t1), (2, c1, v1, t1)]
    gemm_held = [(1, c2, v1, t1)]
    return fit, held, gemm_fit, gemm_held


class Fit:
    """Per mode: each counter as an exact linear function of FEATURES (GEMV regime), plus
    d0 + d1 * L for the cuBLAS regime."""

    def __init__(self, runs):
        self.coef, self.delta, self.check, self.source = {}, {}, {}, set()
        self.has_copies = False
        by = {}
        for r in runs:
            self.source.add(r.get("source", "?"))
            ps = r["emulator"]["per_step"]
            self.has_copies |= "copies" in ps  # emulators since f5e82e8 count copy calls
            ctx = r["depth"] + r["gen"]
            by[(r["mode"], r["layers"], r["batch"], r["vocab"], ctx)] = flatten(r["emulator"])
        self.by = by
        for mode in MODES:
            fit, held, gfit, gheld = design(mode)
            missing = [p for p in fit + gfit if (mode,) + p not in by]
            if missing:
                raise SystemExit("gpu_model: the counters lack the runs (L, B, V, T) %s of %s"
                                 % (missing, mode))
            keys = sorted(by[(mode,) + fit[0]])
            rows = [features(*q) for q in fit]
            coef = {k: solve(rows, [by[(mode,) + q][k] for q in fit]) for k in keys}
            self.coef[mode] = coef

            def gemv(k, q):
                return sum(c * f for c, f in zip(coef[k], features(*q)))

            delta = {}
            for k in keys:
                d = [Fraction(by[(mode,) + q][k]) - gemv(k, q) for q in gfit]
                d1 = (d[1] - d[0]) / (gfit[1][0] - gfit[0][0])
                delta[k] = (d[0] - d1 * gfit[0][0], d1)
            self.delta[mode] = delta
            for regime, pts in (("gemv", held), ("gemm", gheld)):
                worst = {}
                for q in pts:
                    if (mode,) + q not in by:
                        continue
                    got = by[(mode,) + q]
                    pred = self.at(mode, *q)
                    for k in keys:
                        err = abs(pred[k] - got[k]) / max(abs(got[k]), 1.0)
                        if err >= worst.get(k, (-1, None))[0]:
                            worst[k] = (err, q)
                self.check[(mode, regime)] = worst

    def at(self, mode, L, B, V, T):
        f = features(L, B, V, T)
        out = {}
        for k, cs in self.coef[mode].items():
            v = sum(c * x for c, x in zip(cs, f))
            if B > 8:
                d0, d1 = self.delta[mode][k]
                v += d0 + d1 * L
            out[k] = float(v)
        return out


# ---------------------------------------------------------------------------------------------
# Host attention from the measurement

class CpuAttn:
    def __init__(self, path, cores, cap_gbs, call_us):
        self.head, self.machine, self.rows = {}, {}, []
        for line in open(path):
            line = line.strip()
            if not line:
                continue
            j = json.loads(line)
            if "collected" in j:
                self.head = j["collected"]
            elif "context" in j and j.get("kv_dtype") == "bf16" and not j.get("skipped"):
                self.rows.append(j)
            elif "read_bw_gbs" in j:
                self.machine = j
        one = sorted((r for r in self.rows if r["threads"] == 1 and r["batch"] == 1),
                     key=lambda r: r["context"])
        allc = sorted((r for r in self.rows if r["threads"] > 1 and r["batch"] == 1),
                      key=lambda r: r["context"])
        if len(one) < 2 or not allc:
            raise SystemExit("gpu_model: %s needs bf16 batch-1 rows at two contexts for one "
                             "thread and for all cores" % path)
        # The rate: all cores of this machine on the largest context (KV far beyond the
        # caches), best call: the least disturbed by other jobs on this shared machine.
        big = allc[-1]
        self.big = big
        self.cores_measured = big["threads"]
        self.all_cores_gbs = big["kv_gbs_best"]
        self.per_core_gbs = self.all_cores_gbs / self.cores_measured
        self.one_core_gbs = one[-1]["kv_gbs_best"]
        self.overhead_s = call_us * 1e-6
        self.cores, self.cap_gbs = cores, cap_gbs
        self.rate_gbs = min(cores * self.per_core_gbs, cap_gbs)
        self.bound = "cores" if cores * self.per_core_gbs < cap_gbs else "socket bandwidth"

    def seconds(self, nbytes):
        """One host attention call (one sequence, one layer) on the GPU server."""
        return self.overhead_s + nbytes / (self.rate_gbs * 1e9)


# ---------------------------------------------------------------------------------------------
# The time model

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


# ---------------------------------------------------------------------------------------------
# The document

def fmt_ms(x):
    if x >= 0.1:
        return "%.1f" % (x * 1e3)
    return "%.2f" % (x * 1e3)


def fmt_tps(x):
    return "%.0f" % x if x >= 10 else "%.1f" % x


def bound_of(r):
    parts = r["parts"]
    items = dict(HBM=parts["hbm"], launches=parts["launch"], syncs=parts["sync"],
                 PCIe=parts["pcie"], CPU=r["idle"])
    return max(items, key=items.get)


def wrap(text):
    """Prose wrapped under 100 columns; headings, tables, quotes and lists' first lines kept."""
    out = []
    for para in text.split("\n"):
        if para.startswith(("|", "#", ">", "`")) or len(para) < 100:
            out.append(para)
            continue
        indent = "  " if para.startswith(("- ", "1. ", "2. ", "3. ")) else ""
        out.append(textwrap.fill(para, 99, subsequent_indent=indent, break_long_words=False,
                                 break_on_hyphens=False))
    return "\n".join(out)


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

    w("## What is modelled\n")
    w("A Llama-3-8B-shaped model (32 layers, hidden 4096, 32 query heads, 8 KV heads, head_dim "
      "128, FFN 14336, vocab 128256; bf16 weights, %.2f GB; bf16 KV, 128 KiB per token over "
      "all layers) decoding one token per sequence per step with `--sparse full` (the host "
      "part reads every host entry, exact), at contexts 4K, 16K and 32K and batches 1, 8, 32 "
      "and the largest that fits, in three modes:\n" % (weight_bytes() / 1e9))
    w("- **all KV on the GPU**: `--window-frac 1`, the all-device baseline of "
      "`scripts/bench_hybrid.sh` (the hybrid store with every token in the device window; "
      "`--dense` would keep f32 KV);")
    w("- **hybrid `parallel`**: window = 25% of the context on the GPU, the rest in host "
      "blocks; per layer the CPU starts the batch's host part with the layer's true queries "
      "and the GPU waits for it, after the batch's device attention, before the merge;")
    w("- **hybrid `ahead`**: the same split; the batch's host part of layer i+1 is queued "
      "during layer i with the predicted queries (layer 0 as `parallel`).\n")

    w("### Model rules\n")
    w("- GPU time of a kernel = max(bytes / (HBM bandwidth x %.2f), flops / (peak x %.2f)), "
      "summed over the step's kernels (one stream: kernels never overlap). cuBLAS GEMMs "
      "(batch > 8) use the bf16 tensor peak; the GEMV kernel (batch <= 8) the fp32 CUDA-core "
      "peak (it is memory-bound at every batch it serves)." % (p["hbm_eff"], p["compute_eff"]))
    w("- Plus %.0f us per kernel launch, per cuBLAS call and per `cudaMemcpyAsync` call, and "
      "%.0f us per host synchronisation, in series with the kernels (the counts come from "
      "the counters: a few per step, none per layer or sequence, since device-side flags, not "
      "host waits, order the host part with the GPU), and the series sum is the model's rule "
      "for launch latency." % (p["launch_us"], p["sync_us"]))
    w("- Bytes over PCIe (uploads, downloads, kernel reads of mapped pinned memory) at %.0f "
      "GB/s each way, in series." % p["pcie_gbs"])
    w("- Hybrid: the step is simulated layer by layer in the order `HybridRunner` "
      "(kvstore/hybrid_runner.h, since f8c5281 and f5e82e8) runs it. A layer's host part is "
      "one submission for the whole batch (items over sequences x KV heads, each split by "
      "its own size) that the CPU runs with all its cores: %.0f us + the batch's host KV "
      "bytes / the host attention rate of the GPU server (below). Per layer the GPU hands "
      "the batch's query rows over (one copy to pinned memory and one flag, no host sync), "
      "runs the batch's device attention (`attention_batch`: table upload, attention, "
      "combine over every sequence's sinks, window pages and own token), then one flag wait "
      "for the batch's host part and one merge over all rows, then the rest of the layer. "
      "`parallel`: the hand-over follows the layer's Q/K/V projections. `ahead`: layer "
      "i+1's hand-over (predicted queries) comes at the start of layer i, after the "
      "predicted query's GEMV, so the host part overlaps the rest of layer i and layer "
      "i+1's projections (layer 0 as `parallel`). The CPU runs the submissions one after "
      "another (FIFO). GPU idle per step = the sum over layers of max(0, host part done - "
      "GPU ready to merge). The layer's other GPU time is split before/after the hand-over "
      "by weight bytes." % p["cpu_call_us"])
    w("- Largest batch: device memory = weights + the KV pool `KvStore` allocates per "
      "sequence (per layer: sink block + window blocks + 1, blocks of 64 tokens with MAW) + "
      "logits + %.0f GiB workspace + %.0f GiB kept free (as `bench-decode --batch max`); host "
      "memory (%.0f GiB, of which %.0f GiB are not for KV) for the host blocks (K, V, MAW, "
      "digests). Capped at %d." % (p["workspace_gib"], p["reserve_gib"], p["host_gib"],
                                    p["host_keep_gib"], MAX_BATCH_CAP))
    w("- Eviction (every 64 steps a sequence's layer downloads its oldest window block, K and "
      "V, 2 syncs) is amortised per step.\n")

    w("### Inputs and assumptions\n")
    w("| input | value | source |")
    w("|---|---|---|")
    w("| H100 SXM HBM3 bandwidth, capacity | 3.35 TB/s, 80 GB | NVIDIA H100 Tensor Core GPU "
      "datasheet |")
    w("| H100 and H200 bf16 dense tensor peak | 989 TFLOP/s (1979 with sparsity) | NVIDIA "
      "H100 datasheet; H200 product brief |")
    w("| H100 and H200 fp32 CUDA-core peak | 67 TFLOP/s | same |")
    w("| H200 SXM HBM3e bandwidth, capacity | 4.8 TB/s, 141 GB | NVIDIA H200 Tensor Core GPU "
      "product brief |")
    w("| SMs (set the attention's key split) | 132 | H100 SXM datasheet; the emulator reports "
      "132 |")
    w("| PCIe 5.0 x16 | %.0f GB/s each way effective | PCI-SIG: 32 GT/s per lane, 128b/130b = "
      "63 GB/s raw; the effective rate is an assumption |" % p["pcie_gbs"])
    w("| kernel launch (and cuBLAS call, async copy call) | %.0f us | assumption: no CUDA "
      "graphs, one host thread |" % p["launch_us"])
    w("| host synchronisation | %.0f us | assumption |" % p["sync_us"])
    w("| HBM efficiency of memory-bound kernels | %.2f of peak | assumption (`--hbm-eff`) |"
      % p["hbm_eff"])
    w("| tensor efficiency of cuBLAS GEMMs | %.2f of peak | assumption (`--compute-eff`) |"
      % p["compute_eff"])
    w("| host RAM of the GPU box | %.0f GiB (%.0f GiB not for KV) | assumption (`--host-gib`,"
      " `--host-keep-gib`) |" % (p["host_gib"], p["host_keep_gib"]))
    w("| host attention cores | %d | assumption (`--cpu-cores`) |" % p["cpu_cores"])
    w("| host memory bandwidth cap | %.0f GB/s | assumption: achievable reads of one server "
      "socket with 8-12 DDR5 channels (`--cpu-bw-cap-gbs`) |" % p["cpu_bw_cap_gbs"])
    w("| fixed cost of one host attention submission (a layer's batch) | %.0f us | assumption "
      "(`--cpu-call-us`) |"
      % p["cpu_call_us"])
    w("| fraction of host entries read | %.2f | `--sparse full` (`--host-fraction`) |"
      % p["host_fraction"])
    w("")

    hd = cpu.head
    w("### Host attention: measured here, scaled to the server\n")
    w("```bash\n%s\n```\n" % hd.get("command", "build/tandem bench-cpu-attn"))
    w("On this machine (%s, %s cores), %s UTC; load average (1/5/15 min) %s before and %s "
      "after. The machine is shared and other jobs ran beside the measurement: on the quiet "
      "machine of docs/host-attention.md (2026-11-24) two cores reached 16-23 GB/s of bf16 KV, "
      "more than here.\n"
      % (hd.get("cpu", "?"), hd.get("nproc", "?"), hd.get("date_utc", "?"),
         " / ".join(hd.get("loadavg_before", ["?"])),
         " / ".join(hd.get("loadavg_after", ["?"]))))
    w("| context | threads | KV MB per call | ms per call median / best | KV GB/s median / "
      "best | read GB/s beside it | load 1m |")
    w("|---:|---:|---:|---:|---:|---:|---:|")
    for r in sorted(cpu.rows, key=lambda r: (r["context"], r["threads"])):
        if r["batch"] != 1:
            continue
        w("| %d | %d | %.1f | %.2f / %.2f | %.1f / %.1f | %.1f | %.2f |"
          % (r["context"], r["threads"], r["kv_bytes_per_call"] / 1e6, r["ms_per_call_median"],
             r["ms_per_call_best"], r["kv_gbs_median"], r["kv_gbs_best"],
             r["read_bw_gbs_adjacent"], r.get("load_avg_1m", -1)))
    w("")
    hk32 = hybrid_tokens("parallel", 32768)[1]
    w("Scaled: %.1f GB/s of bf16 KV with all %d cores here at context %d (best call: the "
      "least disturbed on a shared machine), %.1f GB/s per core; on the server min(%d x %.1f, "
      "%.0f) = **%.0f GB/s** (bound: %s). One sequence's host part of one layer at 32K "
      "(%.0f MB of K and V) then takes %.3f ms. The per-core rate is assumed to hold up to "
      "%d cores until the socket bandwidth is reached; the host part is compute-bound per "
      "core today (docs/host-attention.md), so more cores scale it until memory does not.\n"
      % (cpu.all_cores_gbs, cpu.cores_measured, cpu.big["context"], cpu.per_core_gbs,
         p["cpu_cores"], cpu.per_core_gbs, p["cpu_bw_cap_gbs"], cpu.rate_gbs, cpu.bound,
         hk32 * 4096 / 1e6, cpu.seconds(hk32 * 4096 * p["host_fraction"]) * 1e3,
         p["cpu_cores"]))

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

    w("## Left out\n")
    w("- L2 and L1: bytes are unique bytes per kernel; no reuse across kernels (16 GB of "
      "weights never fit the 50 MB L2), no extra traffic from partial sectors or misses.")
    w("- Kernel efficiency below %.0f%% of HBM peak: today's attention kernel (5 shuffle "
      "reductions per key and head, 2-byte loads; docs/cuda.md) and GEMV may reach less; the "
      "many small kernels (norms, merges, 4 KB KV writes) are latency-bound, which the launch "
      "term stands for only roughly." % (p["hbm_eff"] * 100))
    w("- Launch/execution overlap: launches are in series with the kernels. Between "
      "synchronisations a real host thread queues ahead and a running kernel hides the next "
      "launch, so launch-bound steps can be up to 2x faster than modelled; compute-bound "
      "overlap (tensor cores beside memory traffic) is not modelled either.")
    w("- CUDA graphs (not used today): the what-if table shows what removing the launch and "
      "sync terms would give, not how.")
    w("- Contention: host attention and the GPU's DMA share host memory; the thread that "
      "drives the GPU also helps run host attention; PCIe is shared by uploads, downloads and "
      "mapped reads. Nothing is charged for it.")
    w("- Host work of the driving thread besides syncs and launches: submitting host "
      "attention, turning evicted blocks into host blocks, sampling (the logits go to the "
      "host), scheduling, HTTP.")
    w("- The host part: linear in its bytes plus a fixed cost per call, from a 2-core "
      "measurement on a shared machine scaled to %d cores, one fixed cost per layer's "
      "submission whatever the batch (a batch of 1 has only 8 items for 32 cores: each item "
      "split by its own size is assumed to keep them all busy); NUMA, SMT, frequency and the "
      "order in which oneTBB runs queued work (FIFO assumed) are not modelled."
      % p["cpu_cores"])
    w("- Prefill, admission, the prefix cache, `hgca` (its host mirror and MAW update) and "
      "`topk` selection cost: decode steps of `full` only, all sequences at one context.")
    return wrap("\n".join(out)) + "\n"


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
