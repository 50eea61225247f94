"""The sections of the document that say what is modelled and how: the modes, the rules, the
inputs and assumptions, the host attention measurement and its scaling, and what is left out.
"""
from .params import MAX_BATCH_CAP
from .timing import hybrid_tokens, weight_bytes


def section_modelled(w, p, cpu):
    """"What is modelled": the modes, the model rules, the inputs, the host attention."""
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


def section_left_out(w, p):
    """"Left out": what the model does not charge for."""
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
