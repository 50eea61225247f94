// Row scatter and gather on the device (Backend::scatter_rows, gather_rows): f32 rows to offsets of
// a f32/f16/bf16 destination, e.g. new K/V rows of several sequences into their KV blocks in one
// launch.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// dst.data[offsets[i] + c] <- src[i, c] converted to dst's dtype (round to nearest even, as
// convert), for i < n and c < row. src: f32 [n * row] contiguous; offsets: n element offsets in
// device memory; dst: device or mapped pinned memory. Rows must not overlap (no check here).
void scatter_rows(const TensorView& src, const TensorView& dst, const int64_t* offsets, int64_t n,
                  int64_t row, cudaStream_t stream);

// dst[i, c] <- src.data[offsets[i] + c], same dtype (f32/f16/bf16, bits copied), for i < n and
// c < row. src: device memory; offsets: n element offsets in device memory; dst: contiguous
// device or mapped pinned memory.
void gather_rows(const TensorView& src, const int64_t* offsets, int64_t n, int64_t row,
                 const TensorView& dst, cudaStream_t stream);

}  // namespace tandem::cuda
