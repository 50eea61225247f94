// Host flags on the GPU (kernels/backend.h): the stream stalls until a 32-bit counter in mapped
// pinned memory reaches a target, so the host thread never blocks on the CPU attention workers
// (DESIGN.md: GPU-centric synchronisation); and the stream raises such a counter once the work
// before it is done, for a CPU thread that polls it.
#pragma once

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// flag: one i32/u32 in mapped pinned memory (kPinned) or device memory. Work queued on `stream`
// after this call starts once *flag >= target (unsigned compare), read with system-scope acquire
// ordering, so whatever the host wrote before publishing the flag is visible to it. A wait
// longer than timeout_ms traps instead of hanging: a trap is a sticky error that ends the CUDA
// context (every later call fails), so the timeout is a last resort against a host that never
// publishes, not a recoverable error. No call that may synchronize the device (cudaFree,
// workspace growth, a synchronous copy) may be made by the publishing thread between queueing
// the wait and publishing the flag.
void wait_flag(const TensorView& flag, uint32_t target, uint32_t timeout_ms, cudaStream_t stream);

// flag: one i32/u32 in mapped pinned memory (or device memory). Once the work queued on `stream`
// before this call is done, *flag <- value with a system-scope release store, so a host thread
// that acquire-loads the value sees that work's writes to mapped memory.
void raise_flag(const TensorView& flag, uint32_t value, cudaStream_t stream);

}  // namespace tandem::cuda
