// Copy with conversion between f32/f16/bf16 on the device: dst <- src, same shape.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// Views need a contiguous last dim; leading dims may be strided. Same dtype and both contiguous:
// one cudaMemcpyAsync. Narrowing rounds to nearest even (as the CPU's f32_to_f16/f32_to_bf16).
void convert(const TensorView& src, const TensorView& dst, cudaStream_t stream);

}  // namespace tandem::cuda
