// Every load and store of the emulated .cu files calls in here: they are compiled with g++'s
// thread-sanitizer instrumentation, which calls __tsan_readN / __tsan_writeN before each access
// (every store, unlike the address sanitizer's, which skips a store to an address it has just
// checked for a load), and no sanitizer runtime is linked: this file is that runtime. Outside a
// kernel the call returns at once. Inside one, an access in device or mapped memory must lie inside
// one live allocation (else the kernel faults with cudaErrorIllegalAddress, naming the kernel, the
// thread and how far past which allocation it reached), is counted per kernel as device or mapped
// bytes, and a store is logged with the bytes it replaces while the race check records.
// Accesses elsewhere (the thread's stack, shared memory, kernel parameters) are not counted.
#include <sstream>

#include "kernels/cuda/emu/emu_internal.h"

namespace tandem_emu {

thread_local KernelRun* t_run = nullptr;

namespace {

inline void hit(KernelRun& r, const Alloc& a, uintptr_t p, size_t n, bool write) {
  if (r.count) {
    const auto b = static_cast<int64_t>(n);
    if (a.region == Region::kDevice)
      (write ? r.counters.device_write : r.counters.device_read) += b;
    else
      (write ? r.counters.mapped_write : r.counters.mapped_read) += b;
  }
  if (write && r.undo != nullptr) r.undo->record(p, n, a);
}

[[noreturn]] void out_of_bounds(const KernelRun& r, uintptr_t p, size_t n, bool write) {
  std::ostringstream os;
  os << r.name << ": out-of-bounds " << (write ? "write" : "read") << " at "
     << describe_address(p, n) << " by block (" << t_block_idx.x << "," << t_block_idx.y << ","
     << t_block_idx.z << ") thread (" << t_thread_idx.x << "," << t_thread_idx.y << ","
     << t_thread_idx.z << ")";
  fault(cudaErrorIllegalAddress, os.str());
}

}  // namespace

void note_access(const void* ptr, size_t n, bool write) {
  KernelRun* r = t_run;
  if (r == nullptr) return;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  for (const Alloc& c : r->cache)
    if (p >= c.lo && p + n <= c.hi) return hit(*r, c, p, n, write);
  if (region_of(p) == Region::kNone) {
    // Starting below a device range and running into it is out of bounds too.
    if (n > 1 && region_of(p + n - 1) != Region::kNone) out_of_bounds(*r, p, n, write);
    return;
  }
  const Alloc a = find_alloc(p, n);
  if (a.id == 0) out_of_bounds(*r, p, n, write);
  r->cache[r->next_cache++ % 4] = a;
  hit(*r, a, p, n, write);
}

}  // namespace tandem_emu

#define TANDEM_EMU_HOOKS(N)                                                                   \
  extern "C" void __tsan_read##N(void* p) { tandem_emu::note_access(p, N, false); }           \
  extern "C" void __tsan_write##N(void* p) { tandem_emu::note_access(p, N, true); }           \
  extern "C" void __tsan_unaligned_read##N(void* p) { tandem_emu::note_access(p, N, false); } \
  extern "C" void __tsan_unaligned_write##N(void* p) { tandem_emu::note_access(p, N, true); }
TANDEM_EMU_HOOKS(1)
TANDEM_EMU_HOOKS(2)
TANDEM_EMU_HOOKS(4)
TANDEM_EMU_HOOKS(8)
TANDEM_EMU_HOOKS(16)
#undef TANDEM_EMU_HOOKS
extern "C" void __tsan_read_range(void* p, unsigned long n) {
  tandem_emu::note_access(p, n, false);
}
extern "C" void __tsan_write_range(void* p, unsigned long n) {
  tandem_emu::note_access(p, n, true);
}
extern "C" void __tsan_vptr_update(void** p, void*) {
  tandem_emu::note_access(p, sizeof(void*), true);
}
extern "C" void __tsan_vptr_read(void** p) { tandem_emu::note_access(p, sizeof(void*), false); }
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
extern "C" void __tsan_init() {}
// Atomic builtins in the .cu files (the flag wait's acquire load): checked, then done as asked.
extern "C" int __tsan_atomic32_load(const volatile int* p, int) {
  tandem_emu::note_access(const_cast<int*>(p), 4, false);
  return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
extern "C" void __tsan_atomic32_store(volatile int* p, int v, int) {
  tandem_emu::note_access(const_cast<int*>(p), 4, true);
  __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}
extern "C" long __tsan_atomic64_load(const volatile long* p, int) {
  tandem_emu::note_access(const_cast<long*>(p), 8, false);
  return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
extern "C" void __tsan_atomic64_store(volatile long* p, long v, int) {
  tandem_emu::note_access(const_cast<long*>(p), 8, true);
  __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}
extern "C" void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
extern "C" void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
