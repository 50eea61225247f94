// Internals shared by the emulator's runtime (runtime_*.cpp), SIMT engine (simt.cpp), launches
// (launch.cpp), memory checks (hooks.cpp) and cuBLAS (cublas.cpp). Not for kernels or the backend.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/emu/include/cuda_runtime.h"

namespace tandem_emu {

enum class Schedule { kForward, kReverse, kRandom };
const char* schedule_name(Schedule s);

struct Settings {
  size_t device_bytes = size_t{80} << 30;  // TANDEM_EMU_DEVICE_GIB
  Schedule schedule = Schedule::kForward;  // TANDEM_EMU_SCHEDULE=forward|reverse|random[:seed]
  uint64_t seed = 1;
  bool racecheck = false;  // TANDEM_EMU_RACECHECK=1: every launch under three interleavings
  bool protect = true;     // TANDEM_EMU_PROTECT=0: device memory stays host-readable
  // TANDEM_EMU_DEFER=1: a stream runs its queued work only once the host (or another stream
  // through an event) waits for it, so a read that skipped its synchronisation sees stale data
  // every time instead of when the timing happens to lose.
  bool defer = false;
};
Settings& settings();  // runtime_device.cpp

// A fault inside a kernel (bad address, trap, deadlock, interleaving-dependent result): the
// kernel stops, the context gets the sticky error `code`, and `what` is printed.
struct KernelFault {
  cudaError_t code;
  std::string what;
};
[[noreturn]] void fault(cudaError_t code, std::string what);

// Device and mapped allocations: the checks' view of memory (runtime_memory.cpp).
enum class Region : uint8_t { kNone, kDevice, kMappedHost, kMappedDevice };
struct Alloc {
  uintptr_t lo = 0, hi = 0;  // [lo, hi) in its region's view
  uint64_t id = 0;
  Region region = Region::kNone;
  size_t bytes = 0;  // requested
};
// The allocation whose view contains [p, p + n), or the region the address lies in with
// alloc.id == 0 when no live allocation holds all of it (out of bounds when region != kNone).
Alloc find_alloc(uintptr_t p, size_t n);
Region region_of(uintptr_t p);
std::string describe_address(uintptr_t p, size_t n);

// Per-kernel accounting and the undo log of the interleaving check (worker thread only).
struct UndoLog {
  struct Entry {
    uintptr_t addr;
    uint32_t n;
    uint32_t off;
  };
  std::vector<Entry> entries;
  std::vector<unsigned char> bytes;
  std::map<uint64_t, Alloc> written;  // by id
  void record(uintptr_t addr, size_t n, const Alloc& a);
  void undo();
};
struct KernelCounters {
  int64_t launches = 0, blocks = 0, threads = 0;
  int64_t device_read = 0, device_write = 0, mapped_read = 0, mapped_write = 0;
};
struct KernelRun {
  const char* name = "";
  bool count = true;        // false for the interleaving check's extra runs
  KernelCounters counters;  // this launch
  UndoLog* undo = nullptr;  // set while the check records
  Alloc cache[4];           // the last allocations hit
  unsigned next_cache = 0;
};
extern thread_local KernelRun* t_run;
void note_access(const void* p, size_t n, bool write);  // hooks.cpp

// Streams: in-order task queues run by one worker thread each (runtime_streams.cpp); errors
// (runtime_errors.cpp).
using Task = std::function<void()>;
Stream* resolve(cudaStream_t s);  // nullptr -> the legacy default stream
void enqueue(Stream* s, Task t);
cudaError_t sync_stream(Stream* s);  // counts a host synchronisation
cudaError_t sticky_error();
void set_last_error(cudaError_t e);

// Device-arena access for host-side emulator code (copies, fills): opens the arena while held.
struct ArenaAccess {
  ArenaAccess();
  ~ArenaAccess();
  ArenaAccess(const ArenaAccess&) = delete;
  ArenaAccess& operator=(const ArenaAccess&) = delete;
};

// Kernel execution, on the stream's worker: run_kernel (launch.cpp) runs the grid once, or three
// times under the race check, with run_grid (simt.cpp).
struct Launch {
  const char* name;
  dim3 grid, block;
  size_t smem;
  KernelBody body;
};
void run_kernel(const Launch& l);
void run_grid(const Launch& l, Schedule schedule, uint64_t seed);

// Counters (runtime_device.cpp).
struct Counters {
  std::atomic<int64_t> launches{0}, copies{0}, h2d{0}, d2h{0}, d2d{0}, memset{0}, host_syncs{0};
  std::atomic<int64_t> host_sync_ns{0}, cublas_calls{0}, cublas_bytes{0};
  std::atomic<double> cublas_flops{0.0};
  std::mutex m;
  std::map<std::string, KernelCounters> kernels;
};
Counters& counters();
void add_kernel_counters(const std::string& name, const KernelCounters& c);

// Fiber stack guard pages, for the fault handler (simt.cpp).
bool is_stack_guard(uintptr_t p);

}  // namespace tandem_emu
