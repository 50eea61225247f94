// Copy with conversion between f32/f16/bf16 on the device: dst <- src, same shape.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// Views need a contiguous last dim; leading dims may be strided. Either may be mapped pinned host
// memory (kPinned), accessed through its device alias. Same dtype, both contiguous and dst not
// pinned: one cudaMemcpyAsync; a pinned dst is written by the kernel, so a host thread may read
// it once a flag raised after it is seen (a copy engine's write to pinned memory is only
// guaranteed to the host after a synchronisation). Narrowing rounds to nearest even (as the
// CPU's f32_to_f16/f32_to_bf16).
void convert(const TensorView& src, const TensorView& dst, cudaStream_t stream);

}  // namespace tandem::cuda
