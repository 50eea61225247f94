// A kernel launch: the configuration checked when it is queued (errors go to cudaGetLastError, as
// a bad launch's do), then the grid run on the stream's worker (simt.cpp) and counted.
//
// With the race check on (TANDEM_EMU_RACECHECK=1) every launch runs three times from the same
// memory: forward (its stores logged with the bytes they replaced), reverse and random; the
// device and mapped memory each run wrote must be the same bit for bit, else the launch faults
// naming the kernel, the allocation and the first differing byte. The forward run's result is
// the one kept, and only it is counted.
#include <cstring>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "kernels/cuda/emu/emu_internal.h"

namespace tandem_emu {
namespace {

struct Snapshot {
  Alloc a;
  std::vector<unsigned char> bytes;
};

std::vector<Snapshot> snapshot(const std::map<uint64_t, Alloc>& allocs) {
  std::vector<Snapshot> out;
  for (const auto& [id, a] : allocs) {
    const auto* p = reinterpret_cast<const unsigned char*>(a.lo);
    out.push_back({a, std::vector<unsigned char>(p, p + (a.hi - a.lo))});
  }
  return out;
}

void compare(const Launch& l, const std::vector<Snapshot>& expect, Schedule other) {
  for (const Snapshot& s : expect) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.a.lo);
    if (std::memcmp(p, s.bytes.data(), s.bytes.size()) == 0) continue;
    size_t i = 0;
    while (p[i] == s.bytes[i]) ++i;
    std::ostringstream os;
    os << l.name << ": the result depends on the interleaving of threads (a missing "
       << "__syncthreads or __syncwarp, or a shared-memory race): allocation #" << s.a.id << " of "
       << s.a.bytes << " bytes differs at byte " << i << " between the forward and the "
       << schedule_name(other) << " schedule";
    fault(cudaErrorLaunchFailure, os.str());
  }
}

}  // namespace

void run_kernel(const Launch& l) {
  KernelRun run;
  run.name = l.name;
  t_run = &run;
  struct Reset {
    ~Reset() { t_run = nullptr; }
  } reset;
  const Settings& s = settings();
  if (!s.racecheck) {
    run_grid(l, s.schedule, s.seed);
  } else {
    UndoLog first;
    run.undo = &first;
    run_grid(l, Schedule::kForward, s.seed);
    run.undo = nullptr;
    const KernelCounters counted = run.counters;
    run.count = false;
    const std::vector<Snapshot> expect = snapshot(first.written);
    first.undo();
    for (Schedule other : {Schedule::kReverse, Schedule::kRandom}) {
      UndoLog log;
      run.undo = &log;
      run_grid(l, other, s.seed + 1);
      run.undo = nullptr;
      compare(l, expect, other);
      // What this run wrote outside the first run's allocations must be what was there.
      std::map<uint64_t, Alloc> extra;
      for (const auto& [id, a] : log.written)
        if (first.written.count(id) == 0) extra.emplace(id, a);
      const std::vector<Snapshot> got = snapshot(extra);
      log.undo();
      compare(l, got, other);
    }
    // Memory now holds the state before the launch: restore the forward run's result.
    for (const Snapshot& e : expect)
      std::memcpy(reinterpret_cast<void*>(e.a.lo), e.bytes.data(), e.bytes.size());
    run.counters = counted;
  }
  run.counters.launches = 1;
  run.counters.blocks = static_cast<int64_t>(l.grid.x) * l.grid.y * l.grid.z;
  run.counters.threads = run.counters.blocks * l.block.x * l.block.y * l.block.z;
  add_kernel_counters(l.name, run.counters);
}

void UndoLog::record(uintptr_t addr, size_t n, const Alloc& a) {
  entries.push_back({addr, static_cast<uint32_t>(n), static_cast<uint32_t>(bytes.size())});
  const auto* p = reinterpret_cast<const unsigned char*>(addr);
  bytes.insert(bytes.end(), p, p + n);
  written.emplace(a.id, a);
}

void UndoLog::undo() {
  for (auto it = entries.rbegin(); it != entries.rend(); ++it)
    std::memcpy(reinterpret_cast<void*>(it->addr), bytes.data() + it->off, it->n);
  entries.clear();
  bytes.clear();
}

void enqueue_kernel(const char* name, dim3 grid, dim3 block, size_t smem, void* stream,
                    KernelBody body) {
  if (sticky_error() != cudaSuccess) return;
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  const bool bad = threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 ||
                   block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
                   grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535;
  if (bad) {
    set_last_error(cudaErrorInvalidConfiguration);
    return;
  }
  if (smem > 48 * 1024) {  // above the default limit without cudaFuncSetAttribute
    set_last_error(cudaErrorInvalidValue);
    return;
  }
  counters().launches.fetch_add(1);
  Launch l{name, grid, block, smem, std::move(body)};
  enqueue(resolve(static_cast<cudaStream_t>(stream)), [l = std::move(l)] { run_kernel(l); });
}

}  // namespace tandem_emu
