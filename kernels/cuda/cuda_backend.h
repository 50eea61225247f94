// CudaBackend: the GPU implementation of Backend. This build has the device plumbing (device
// discovery, checked CUDA/cuBLAS calls, memory of each kind); the kernels come with the CUDA
// backend issue, and until then every op reports that it is not available rather than guess.
#pragma once

#include <memory>
#include <string>

#include "kernels/backend.h"

namespace tandem {

struct CudaDeviceInfo {
  int count = 0;     // visible devices (0 without a GPU or driver)
  std::string name;  // device 0
  int64_t memory_bytes = 0;
  int sm_major = 0, sm_minor = 0;
};

// Never throws: a machine without a GPU or driver reports count 0.
CudaDeviceInfo cuda_device_info();

// The CUDA backend on device 0; throws tandem::Error (kUnsupported) without a usable GPU.
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace tandem
