// Device memory, mapped pinned host memory and copies, for code that must not include the CUDA
// headers (tests, benchmarks, later the model). Built from cuda_memory.cu with CUDA and from
// cuda_stub.cpp without it, where every call throws kUnsupported (cuda_device_info().count is 0
// there, so callers can check first).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>

#include "kernels/tensor.h"

namespace tandem {

// Owning device allocation (cudaMalloc) with a contiguous MemoryKind::kDevice view.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DType t, std::initializer_list<int64_t> dims);
  // A contiguous device copy of a host view (same dtype and shape).
  static DeviceBuffer upload(const TensorView& host);

  const TensorView& view() const { return view_; }
  template <typename T>
  T* as() const {
    return view_.as<T>();
  }
  bool empty() const { return view_.empty(); }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> mem_;
  TensorView view_;
};

// Owning pinned host allocation mapped into the device address space (cudaHostAlloc with
// cudaHostAllocMapped | cudaHostAllocPortable). view() is the host side (MemoryKind::kPinned),
// usable by the CPU and, read in place over the bus, by kernels that accept pinned operands;
// device_view() is the same bytes through the device alias (MemoryKind::kDevice).
class MappedBuffer {
 public:
  MappedBuffer() = default;
  MappedBuffer(DType t, std::initializer_list<int64_t> dims);

  const TensorView& view() const { return view_; }
  TensorView device_view() const;
  template <typename T>
  T* as() const {
    return view_.as<T>();
  }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> mem_;
  TensorView view_;
};

// src (device) -> dst (host): waits for all device work first (every stream), then copies.
void copy_to_host(const TensorView& src, const TensorView& dst);
// Every byte of a contiguous device view set to `byte` (0xff poisons f32 with NaN); returns
// when done.
void fill_device_bytes(const TensorView& dst, uint8_t byte);
// Device-to-device cudaMemcpy bandwidth in GB/s (1e9 bytes/s, bytes read + bytes written),
// best of several copies of `bytes` bytes (choose it far above the L2 size).
double measure_d2d_bandwidth_gbs(size_t bytes);

}  // namespace tandem
