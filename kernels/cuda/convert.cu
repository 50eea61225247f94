// Conversion kernel: one thread per element, grid-stride, 256 threads per block, grid =
// min(ceil(numel / 256), 65536); each element goes through f32 (exact widening, one rounding).
#include "kernels/cuda/convert.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

template <typename TS, typename TD>
__global__ void convert_kernel(const TS* src, RowLayout ls, TD* dst, RowLayout ld, int64_t total) {
  const int64_t cols = ld.cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    dst[ld.offset(r) + c] = from_f32<TD>(to_f32<TS>(src[ls.offset(r) + c]));
  }
}

template <typename TS>
void launch_to(const TensorView& src, const TensorView& dst, cudaStream_t stream) {
  const int64_t total = src.numel();
  const unsigned grid = grid_for(total, kThreads);
  const RowLayout ls = row_layout(src), ld = row_layout(dst);
  const TS* s = static_cast<const TS*>(device_pointer(src));
  void* d = device_pointer(dst);
  switch (dst.dtype) {
    case DType::kF32:
      TANDEM_LAUNCH(grid, kThreads, 0, stream, convert_kernel<TS, float>)
      (s, ls, static_cast<float*>(d), ld, total);
      break;
    case DType::kF16:
      TANDEM_LAUNCH(grid, kThreads, 0, stream, convert_kernel<TS, __half>)
      (s, ls, static_cast<__half*>(d), ld, total);
      break;
    case DType::kBF16:
      TANDEM_LAUNCH(grid, kThreads, 0, stream, convert_kernel<TS, __nv_bfloat16>)
      (s, ls, static_cast<__nv_bfloat16*>(d), ld, total);
      break;
    default:
      TANDEM_CHECK(false, "copy dst dtype ", dtype_name(dst.dtype));
  }
  TANDEM_CUDA_LAUNCH_CHECK("convert");
}

}  // namespace

void convert(const TensorView& src, const TensorView& dst, cudaStream_t stream) {
  TANDEM_CHECK(is_float_dtype(src.dtype) && is_float_dtype(dst.dtype) && same_shape(src, dst),
               "copy ", src.describe(), " -> ", dst.describe());
  check_device_memory(src, "copy src");
  check_device_memory(dst, "copy dst");
  const int64_t total = src.numel();
  if (total == 0) return;
  if (src.dtype == dst.dtype && src.contiguous() && dst.contiguous() &&
      dst.memory != MemoryKind::kPinned) {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(src.nbytes()),
                                      cudaMemcpyDefault, stream));
    return;
  }
  switch (src.dtype) {
    case DType::kF32:
      return launch_to<float>(src, dst, stream);
    case DType::kF16:
      return launch_to<__half>(src, dst, stream);
    case DType::kBF16:
      return launch_to<__nv_bfloat16>(src, dst, stream);
    default:
      TANDEM_CHECK(false, "copy src dtype ", dtype_name(src.dtype));
  }
}

}  // namespace tandem::cuda
