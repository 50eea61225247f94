// Elementwise f32 ops on the device: silu_mul, relu, add. Views need a contiguous last dim;
// leading dims may be strided. All launches are on `stream` and return at once.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// out[n, f] = silu(gate) * up; out may alias gate or up.
void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out,
              cudaStream_t stream);
// x = max(x, 0) in place.
void relu(const TensorView& x, cudaStream_t stream);
// out = a + b; out may alias a or b.
void add(const TensorView& a, const TensorView& b, const TensorView& out, cudaStream_t stream);

}  // namespace tandem::cuda
