// RoPE kernel: grid (n tokens) x 1, 128 threads. The block first computes the token's cos/sin
// table [rotary_dim / 2] into dynamic shared memory (double precision angle, like the CPU), then
// rotates every (head, pair) of the token.
#include "kernels/cuda/rope.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void rope_kernel(float* x, int64_t x_s0, int64_t x_s1, int64_t heads, int32_t half,
                            const int32_t* pos, const float* inv_freq, float mscale, bool neox) {
  TANDEM_DYNAMIC_SHARED(float, table);  // [2 * half]: cos, then sin
  float* cs = table;
  float* sn = table + half;
  const int64_t t = blockIdx.x;
  const double p = static_cast<double>(pos[t]);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    double s, c;
    sincos(p * static_cast<double>(inv_freq[i]), &s, &c);
    cs[i] = static_cast<float>(c * static_cast<double>(mscale));
    sn[i] = static_cast<float>(s * static_cast<double>(mscale));
  }
  __syncthreads();
  const int64_t pairs = heads * half;
  for (int64_t e = threadIdx.x; e < pairs; e += blockDim.x) {
    const int64_t h = e / half;
    const int i = static_cast<int>(e % half);
    float* xh = x + t * x_s0 + h * x_s1;
    const int ia = neox ? i : 2 * i;
    const int ib = neox ? i + half : 2 * i + 1;
    const float a = xh[ia], b = xh[ib];
    xh[ia] = fmaf(a, cs[i], -b * sn[i]);
    xh[ib] = fmaf(b, cs[i], a * sn[i]);
  }
}

}  // namespace

void rope(const TensorView& x, const TensorView& pos, const RopeTable& rope, const float* inv_freq,
          cudaStream_t stream) {
  TANDEM_CHECK(x.dtype == DType::kF32 && x.ndim == 3 && x.stride[2] == 1, "rope x ", x.describe());
  const int64_t n = x.dim(0), heads = x.dim(1), hd = x.dim(2);
  TANDEM_CHECK(pos.dtype == DType::kI32 && pos.numel() == n && pos.contiguous(), "rope pos ",
               pos.describe(), " for x ", x.describe());
  TANDEM_CHECK(rope.head_dim == hd && rope.rotary_dim % 2 == 0 && rope.rotary_dim >= 0 &&
                   rope.rotary_dim <= hd &&
                   static_cast<int64_t>(rope.inv_freq.size()) == rope.rotary_dim / 2,
               "rope table head_dim=", rope.head_dim, " rotary_dim=", rope.rotary_dim,
               " inv_freq=", rope.inv_freq.size(), " for x ", x.describe());
  check_device_memory(x, "rope x");
  check_device_memory(pos, "rope pos");
  const int32_t half = rope.rotary_dim / 2;
  if (n == 0 || heads == 0 || half == 0) return;
  TANDEM_CHECK(n <= 0x7fffffff, "rope: too many tokens ", n);
  const size_t smem = 2 * static_cast<size_t>(half) * sizeof(float);  // <= 2 KB for hd <= 256
  TANDEM_LAUNCH(static_cast<unsigned>(n), kThreads, smem, stream, rope_kernel)
  (x.as<float>(), x.stride[0], x.stride[1], heads, half, pos.as<const int32_t>(), inv_freq,
   rope.mscale, rope.neox);
  TANDEM_CUDA_LAUNCH_CHECK("rope");
}

}  // namespace tandem::cuda
