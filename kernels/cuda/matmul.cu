// Matmul: GEMV kernel for small n, cuBLAS otherwise, plus a bias kernel for the cuBLAS path.
//
// gemv_kernel<T, NMAX, kVec>: grid ceil(m / 8) x 1, 256 threads = 8 warps, one weight row per
// warp. Lanes stride over k in 16-byte vectors of w (8 f16/bf16 or 4 f32, kVec) or single
// elements; every lane keeps NMAX f32 sums (one per row of x), reduced by shuffles at the end.
// The weight row is read once, x rows (small, hot in L1/L2) once per weight row.
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/matmul.cuh"

namespace tandem::cuda {
namespace {

constexpr int kGemvThreads = 256;
constexpr int kRowsPerBlock = kGemvThreads / kWarp;
constexpr int kBiasThreads = 256;

// 16 bytes of weights as floats: V = 16 / sizeof(T) values.
template <typename T>
struct Vec16;
template <>
struct Vec16<float> {
  static constexpr int V = 4;
  __device__ static void load(const float* p, float* out) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    out[0] = a.x;
    out[1] = a.y;
    out[2] = a.z;
    out[3] = a.w;
  }
};
template <>
struct Vec16<__half> {
  static constexpr int V = 8;
  __device__ static void load(const __half* p, float* out) {
    const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
    const uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __half2 h;
      memcpy(&h, &u[i], 4);
      const float2 f = __half22float2(h);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};
template <>
struct Vec16<__nv_bfloat16> {
  static constexpr int V = 8;
  __device__ static void load(const __nv_bfloat16* p, float* out) {
    const uint4 a = __ldg(reinterpret_cast<const uint4*>(p));
    const uint32_t u[4] = {a.x, a.y, a.z, a.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      __nv_bfloat162 h;
      memcpy(&h, &u[i], 4);
      const float2 f = __bfloat1622float2(h);
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  }
};

template <typename T, int NMAX, bool kVec>
__global__ void gemv_kernel(const float* x, int64_t x_s0, const T* w, const float* bias, float* y,
                            int64_t y_s0, int n, int64_t m, int64_t k) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (row >= m) return;  // whole warps leave together: no shuffle below misses a lane
  const T* wr = w + row * k;
  float acc[NMAX];
#pragma unroll
  for (int r = 0; r < NMAX; ++r) acc[r] = 0.0f;
  if constexpr (kVec) {
    constexpr int V = Vec16<T>::V;
#pragma unroll 4
    for (int64_t c = static_cast<int64_t>(lane) * V; c < k; c += kWarp * V) {
      float wv[V];
      Vec16<T>::load(wr + c, wv);
#pragma unroll
      for (int r = 0; r < NMAX; ++r) {
        if (r < n) {
          const float4* xp = reinterpret_cast<const float4*>(x + r * x_s0 + c);
#pragma unroll
          for (int q = 0; q < V / 4; ++q) {
            const float4 xv = xp[q];
            acc[r] = fmaf(wv[4 * q], xv.x, acc[r]);
            acc[r] = fmaf(wv[4 * q + 1], xv.y, acc[r]);
            acc[r] = fmaf(wv[4 * q + 2], xv.z, acc[r]);
            acc[r] = fmaf(wv[4 * q + 3], xv.w, acc[r]);
          }
        }
      }
    }
  } else {
    for (int64_t c = lane; c < k; c += kWarp) {
      const float wv = to_f32<T>(wr[c]);
#pragma unroll
      for (int r = 0; r < NMAX; ++r)
        if (r < n) acc[r] = fmaf(wv, x[r * x_s0 + c], acc[r]);
    }
  }
  const float b = bias != nullptr ? bias[row] : 0.0f;
#pragma unroll
  for (int r = 0; r < NMAX; ++r) {
    const float s = warp_sum(acc[r]);
    if (lane == 0 && r < n) y[r * y_s0 + row] = s + b;
  }
}

__global__ void bias_kernel(float* y, int64_t y_s0, const float* bias, int64_t n, int64_t m) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n * m;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / m, c = e % m;
    y[r * y_s0 + c] += bias[c];
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T, int NMAX>
void launch_gemv_n(const TensorView& x, const TensorView& w, const float* bias, const TensorView& y,
                   cudaStream_t stream) {
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  constexpr int64_t V = Vec16<T>::V;
  // Vector loads need every w row and x row start on a 16-byte boundary.
  const bool vec = k % V == 0 && x.stride[0] % 4 == 0 && aligned16(w.data) && aligned16(x.data);
  const unsigned grid = static_cast<unsigned>((m + kRowsPerBlock - 1) / kRowsPerBlock);
  const float* xp = x.as<const float>();
  const T* wp = static_cast<const T*>(w.data);
  if (vec) {
    TANDEM_LAUNCH(grid, kGemvThreads, 0, stream, gemv_kernel<T, NMAX, true>)
    (xp, x.stride[0], wp, bias, y.as<float>(), y.stride[0], static_cast<int>(n), m, k);
  } else {
    TANDEM_LAUNCH(grid, kGemvThreads, 0, stream, gemv_kernel<T, NMAX, false>)
    (xp, x.stride[0], wp, bias, y.as<float>(), y.stride[0], static_cast<int>(n), m, k);
  }
  TANDEM_CUDA_LAUNCH_CHECK("gemv");
}

template <typename T>
void launch_gemv(const TensorView& x, const TensorView& w, const float* bias, const TensorView& y,
                 cudaStream_t stream) {
  const int64_t n = x.dim(0);
  if (n == 1) return launch_gemv_n<T, 1>(x, w, bias, y, stream);
  if (n == 2) return launch_gemv_n<T, 2>(x, w, bias, y, stream);
  if (n <= 4) return launch_gemv_n<T, 4>(x, w, bias, y, stream);
  return launch_gemv_n<T, 8>(x, w, bias, y, stream);
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kBF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

}  // namespace

void matmul(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& y,
            cublasHandle_t cublas, Workspace& ws, cudaStream_t stream) {
  TANDEM_CHECK(x.ndim == 2 && w.ndim == 2 && y.ndim == 2, "matmul ranks: x ", x.describe(), " w ",
               w.describe(), " y ", y.describe());
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  TANDEM_CHECK(w.dim(1) == k && y.dim(0) == n && y.dim(1) == m, "matmul shapes: x ", x.describe(),
               " w ", w.describe(), " y ", y.describe());
  TANDEM_CHECK(x.dtype == DType::kF32 && y.dtype == DType::kF32 && is_float_dtype(w.dtype),
               "matmul dtypes: x ", x.describe(), " w ", w.describe(), " y ", y.describe());
  TANDEM_CHECK((x.stride[1] == 1 || k == 1) && (y.stride[1] == 1 || m == 1) && w.contiguous(),
               "matmul layout: x, y rows contiguous, w contiguous");
  const float* bp = nullptr;
  if (!bias.empty()) {
    TANDEM_CHECK(bias.dtype == DType::kF32 && bias.numel() == m && bias.contiguous(),
                 "matmul bias ", bias.describe(), " for m=", m);
    check_device_memory(bias, "matmul bias");
    bp = bias.as<const float>();
  }
  check_device_memory(x, "matmul x");
  check_device_memory(w, "matmul w");
  check_device_memory(y, "matmul y");
  if (n == 0 || m == 0) return;
  TANDEM_CHECK(m <= int64_t{0x7fffffff} * kRowsPerBlock && k <= 0x7fffffff && n <= 0x7fffffff,
               "matmul too large: x ", x.describe(), " w ", w.describe());
  if (n <= kGemvMaxRows) {
    switch (w.dtype) {
      case DType::kF32:
        return launch_gemv<float>(x, w, bp, y, stream);
      case DType::kF16:
        return launch_gemv<__half>(x, w, bp, y, stream);
      default:
        return launch_gemv<__nv_bfloat16>(x, w, bp, y, stream);
    }
  }
  // Column-major view: Y^T[m, n] = W^T[m, k] (w read transposed, ld k) . X^T[k, n] (ld x_s0).
  const void* xb = x.data;
  int64_t ldb = x.stride[0];
  if (w.dtype != DType::kF32) {
    void* conv = ws.get(static_cast<size_t>(n * k * dtype_size(w.dtype)));
    TensorView xc(conv, w.dtype, {n, k}, MemoryKind::kDevice);
    convert(x, xc, stream);
    xb = conv;
    ldb = k;
  }
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t wt = cuda_type(w.dtype);
  TANDEM_CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                                   static_cast<int>(n), static_cast<int>(k), &one, w.data, wt,
                                   static_cast<int>(k), xb, wt, static_cast<int>(ldb), &zero,
                                   y.data, CUDA_R_32F, static_cast<int>(y.stride[0]),
                                   CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  if (bp != nullptr) {
    TANDEM_LAUNCH(grid_for(n * m, kBiasThreads), kBiasThreads, 0, stream, bias_kernel)
    (y.as<float>(), y.stride[0], bp, n, m);
    TANDEM_CUDA_LAUNCH_CHECK("matmul bias");
  }
}

}  // namespace tandem::cuda
