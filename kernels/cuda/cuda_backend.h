// CudaBackend: the GPU implementation of Backend (kernels/cuda/*.cu), on device 0 and one stream
// that the backend owns. Operands are device pointers (TensorView with MemoryKind::kDevice);
// merge also reads its second partial from mapped pinned host memory in place (kPinned), copy
// writes into it, and host flags live in it. Token sampling (Backend::sample) runs on the GPU.
// Memory helpers for code without the CUDA headers are in kernels/cuda/cuda_memory.h. Without
// CUDA (TANDEM_CUDA=OFF or no nvcc) cuda_stub.cpp provides these functions: no device, and
// make_cuda_backend throws.
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
  int sm_count = 0;           // multiprocessors
  bool runs_kernels = false;  // this build has kernel code device 0 can run (CUDA_ARCHITECTURES)
  bool emulated = false;      // the SIMT emulator (-DTANDEM_CUDA=EMULATE): --device auto skips it
};

// Never throws: a machine without a GPU or driver reports count 0.
CudaDeviceInfo cuda_device_info();

// The CUDA backend on device 0; throws tandem::Error (kUnsupported) without a usable GPU (none
// visible, or one this build's kernels were not compiled for).
std::unique_ptr<Backend> make_cuda_backend();

}  // namespace tandem
