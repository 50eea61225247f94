// Flag-wait kernel: grid 1 x 1, one thread spinning on an acquire load of the flag with
// __nanosleep backoff (about 1 us between reads), bounded by %globaltimer.
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

}  // namespace

void wait_flag(const TensorView& flag, uint32_t target, uint32_t timeout_ms, cudaStream_t stream) {
  TANDEM_CHECK(flag.dtype == DType::kI32 && flag.numel() >= 1, "wait_flag: an i32 flag, got ",
               flag.describe());
  check_device_memory(flag, "wait_flag flag");
  const auto* p = static_cast<const uint32_t*>(device_pointer(flag));
  TANDEM_CHECK((reinterpret_cast<uintptr_t>(p) & 3u) == 0, "wait_flag: unaligned flag");
  TANDEM_LAUNCH(1, 1, 0, stream, wait_flag_kernel)(p, target, uint64_t{timeout_ms} * 1000000u);
  TANDEM_CUDA_LAUNCH_CHECK("wait_flag");
}

}  // namespace tandem::cuda
