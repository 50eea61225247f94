// cuda_memory.h on CUDA: cudaMalloc / cudaHostAlloc(mapped) allocators and synchronous copies.
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_memory.h"

namespace tandem {
namespace {

// `bytes` from cudaMalloc (1 for zero, so that every allocation has its own pointer), or
// kOutOfMemory; the failure is cleared (not sticky).
void* device_allocate(void*, int64_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
  if (e != cudaSuccess) {
    cudaGetLastError();
    TANDEM_FAIL(kOutOfMemory, "cannot allocate ", bytes,
                " bytes of device memory: ", cudaGetErrorString(e));
  }
  return p;
}
void device_deallocate(void*, void* p) noexcept { cudaFree(p); }

void* mapped_allocate(void*, int64_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)),
                                      cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    TANDEM_FAIL(kOutOfMemory, "cannot allocate ", bytes,
                " bytes of pinned host memory: ", cudaGetErrorString(e));
  }
  return p;
}
void mapped_deallocate(void*, void* p) noexcept { cudaFreeHost(p); }

// Waits for all work on the device.
void device_synchronize() { TANDEM_CUDA_CHECK(cudaDeviceSynchronize()); }

// src (host memory of any kind) -> dst (device): same dtype and element count, both contiguous.
// Returns when the copy is done and visible to every stream.
void copy_to_device(const TensorView& src, const TensorView& dst) {
  TANDEM_CHECK(src.dtype == dst.dtype && src.numel() == dst.numel() && src.contiguous() &&
                   dst.contiguous() && dst.memory == MemoryKind::kDevice,
               "copy_to_device ", src.describe(), " -> ", dst.describe());
  if (src.nbytes() == 0) return;
  device_synchronize();  // no kernel queued on another stream may still read dst
  TANDEM_CUDA_CHECK(
      cudaMemcpy(dst.data, src.data, static_cast<size_t>(src.nbytes()), cudaMemcpyHostToDevice));
  // From pageable memory cudaMemcpy may return before the DMA lands, and the backend's stream
  // does not wait for the legacy default stream: wait here so any stream sees the data.
  device_synchronize();
}

}  // namespace

Allocator cuda_device_memory() {
  return {&device_allocate, &device_deallocate, nullptr, MemoryKind::kDevice};
}

Allocator cuda_mapped_memory() {
  return {&mapped_allocate, &mapped_deallocate, nullptr, MemoryKind::kPinned};
}

TensorView device_alias(const TensorView& mapped) {
  TANDEM_CHECK(mapped.memory == MemoryKind::kPinned, "device alias of ", mapped.describe());
  TensorView v = mapped;
  v.data = cuda::device_pointer(mapped);
  v.memory = MemoryKind::kDevice;
  return v;
}

Buffer upload_to_device(const TensorView& host) {
  TANDEM_CHECK(host.contiguous(), "upload of a strided view ", host.describe());
  Buffer b = Buffer::like(cuda_device_memory(), host);
  copy_to_device(host, b.view());
  return b;
}

void copy_to_host(const TensorView& src, const TensorView& dst) {
  TANDEM_CHECK(src.dtype == dst.dtype && src.numel() == dst.numel() && src.contiguous() &&
                   dst.contiguous() && dst.memory != MemoryKind::kDevice,
               "copy_to_host ", src.describe(), " -> ", dst.describe());
  device_synchronize();
  if (src.nbytes() == 0) return;
  TANDEM_CUDA_CHECK(
      cudaMemcpy(dst.data, src.data, static_cast<size_t>(src.nbytes()), cudaMemcpyDeviceToHost));
}

void fill_device_bytes(const TensorView& dst, uint8_t byte) {
  TANDEM_CHECK(dst.contiguous() && dst.memory == MemoryKind::kDevice, "fill ", dst.describe());
  if (dst.nbytes() == 0) return;
  device_synchronize();  // no kernel queued on another stream may still read dst
  TANDEM_CUDA_CHECK(cudaMemset(dst.data, byte, static_cast<size_t>(dst.nbytes())));
  device_synchronize();  // cudaMemset on device memory is asynchronous (legacy default stream)
}

double measure_d2d_bandwidth_gbs(size_t bytes) {
  const Buffer a(cuda_device_memory(), DType::kU8, {static_cast<int64_t>(bytes)});
  const Buffer b(cuda_device_memory(), DType::kU8, {static_cast<int64_t>(bytes)});
  TANDEM_CUDA_CHECK(cudaMemset(a.view().data, 1, bytes));
  cudaEvent_t start, stop;
  TANDEM_CUDA_CHECK(cudaEventCreate(&start));
  TANDEM_CUDA_CHECK(cudaEventCreate(&stop));
  double best = 0.0;
  for (int rep = 0; rep < 10; ++rep) {
    TANDEM_CUDA_CHECK(cudaEventRecord(start));
    TANDEM_CUDA_CHECK(cudaMemcpy(b.view().data, a.view().data, bytes, cudaMemcpyDeviceToDevice));
    TANDEM_CUDA_CHECK(cudaEventRecord(stop));
    TANDEM_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    TANDEM_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (rep > 0 && ms > 0.0f)  // the first copy is a warm-up
      best = std::max(best, 2.0 * static_cast<double>(bytes) / (static_cast<double>(ms) * 1e6));
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

}  // namespace tandem
