"""The model shape, the device figures, the assumptions and the small runs the fit needs.

Every other module reads these; the command line overrides DEFAULTS (one flag per key).
"""

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
