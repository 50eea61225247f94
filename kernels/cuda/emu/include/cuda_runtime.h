// The CUDA runtime API as Tandem's SIMT emulator provides it (-DTANDEM_CUDA=EMULATE): the subset
// kernels/cuda/ uses, with the semantics of CUDA 12/13 on one H100-like device. The .cu files are
// compiled by g++ against this header instead of NVIDIA's; kernels run on the CPU
// (kernels/cuda/emu/README.md says how). Host-side API: runtime_*.cpp; device side: simt.h.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/emu/vector_types.h"

enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorAssert = 710,
  cudaErrorLaunchFailure = 719,
  cudaErrorUnknown = 999,
};

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
  cudaMemoryTypeManaged = 3,
};

enum cudaDeviceAttr {
  cudaDevAttrMaxThreadsPerBlock = 1,
  cudaDevAttrMaxSharedMemoryPerBlock = 8,
  cudaDevAttrWarpSize = 10,
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
};

inline constexpr unsigned cudaStreamDefault = 0x0;
inline constexpr unsigned cudaStreamNonBlocking = 0x1;
inline constexpr unsigned cudaHostAllocDefault = 0x0;
inline constexpr unsigned cudaHostAllocPortable = 0x1;
inline constexpr unsigned cudaHostAllocMapped = 0x2;
inline constexpr unsigned cudaHostAllocWriteCombined = 0x4;
inline constexpr unsigned cudaEventDefault = 0x0;
inline constexpr unsigned cudaEventDisableTiming = 0x2;

namespace tandem_emu {
struct Stream;
struct Event;
}  // namespace tandem_emu
using cudaStream_t = tandem_emu::Stream*;
using cudaEvent_t = tandem_emu::Event*;

struct cudaPointerAttributes {
  cudaMemoryType type = cudaMemoryTypeUnregistered;
  int device = 0;
  void* devicePointer = nullptr;
  void* hostPointer = nullptr;
};

struct cudaFuncAttributes {
  size_t sharedSizeBytes = 0;
  size_t constSizeBytes = 0;
  size_t localSizeBytes = 0;
  int maxThreadsPerBlock = 1024;
  int numRegs = 0;
  int ptxVersion = 90;
  int binaryVersion = 90;
};

struct cudaDeviceProp {
  char name[256] = {};
  size_t totalGlobalMem = 0;
  size_t sharedMemPerBlock = 0;
  size_t sharedMemPerMultiprocessor = 0;
  size_t sharedMemPerBlockOptin = 0;
  int regsPerBlock = 0;
  int warpSize = 32;
  int maxThreadsPerBlock = 1024;
  int maxThreadsDim[3] = {};
  int maxGridSize[3] = {};
  int major = 0;
  int minor = 0;
  int multiProcessorCount = 0;
  int maxThreadsPerMultiProcessor = 0;
  int l2CacheSize = 0;
  int memoryBusWidth = 0;
  int canMapHostMemory = 1;
  int unifiedAddressing = 1;
};

const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned flags);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream = nullptr);

cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);

cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// The typed overloads of cuda_runtime.h.
template <typename T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
template <typename T>
cudaError_t cudaHostAlloc(T** p, size_t bytes, unsigned flags) {
  return cudaHostAlloc(reinterpret_cast<void**>(p), bytes, flags);
}

// Any kernel of this build runs on the emulated device: the probe succeeds.
template <typename F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, F*) {
  *attr = cudaFuncAttributes{};
  return cudaSuccess;
}

#include "kernels/cuda/emu/simt.h"
