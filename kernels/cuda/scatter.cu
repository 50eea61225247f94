// Scatter and gather kernels: one thread per element, grid-stride, 256 threads per block, grid =
// min(ceil(n * row / 256), 65536); element e is column e % row of row e / row. The conversion is
// convert_kernel's (from_f32 of the f32 value), so a row equals the copy() it replaces bit for
// bit.
#include "kernels/cuda/scatter.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

template <typename TD>
__global__ void scatter_kernel(const float* src, const int64_t* offsets, int64_t row, int64_t total,
                               TD* dst) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / row, c = e % row;
    dst[offsets[r] + c] = from_f32<TD>(to_f32<float>(src[e]));
  }
}

// The elements as raw bits: a gather converts nothing (2-byte types move as uint16_t).
template <typename TB>
__global__ void gather_kernel(const TB* src, const int64_t* offsets, int64_t row, int64_t total,
                              TB* dst) {
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / row, c = e % row;
    dst[e] = src[offsets[r] + c];
  }
}

}  // namespace

void gather_rows(const TensorView& src, const int64_t* offsets, int64_t n, int64_t row,
                 const TensorView& dst, cudaStream_t stream) {
  TANDEM_CHECK(src.dtype == dst.dtype && is_float_dtype(src.dtype) && dst.contiguous() &&
                   dst.numel() == n * row,
               "gather_rows ", src.describe(), " (", n, " rows of ", row, ") -> ", dst.describe());
  check_device_memory(src, "gather_rows src");
  check_device_memory(dst, "gather_rows dst");
  const int64_t total = n * row;
  if (total == 0) return;
  const unsigned grid = grid_for(total, kThreads);
  const void* s = device_pointer(src);
  void* d = device_pointer(dst);
  if (src.dtype == DType::kF32) {
    TANDEM_LAUNCH(grid, kThreads, 0, stream, gather_kernel<uint32_t>)
    (static_cast<const uint32_t*>(s), offsets, row, total, static_cast<uint32_t*>(d));
  } else {
    TANDEM_LAUNCH(grid, kThreads, 0, stream, gather_kernel<uint16_t>)
    (static_cast<const uint16_t*>(s), offsets, row, total, static_cast<uint16_t*>(d));
  }
  TANDEM_CUDA_LAUNCH_CHECK("gather_rows");
}

void scatter_rows(const TensorView& src, const TensorView& dst, const int64_t* offsets, int64_t n,
                  int64_t row, cudaStream_t stream) {
  TANDEM_CHECK(src.dtype == DType::kF32 && src.contiguous() && src.numel() == n * row &&
                   is_float_dtype(dst.dtype),
               "scatter_rows ", src.describe(), " (", n, " rows of ", row, ") -> ", dst.describe());
  check_device_memory(src, "scatter_rows src");
  check_device_memory(dst, "scatter_rows dst");
  const int64_t total = n * row;
  if (total == 0) return;
  const unsigned grid = grid_for(total, kThreads);
  const float* s = static_cast<const float*>(device_pointer(src));
  void* d = device_pointer(dst);
  switch (dst.dtype) {
    case DType::kF32:
      TANDEM_LAUNCH(grid, kThreads, 0, stream, scatter_kernel<float>)
      (s, offsets, row, total, static_cast<float*>(d));
      break;
    case DType::kF16:
      TANDEM_LAUNCH(grid, kThreads, 0, stream, scatter_kernel<__half>)
      (s, offsets, row, total, static_cast<__half*>(d));
      break;
    default:
      TANDEM_LAUNCH(grid, kThreads, 0, stream, scatter_kernel<__nv_bfloat16>)
      (s, offsets, row, total, static_cast<__nv_bfloat16*>(d));
      break;
  }
  TANDEM_CUDA_LAUNCH_CHECK("scatter_rows");
}

}  // namespace tandem::cuda
