// Rotary position embedding on the device, in place on x [n, heads, head_dim] f32.
#pragma once

#include "kernels/backend.h"
#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// pos i32 [n] (device); inv_freq f32 [rope.rotary_dim / 2] (device copy of rope.inv_freq, which
// the backend uploads once per table). neox: pairs (i, i + rotary_dim/2), else (2i, 2i+1);
// (a, b) <- (a cos - b sin, b cos + a sin), angle = pos * inv_freq[i] in double (as the CPU),
// cos and sin times mscale; dims >= rotary_dim untouched.
void rope(const TensorView& x, const TensorView& pos, const RopeTable& rope, const float* inv_freq,
          cudaStream_t stream);

}  // namespace tandem::cuda
