// Norm kernels: grid (rows) x 1, one row per block, 256 threads striding over d, block
// reductions through warp shuffles (32 floats of shared memory). Each thread reads and writes
// only its own elements, so out may alias x.
#include "kernels/cuda/norm.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

template <bool kLayerNorm>
__global__ void norm_kernel(const float* x, RowLayout lx, const float* w, const float* b, float eps,
                            float* out, RowLayout lo) {
  __shared__ float scratch[kWarp];
  const int64_t d = lx.cols;
  const float* xr = x + lx.offset(blockIdx.x);
  float* orow = out + lo.offset(blockIdx.x);
  float mean = 0.0f;
  if constexpr (kLayerNorm) {
    float s = 0.0f;
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) s += xr[c];
    mean = block_sum(s, scratch) / static_cast<float>(d);
  }
  float sq = 0.0f;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    const float v = xr[c] - mean;
    sq += v * v;
  }
  const float var = block_sum(sq, scratch) / static_cast<float>(d);
  const float s = 1.0f / sqrtf(var + eps);
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) {
    float v = (xr[c] - mean) * s * w[c];
    if constexpr (kLayerNorm) v += b[c];
    orow[c] = v;
  }
}

void check_args(const TensorView& x, const TensorView& w, const TensorView& out) {
  TANDEM_CHECK(x.dtype == DType::kF32 && out.dtype == DType::kF32 && w.dtype == DType::kF32,
               "norm: f32 only, x ", x.describe(), " w ", w.describe(), " out ", out.describe());
  TANDEM_CHECK(same_shape(x, out) && w.numel() == x.dim(-1) && w.contiguous(), "norm shapes: x ",
               x.describe(), " w ", w.describe(), " out ", out.describe());
  check_device_memory(x, "norm x");
  check_device_memory(w, "norm w");
  check_device_memory(out, "norm out");
}

template <bool kLayerNorm>
void launch(const TensorView& x, const TensorView& w, const TensorView& b, float eps,
            const TensorView& out, cudaStream_t stream) {
  const int64_t rows = n_rows(x);
  if (rows == 0 || x.dim(-1) == 0) return;
  TANDEM_CHECK(rows <= 0x7fffffff, "norm: too many rows ", rows);
  TANDEM_LAUNCH(static_cast<unsigned>(rows), kThreads, 0, stream, norm_kernel<kLayerNorm>)
  (x.as<const float>(), row_layout(x), w.as<const float>(), b.as<const float>(), eps,
   out.as<float>(), row_layout(out));
  TANDEM_CUDA_LAUNCH_CHECK(kLayerNorm ? "layer_norm" : "rms_norm");
}

}  // namespace

void rms_norm(const TensorView& x, const TensorView& w, float eps, const TensorView& out,
              cudaStream_t stream) {
  check_args(x, w, out);
  launch<false>(x, w, TensorView(), eps, out, stream);
}

void layer_norm(const TensorView& x, const TensorView& w, const TensorView& b, float eps,
                const TensorView& out, cudaStream_t stream) {
  check_args(x, w, out);
  TANDEM_CHECK(b.dtype == DType::kF32 && b.numel() == x.dim(-1) && b.contiguous(),
               "layer_norm bias ", b.describe());
  check_device_memory(b, "layer_norm bias");
  launch<true>(x, w, b, eps, out, stream);
}

}  // namespace tandem::cuda
