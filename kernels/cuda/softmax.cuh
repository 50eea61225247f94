// Row-wise softmax in place on the device over the last dim of x [rows, d], f32.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// A row whose entries are all -inf becomes zeros (as on the CPU), never NaN.
void softmax(const TensorView& x, cudaStream_t stream);

}  // namespace tandem::cuda
