// Measured limits of this machine, for benchmarks that report achieved figures against what the
// memory and the cores can deliver: streaming read bandwidth and AVX2 FMA throughput.
#pragma once

#include <cstddef>

#include "kernels/cpu/isa.h"

namespace tandem {

// Best-of-several streaming read bandwidth in GB/s (1e9 bytes/s) over a buffer of `bytes`
// (choose it much larger than the last-level cache), read by `threads` oneTBB workers each
// streaming its own slice. threads <= 0 means the default concurrency of the current arena.
// huge_pages: the buffer from host_heap_huge (2 MiB pages where THP allows), the pages the CPU
// backend's weights are read from when copied there (WeightMemory::kHuge); else the plain heap.
double measure_read_bandwidth_gbs(size_t bytes, int threads, bool huge_pages = false);

// Best-of-several AVX2 fused multiply-add throughput in 1e9 single-precision FMAs per second
// (one FMA = one lane of one _mm256_fmadd_ps) with `threads` oneTBB workers, each running
// independent register-resident FMA chains; no memory traffic. threads <= 0 as above.
double measure_fma_gflops(int threads);

// Best-of-several peak arithmetic rate, in GFLOP/s, of the instruction the prefill micro-kernels
// of `isa` are built on (kernels/cpu/gemm_prefill.h), register-resident chains on `threads`
// workers: avx2 8-wide FMA, avx512 16-wide FMA (2 FLOP per lane), avx512bf16 VDPBF16PS (32 bf16
// products and sums per instruction, 64 FLOP). The path must be supported (isa_supported).
double measure_peak_gflops(int threads, cpu::Isa isa);

}  // namespace tandem
