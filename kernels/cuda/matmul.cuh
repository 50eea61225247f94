// Matrix product on the device: y[n, m] = x[n, k] . w[m, k]^T (+ bias[m]).
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// x, y f32 with contiguous rows; w f32/f16/bf16 [m, k] contiguous; bias f32 [m] or empty.
// n <= kGemvMaxRows: a GEMV kernel that reads each weight row once for all n rows of x (decode is
// memory-bound), f32 accumulation, x kept in f32. Larger n: cuBLAS (cublasGemmEx, fp32 compute,
// no TF32); for f16/bf16 weights x is first converted to the weight type in `ws`.
void matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& y,
            cublasHandle_t cublas, Workspace& ws, cudaStream_t stream);

inline constexpr int64_t kGemvMaxRows = 8;

}  // namespace tandem::cuda
