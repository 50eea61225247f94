// Shared by every CUDA kernel file: checked CUDA/cuBLAS calls (throwing tandem::Error with the
// call and the error string), element conversions for f32/f16/bf16, warp and block reductions,
// and RowLayout, the device-side form of a TensorView whose last dim is contiguous.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/common.h"
#include "kernels/tensor.h"

// A kernel launch, for both compilers: TANDEM_LAUNCH(grid, block, smem, stream, kernel)(args...)
// is kernel<<<grid, block, smem, stream>>>(args...) under nvcc; the SIMT emulator
// (TANDEM_CUDA_EMULATE, kernels/cuda/emu/) queues the same kernel on its stream instead. A
// template kernel names its template arguments (the emulator takes its address).
#ifdef TANDEM_CUDA_EMULATE
#define TANDEM_LAUNCH(grid, block, smem, stream, ...) \
  ::tandem_emu::launch(#__VA_ARGS__, grid, block, smem, stream, __VA_ARGS__)
// Dynamic shared memory: g++ has no `extern __shared__`; the emulator hands out the block's.
#define TANDEM_DYNAMIC_SHARED(type, name) \
  type* name = static_cast<type*>(::tandem_emu::t_dynamic_smem)
#else
#define TANDEM_LAUNCH(grid, block, smem, stream, ...) __VA_ARGS__<<<grid, block, smem, stream>>>
#define TANDEM_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif

#define TANDEM_CUDA_CHECK(call)                                                             \
  do {                                                                                      \
    const cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess)                                                                \
      ::tandem::throw_error(::tandem::ErrorKind::kInternal,                                 \
                            ::tandem::cat(#call, ": ", cudaGetErrorString(err_)), __FILE__, \
                            __LINE__);                                                      \
  } while (0)

#define TANDEM_CUBLAS_CHECK(call)                                                             \
  do {                                                                                        \
    const cublasStatus_t st_ = (call);                                                        \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                         \
      ::tandem::throw_error(::tandem::ErrorKind::kInternal,                                   \
                            ::tandem::cat(#call, ": ", cublasGetStatusString(st_)), __FILE__, \
                            __LINE__);                                                        \
  } while (0)

// After a kernel launch: a bad configuration shows up here (and is cleared), a fault inside the
// kernel at the next synchronize.
#define TANDEM_CUDA_LAUNCH_CHECK(name)                                                         \
  do {                                                                                         \
    const cudaError_t err_ = cudaGetLastError();                                               \
    if (err_ != cudaSuccess)                                                                   \
      ::tandem::throw_error(::tandem::ErrorKind::kInternal,                                    \
                            ::tandem::cat("launch of ", name, ": ", cudaGetErrorString(err_)), \
                            __FILE__, __LINE__);                                               \
  } while (0)

namespace tandem::cuda {

inline constexpr int kWarp = 32;

// The leading dims of a view with a contiguous last dim: row r (over all leading dims, row-major)
// starts at offset(r) elements. Up to 3 leading dims (TensorView holds 4).
struct RowLayout {
  int64_t cols = 0;
  int32_t nlead = 0;
  int64_t shape[3] = {1, 1, 1};
  int64_t stride[3] = {0, 0, 0};

  __host__ __device__ int64_t offset(int64_t r) const {
    int64_t off = 0;
    for (int a = nlead - 1; a >= 0; --a) {
      off += (r % shape[a]) * stride[a];
      r /= shape[a];
    }
    return off;
  }
};

// Throws unless the view's last dim is contiguous; a fully contiguous view becomes one row
// stride (the cheapest offset arithmetic).
RowLayout row_layout(const TensorView& t);
int64_t n_rows(const TensorView& t);
bool same_shape(const TensorView& a, const TensorView& b);
bool is_float_dtype(DType t);
// Throws unless a kernel may dereference the view's pointer: device or mapped pinned memory.
void check_device_memory(const TensorView& t, const char* what);
// The pointer a kernel uses for t: for mapped pinned memory (MemoryKind::kPinned) its device
// alias, found for any address inside the allocation (so slices work); else t's own pointer.
void* device_pointer(const TensorView& t);
// Blocks for a grid-stride loop over n items: enough to fill the device, never above the limit.
unsigned grid_for(int64_t n, int threads);

// Grow-only device scratch shared by the ops of one backend (one stream, so ops that use it run
// one after another). Growing frees the old block with cudaFree, which waits for the device.
class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace();
  // At least `bytes` bytes, 256-byte aligned, valid until the next get().
  void* get(size_t bytes);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// A grow-only device table that the host fills for each call of an op (segment tables, row
// offsets): staged in a host vector, then sent with one cudaMemcpyAsync on the op's stream.
// From pageable memory the copy returns once the bytes are staged, so the next call may refill
// the vector at once, and its copy is ordered after this call's kernels on the stream.
class UploadTable {
 public:
  UploadTable() = default;
  UploadTable(const UploadTable&) = delete;
  UploadTable& operator=(const UploadTable&) = delete;
  ~UploadTable();
  // Host staging for `bytes` bytes (contents unspecified) and a device table at least that
  // large, whose address (device()) the staged bytes may already point into. Growing waits for
  // `stream`, so no queued kernel still reads the old table.
  unsigned char* prepare(size_t bytes, cudaStream_t stream);
  unsigned char* device() const { return static_cast<unsigned char*>(dev_); }
  // The prepared bytes to the device table, on `stream`.
  void upload(cudaStream_t stream);

 private:
  std::vector<unsigned char> host_;
  size_t size_ = 0;
  void* dev_ = nullptr;
  size_t cap_ = 0;
};

template <typename T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f32<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// scratch: 32 floats of shared memory, reusable after the call returns.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int nwarps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous reduction
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int nwarps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace tandem::cuda
