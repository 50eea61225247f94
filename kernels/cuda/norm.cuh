// RMSNorm and LayerNorm on the device, row-wise over the last dim, f32.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// x, out f32 [rows, d] (last dim contiguous, out may alias x); w f32 [d].
// out = x / sqrt(mean(x^2) + eps) * w.
void rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out,
              cudaStream_t stream);
// out = (x - mean) / sqrt(var + eps) * w + b (two passes: mean, then squared deviations).
void layer_norm(const TensorView& x, const TensorView& w, const TensorView& b, float eps,
                const TensorView& out, cudaStream_t stream);

}  // namespace tandem::cuda
