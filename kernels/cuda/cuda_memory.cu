// cuda_memory.h on CUDA: cudaMalloc / cudaHostAlloc(mapped) buffers and synchronous copies.
#include <algorithm>
#include <vector>

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/cuda_memory.h"

namespace tandem {
namespace {

// v with new data and memory kind, row-major contiguous strides.
TensorView contiguous_like(const TensorView& v, void* data, MemoryKind mem) {
  TensorView out = v;
  out.data = data;
  out.memory = mem;
  int64_t s = 1;
  for (int k = v.ndim - 1; k >= 0; --k) {
    out.stride[static_cast<size_t>(k)] = s;
    s *= v.shape[static_cast<size_t>(k)];
  }
  return out;
}

void* device_alloc(int64_t bytes) {
  void* p = nullptr;
  if (bytes > 0) TANDEM_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(bytes)));
  return p;
}

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

void DeviceBuffer::Free::operator()(void* p) const { cudaFree(p); }
void MappedBuffer::Free::operator()(void* p) const { cudaFreeHost(p); }

DeviceBuffer::DeviceBuffer(DType t, std::initializer_list<int64_t> dims) {
  const TensorView shape(nullptr, t, dims, MemoryKind::kDevice);
  mem_.reset(device_alloc(shape.nbytes()));
  view_ = contiguous_like(shape, mem_.get(), MemoryKind::kDevice);
}

DeviceBuffer DeviceBuffer::upload(const TensorView& host) {
  TANDEM_CHECK(host.contiguous(), "upload of a strided view ", host.describe());
  DeviceBuffer b;
  b.mem_.reset(device_alloc(host.nbytes()));
  b.view_ = contiguous_like(host, b.mem_.get(), MemoryKind::kDevice);
  copy_to_device(host, b.view_);
  return b;
}

MappedBuffer::MappedBuffer(DType t, std::initializer_list<int64_t> dims) {
  const TensorView shape(nullptr, t, dims, MemoryKind::kPinned);
  void* p = nullptr;
  if (shape.nbytes() > 0)
    TANDEM_CUDA_CHECK(cudaHostAlloc(&p, static_cast<size_t>(shape.nbytes()),
                                    cudaHostAllocMapped | cudaHostAllocPortable));
  mem_.reset(p);
  view_ = contiguous_like(shape, p, MemoryKind::kPinned);
}

TensorView MappedBuffer::device_view() const {
  void* dev = nullptr;
  if (view_.data != nullptr) TANDEM_CUDA_CHECK(cudaHostGetDevicePointer(&dev, view_.data, 0));
  return contiguous_like(view_, dev, MemoryKind::kDevice);
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
  DeviceBuffer a(DType::kU8, {static_cast<int64_t>(bytes)});
  DeviceBuffer b(DType::kU8, {static_cast<int64_t>(bytes)});
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
