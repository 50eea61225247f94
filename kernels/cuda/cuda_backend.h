// CudaBackend: the GPU implementation of Backend (kernels/cuda/*.cu), on device 0 and one stream
// that the backend owns. Operands are device pointers (TensorView with MemoryKind::kDevice);
// merge also reads its second partial from mapped pinned host memory in place (kPinned).
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

// Token sampling on the GPU (kernels/cuda/sampling.cuh) on the stream of `backend`, which must
// come from make_cuda_backend. logits f32 [n, vocab]; temperature f32 [n], top_k i32 [n],
// top_p f32 [n], uniform f32 [n] in [0, 1); ids i32 [n] out; all device memory. Greedy where
// temperature <= 0 or top_k == 1, else temperature -> top-k -> softmax -> top-p -> the draw
// `uniform` picks in the (probability desc, id asc) order. Asynchronous like every op.
void cuda_sample(Backend& backend, const TensorView& logits, const TensorView& temperature,
                 const TensorView& top_k, const TensorView& top_p, const TensorView& uniform,
                 const TensorView& ids);

// Makes the stream of `backend` (from make_cuda_backend) wait, on the GPU, until the 32-bit
// counter `flag` (i32 [1] in mapped pinned memory, e.g. a MappedBuffer) is >= target; the host
// thread returns at once. The producer writes its data, then publish_flag(flag, target)
// (kernels/cuda/cuda_memory.h). A wait longer than timeout_ms fails the stream (reported by the
// next synchronize) rather than hanging.
void cuda_wait_flag(Backend& backend, const TensorView& flag, uint32_t target,
                    uint32_t timeout_ms = 30000);

}  // namespace tandem
