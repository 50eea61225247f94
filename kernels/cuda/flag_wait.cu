// Host-flag kernels, grid 1 x 1: the wait spins one thread on an acquire load of the flag with
// __nanosleep backoff (about 1 us between reads), bounded by %globaltimer; the raise stores the
// value with release ordering at system scope once the kernels before it have finished.
#include "kernels/cuda/flag_wait.cuh"

namespace tandem::cuda {
namespace {

// PTX has no g++ spelling: under the emulator the same acquire load and a host clock.
__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
#ifdef TANDEM_CUDA_EMULATE
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
#endif
}

// The fence orders this thread's view of every earlier write (the kernels before this one)
// before the store at system scope; the emulator's release store does that by itself (and its
// thread sanitizer instrumentation does not take a fence).
__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
#ifdef TANDEM_CUDA_EMULATE
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
#else
  __threadfence_system();
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}

__device__ __forceinline__ uint64_t global_timer_ns() {
#ifdef TANDEM_CUDA_EMULATE
  return ::tandem_emu::globaltimer_ns();
#else
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
#endif
}

__global__ void wait_flag_kernel(const uint32_t* flag, uint32_t target, uint64_t timeout_ns) {
  const uint64_t start = global_timer_ns();
  while (load_acquire_sys(flag) < target) {
    if (global_timer_ns() - start > timeout_ns) __trap();  // the host never published
    __nanosleep(1000);
  }
}

// Stream order makes every earlier kernel and copy complete before this one starts; the release
// store makes their writes to mapped memory visible to a host thread that acquires the new value.
__global__ void raise_flag_kernel(uint32_t* flag, uint32_t value) {
  store_release_sys(flag, value);
}

const uint32_t* flag_pointer(const TensorView& flag, const char* what) {
  TANDEM_CHECK(flag.dtype == DType::kI32 && flag.numel() >= 1, what, ": an i32 flag, got ",
               flag.describe());
  check_device_memory(flag, what);
  const auto* p = static_cast<const uint32_t*>(device_pointer(flag));
  TANDEM_CHECK((reinterpret_cast<uintptr_t>(p) & 3u) == 0, what, ": unaligned flag");
  return p;
}

}  // namespace

void raise_flag(const TensorView& flag, uint32_t value, cudaStream_t stream) {
  auto* p = const_cast<uint32_t*>(flag_pointer(flag, "raise_flag"));
  TANDEM_LAUNCH(1, 1, 0, stream, raise_flag_kernel)(p, value);
  TANDEM_CUDA_LAUNCH_CHECK("raise_flag");
}

void wait_flag(const TensorView& flag, uint32_t target, uint32_t timeout_ms, cudaStream_t stream) {
  const uint32_t* p = flag_pointer(flag, "wait_flag");
  TANDEM_LAUNCH(1, 1, 0, stream, wait_flag_kernel)(p, target, uint64_t{timeout_ms} * 1000000u);
  TANDEM_CUDA_LAUNCH_CHECK("wait_flag");
}

}  // namespace tandem::cuda
