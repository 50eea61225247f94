// Embedding kernel: grid (n rows) x 1, 256 threads per block striding over d; one table row
// per block, read once, coalesced.
#include "kernels/cuda/embedding.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void embedding_kernel(const int32_t* ids, const T* table, int64_t vocab, int64_t d,
                                 float* out, RowLayout lo) {
  const int64_t i = blockIdx.x;
  const int32_t id = ids[i];
  float* orow = out + lo.offset(i);
  if (id < 0 || id >= vocab) {  // guard: no out-of-bounds read; NaN marks the bad id
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) orow[c] = NAN;
    return;
  }
  const T* row = table + static_cast<int64_t>(id) * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) orow[c] = to_f32<T>(row[c]);
}

}  // namespace

void embedding(const TensorView& ids, const TensorView& table, const TensorView& out,
               cudaStream_t stream) {
  TANDEM_CHECK(ids.dtype == DType::kI32 && ids.contiguous(), "embedding ids ", ids.describe());
  TANDEM_CHECK(table.ndim == 2 && is_float_dtype(table.dtype) && table.contiguous(),
               "embedding table ", table.describe());
  const int64_t n = ids.numel(), vocab = table.dim(0), d = table.dim(1);
  TANDEM_CHECK(out.dtype == DType::kF32 && out.ndim == 2 && out.dim(0) == n && out.dim(1) == d,
               "embedding out ", out.describe(), " for ", n, " ids of ", table.describe());
  check_device_memory(ids, "embedding ids");
  check_device_memory(table, "embedding table");
  check_device_memory(out, "embedding out");
  if (n == 0 || d == 0) return;
  TANDEM_CHECK(n <= 0x7fffffff, "embedding: too many ids ", n);
  const RowLayout lo = row_layout(out);
  const int32_t* ip = ids.as<const int32_t>();
  const unsigned grid = static_cast<unsigned>(n);
  switch (table.dtype) {
    case DType::kF32:
      TANDEM_LAUNCH(grid, kThreads, 0, stream, embedding_kernel<float>)
      (ip, table.as<const float>(), vocab, d, out.as<float>(), lo);
      break;
    case DType::kF16:
      TANDEM_LAUNCH(grid, kThreads, 0, stream, embedding_kernel<__half>)
      (ip, table.as<const __half>(), vocab, d, out.as<float>(), lo);
      break;
    default:
      TANDEM_LAUNCH(grid, kThreads, 0, stream, embedding_kernel<__nv_bfloat16>)
      (ip, table.as<const __nv_bfloat16>(), vocab, d, out.as<float>(), lo);
      break;
  }
  TANDEM_CUDA_LAUNCH_CHECK("embedding");
}

}  // namespace tandem::cuda
