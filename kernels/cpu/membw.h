// Measured limits of this machine, for benchmarks that report achieved figures against what the
// memory and the cores can deliver: streaming read bandwidth and AVX2 FMA throughput.
#pragma once

#include <cstddef>

namespace tandem {

// Best-of-several streaming read bandwidth in GB/s (1e9 bytes/s) over a buffer of `bytes`
// (choose it much larger than the last-level cache), read by `threads` oneTBB workers each
// streaming its own slice. threads <= 0 means the default concurrency of the current arena.
double measure_read_bandwidth_gbs(size_t bytes, int threads);

// Best-of-several AVX2 fused multiply-add throughput in 1e9 single-precision FMAs per second
// (one FMA = one lane of one _mm256_fmadd_ps) with `threads` oneTBB workers, each running
// independent register-resident FMA chains; no memory traffic. threads <= 0 as above.
double measure_fma_gflops(int threads);

}  // namespace tandem
