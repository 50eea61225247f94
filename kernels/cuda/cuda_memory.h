// Allocators of device memory and mapped pinned host memory, and copies, for code that must not
// include the CUDA headers (tests, benchmarks, later the model). Built from cuda_memory.cu with
// CUDA and from cuda_stub.cpp without it, where every call throws kUnsupported
// (cuda_device_info().count is 0 there, so callers can check first).
#pragma once

#include <cstdint>

#include "kernels/buffer.h"
#include "kernels/tensor.h"

namespace tandem {

// cudaMalloc'd device memory (MemoryKind::kDevice), given back with cudaFree (which waits for
// the device). No backend's: for code that drives the kernels directly.
Allocator cuda_device_memory();
// Pinned host memory mapped into the device's address space (cudaHostAlloc with
// cudaHostAllocMapped | cudaHostAllocPortable), viewed as MemoryKind::kPinned: the CPU reads and
// writes it, and kernels that accept pinned operands read it in place over the bus.
Allocator cuda_mapped_memory();
// The same bytes as `mapped` (cuda_mapped_memory, any part of it) through their device address,
// viewed as MemoryKind::kDevice.
TensorView device_alias(const TensorView& mapped);
// A contiguous copy of a host view (same dtype and shape) in cuda_device_memory, visible to every
// stream when the call returns.
Buffer upload_to_device(const TensorView& host);

// src (device) -> dst (host): waits for all device work first (every stream), then copies.
void copy_to_host(const TensorView& src, const TensorView& dst);
// Every byte of a contiguous device view set to `byte` (0xff poisons f32 with NaN); returns
// when done.
void fill_device_bytes(const TensorView& dst, uint8_t byte);
// Device-to-device cudaMemcpy bandwidth in GB/s (1e9 bytes/s, bytes read + bytes written),
// best of several copies of `bytes` bytes (choose it far above the L2 size).
double measure_d2d_bandwidth_gbs(size_t bytes);

}  // namespace tandem
