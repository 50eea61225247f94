// Softmax kernel: grid (rows) x 1, one row per block, 256 threads striding over d; three passes
// (max, exp and sum, scale), each thread touching only its own elements.
#include "kernels/cuda/softmax.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void softmax_kernel(float* x, RowLayout lx) {
  __shared__ float scratch[kWarp];
  const int64_t d = lx.cols;
  float* xr = x + lx.offset(blockIdx.x);
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) m = fmaxf(m, xr[c]);
  m = block_max(m, scratch);
  if (m == -INFINITY) {  // numeric guard: every entry masked; zeros instead of NaN
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) xr[c] = 0.0f;
    return;
  }
  float s = 0.0f;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float e = expf(xr[c] - m);
    xr[c] = e;
    s += e;
  }
  const float inv = 1.0f / block_sum(s, scratch);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) xr[c] *= inv;
}

}  // namespace

void softmax(const TensorView& x, cudaStream_t stream) {
  TANDEM_CHECK(x.dtype == DType::kF32, "softmax x ", x.describe());
  check_device_memory(x, "softmax x");
  const int64_t rows = n_rows(x);
  if (rows == 0 || x.dim(-1) == 0) return;
  TANDEM_CHECK(rows <= 0x7fffffff, "softmax: too many rows ", rows);
  TANDEM_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream, softmax_kernel)
  (x.as<float>(), row_layout(x));
  TANDEM_CUDA_LAUNCH_CHECK("softmax");
}

}  // namespace tandem::cuda
