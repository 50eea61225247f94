// Measured memory read bandwidth of this machine, for benchmarks that report achieved GB/s
// against what the memory can deliver.
#pragma once

#include <cstddef>

namespace tandem {

// Best-of-several streaming read bandwidth in GB/s (1e9 bytes/s) over a buffer of `bytes`
// (choose it much larger than the last-level cache), read by `threads` oneTBB workers each
// streaming its own slice. threads <= 0 means the default concurrency of the current arena.
double measure_read_bandwidth_gbs(size_t bytes, int threads);

}  // namespace tandem
