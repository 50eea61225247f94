// Embedding gather on the device: out[i, :] = table[ids[i], :] as f32.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// ids i32 [n] (device), table f32/f16/bf16 [vocab, d] contiguous, out f32 [n, d]. The ids live on
// the device, so they are not validated on the host: an id outside [0, vocab) gives a row of NaN
// (loud, where the CPU backend throws kInvalidArgument).
void embedding(const TensorView& ids, const TensorView& table, const TensorView& out,
               cudaStream_t stream);

}  // namespace tandem::cuda
