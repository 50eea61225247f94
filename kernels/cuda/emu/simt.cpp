// The SIMT engine: a kernel's blocks run one after another on the stream's worker thread; the
// threads of a block are fibers (Boost.Context) that run until they reach a barrier, a warp
// exchange, __nanosleep or their end. A round resumes every ready thread once, in the order of
// the schedule: forward (thread 0 first), reverse, or a seeded random permutation per round. So
// the code between two barriers runs with the threads interleaved differently under each
// schedule, and a missing __syncthreads shows as a different result (launch.cpp compares them).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <chrono>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include "kernels/cuda/emu/emu_internal.h"

namespace ctx = boost::context;

namespace tandem_emu {

thread_local uint3 t_thread_idx{0, 0, 0};
thread_local uint3 t_block_idx{0, 0, 0};
thread_local dim3 t_block_dim{1, 1, 1};
thread_local dim3 t_grid_dim{1, 1, 1};
thread_local void* t_dynamic_smem = nullptr;

namespace {

constexpr size_t kStackSize = 64 * 1024;
constexpr size_t kGuard = 4096;
constexpr int kWarpSize = 32;

// ---- fiber stacks: pooled per worker, each with a PROT_NONE guard page below ------------------

constexpr int kMaxGuards = 1 << 16;
std::atomic<uintptr_t> g_guards[kMaxGuards];
std::atomic<int> g_nguards{0};

struct StackPool {
  std::vector<ctx::stack_context> free;
  ~StackPool() {
    for (auto& sc : free) munmap(static_cast<char*>(sc.sp) - sc.size - kGuard, sc.size + kGuard);
  }
};
thread_local StackPool t_stacks;

struct PooledStack {
  ctx::stack_context allocate() {
    if (!t_stacks.free.empty()) {
      ctx::stack_context sc = t_stacks.free.back();
      t_stacks.free.pop_back();
      return sc;
    }
    void* base = mmap(nullptr, kStackSize + kGuard, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) throw std::bad_alloc();
    mprotect(base, kGuard, PROT_NONE);
    const int slot = g_nguards.fetch_add(1);
    if (slot < kMaxGuards) g_guards[slot] = reinterpret_cast<uintptr_t>(base);
    ctx::stack_context sc;
    sc.size = kStackSize;
    sc.sp = static_cast<char*>(base) + kGuard + kStackSize;
    return sc;
  }
  void deallocate(ctx::stack_context& sc) noexcept { t_stacks.free.push_back(sc); }
};

// ---- block state -----------------------------------------------------------------------------

enum class State : uint8_t { kReady, kBarrier, kWarp, kSleep, kDone };

struct Thread {
  uint3 idx{};
  int lane = 0, warp = 0;
  State state = State::kReady;
  bool started = false;
  unsigned gen = 0;  // of the barrier / warp exchange it waits in
  ctx::fiber fib;    // the suspended thread
  ctx::fiber back;   // inside the thread: the scheduler
};

struct Warp {
  unsigned arrived = 0, mask = 0, gen = 0;
  uint64_t vals[2][kWarpSize] = {};
};

struct Block {
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  int alive = 0;
  int bar_arrived = 0;
  unsigned bar_gen = 0;
  int acc_or = 0, acc_and = 1, acc_count = 0;
  int result[2][3] = {};
  bool has_fault = false;
  KernelFault first_fault{cudaSuccess, ""};
};

thread_local Block* t_blk = nullptr;
thread_local Thread* t_th = nullptr;
thread_local std::vector<unsigned char> t_smem;

std::string where() {
  std::ostringstream os;
  os << "block (" << t_block_idx.x << "," << t_block_idx.y << "," << t_block_idx.z << ") thread ("
     << t_thread_idx.x << "," << t_thread_idx.y << "," << t_thread_idx.z << ")";
  return os.str();
}

const char* kernel_name() { return t_run != nullptr ? t_run->name : "?"; }

Thread& self() {
  if (t_th == nullptr)
    fault(cudaErrorLaunchFailure, "a device intrinsic was called outside a kernel");
  return *t_th;
}

void yield() {
  Thread& me = self();
  me.back = std::move(me.back).resume();
}

void maybe_release_barrier(Block& b) {
  if (b.bar_arrived == 0 || b.bar_arrived < b.alive) return;
  int* r = b.result[b.bar_gen % 2];
  r[0] = b.acc_or;
  r[1] = b.acc_and;
  r[2] = b.acc_count;
  b.acc_or = 0;
  b.acc_and = 1;
  b.acc_count = 0;
  b.bar_arrived = 0;
  ++b.bar_gen;
  for (Thread& t : b.threads)
    if (t.state == State::kBarrier) t.state = State::kReady;
}

// Every lane of `mask` exists in this block and is alive (checked when the first lane arrives;
// a lane that exits later, while the others wait, is caught by thread_exit).
void check_mask(const Block& b, const Thread& me, unsigned mask, const char* what) {
  for (int l = 0; l < kWarpSize; ++l) {
    if (((mask >> l) & 1u) == 0) continue;
    const size_t t = static_cast<size_t>(me.warp * kWarpSize + l);
    if (t >= b.threads.size() || b.threads[t].state == State::kDone) {
      std::ostringstream os;
      os << kernel_name() << ": " << what << " at " << where() << " with mask 0x" << std::hex
         << mask << std::dec << ": lane " << l
         << (t >= b.threads.size() ? " does not exist" : " has exited");
      fault(cudaErrorLaunchFailure, os.str());
    }
  }
}

// Arrives at the warp's exchange with `value`; returns the generation to read.
unsigned warp_arrive(unsigned mask, uint64_t value, const char* what) {
  Block& b = *t_blk;
  Thread& me = self();
  Warp& w = b.warps[static_cast<size_t>(me.warp)];
  if (((mask >> me.lane) & 1u) == 0)
    fault(cudaErrorLaunchFailure, std::string(kernel_name()) + ": " + what + " at " + where() +
                                      ": the calling lane is not in the mask");
  if (w.arrived == 0) {
    check_mask(b, me, mask, what);
    w.mask = mask;
  } else if (w.mask != mask) {
    std::ostringstream os;
    os << kernel_name() << ": " << what << " at " << where() << ": mask 0x" << std::hex << mask
       << " while other lanes of the warp wait with mask 0x" << w.mask;
    fault(cudaErrorLaunchFailure, os.str());
  }
  const unsigned gen = w.gen;
  w.vals[gen % 2][me.lane] = value;
  w.arrived |= 1u << me.lane;
  me.state = State::kWarp;
  me.gen = gen;
  if (w.arrived == w.mask) {
    w.arrived = 0;
    ++w.gen;
    for (int l = 0; l < kWarpSize; ++l)
      if ((mask >> l) & 1u)
        b.threads[static_cast<size_t>(me.warp * kWarpSize + l)].state = State::kReady;
  }
  yield();
  return gen;
}

void thread_exit(Block& b, Thread& t) {
  t.state = State::kDone;
  --b.alive;
  Warp& w = b.warps[static_cast<size_t>(t.warp)];
  if (w.arrived != 0 && ((w.mask >> t.lane) & 1u) != 0 && !b.has_fault) {
    std::ostringstream os;
    os << kernel_name() << ": lane " << t.lane << " of warp " << t.warp
       << " exited while its warp waits for it in a shuffle or vote (mask 0x" << std::hex << w.mask
       << ")";
    b.has_fault = true;
    b.first_fault = {cudaErrorLaunchFailure, os.str()};
  }
  maybe_release_barrier(b);
}

// Runs one block under `schedule` (round r of block k permuted with a seed of both).
void run_block(const Launch& l, Schedule schedule, uint64_t seed, uint64_t block_linear) {
  const unsigned n = l.block.x * l.block.y * l.block.z;
  Block b;
  b.threads.resize(n);
  b.warps.resize((n + kWarpSize - 1) / kWarpSize);
  b.alive = static_cast<int>(n);
  for (unsigned i = 0; i < n; ++i) {
    Thread& t = b.threads[i];
    t.idx = {i % l.block.x, (i / l.block.x) % l.block.y, i / (l.block.x * l.block.y)};
    t.lane = static_cast<int>(i % kWarpSize);
    t.warp = static_cast<int>(i / kWarpSize);
  }
  if (l.smem > 0) {
    t_smem.assign(l.smem, 0xff);  // unwritten shared memory reads as NaN
    t_dynamic_smem = t_smem.data();
  } else {
    t_dynamic_smem = nullptr;
  }
  t_blk = &b;
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + block_linear);
  std::vector<unsigned> order;
  order.reserve(n);
  while (b.alive > 0 && !b.has_fault) {
    order.clear();
    bool sleeping = false;
    for (unsigned i = 0; i < n; ++i) {
      if (b.threads[i].state == State::kSleep) {
        b.threads[i].state = State::kReady;
        sleeping = true;
      }
      if (b.threads[i].state == State::kReady) order.push_back(i);
    }
    if (order.empty()) {
      std::ostringstream os;
      os << l.name << ": deadlock in block (" << t_block_idx.x << "," << t_block_idx.y << ","
         << t_block_idx.z << "): ";
      int at_bar = 0, at_warp = 0;
      for (const Thread& t : b.threads) {
        at_bar += t.state == State::kBarrier;
        at_warp += t.state == State::kWarp;
      }
      os << at_bar << " threads wait at __syncthreads and " << at_warp
         << " in a warp exchange that can never complete";
      b.has_fault = true;
      b.first_fault = {cudaErrorLaunchFailure, os.str()};
      break;
    }
    if (schedule == Schedule::kReverse)
      std::reverse(order.begin(), order.end());
    else if (schedule == Schedule::kRandom)
      std::shuffle(order.begin(), order.end(), rng);
    bool slept_all = sleeping;
    for (unsigned i : order) {
      Thread& t = b.threads[i];
      if (t.state != State::kReady) continue;
      t_th = &t;
      t_thread_idx = t.idx;
      if (!t.started) {
        t.started = true;
        t.fib = ctx::fiber(std::allocator_arg, PooledStack{}, [&t, &l, &b](ctx::fiber&& sched) {
          t.back = std::move(sched);
          try {
            l.body();
          } catch (const KernelFault& f) {
            if (!b.has_fault) {
              b.has_fault = true;
              b.first_fault = f;
            }
          }
          thread_exit(b, t);
          return std::move(t.back);
        });
      }
      t.fib = std::move(t.fib).resume();
      if (t.state != State::kSleep) slept_all = false;
      if (b.has_fault) break;
    }
    if (slept_all) std::this_thread::sleep_for(std::chrono::microseconds(1));
  }
  // Unwind the threads still suspended (after a fault) before the block goes away.
  for (Thread& t : b.threads) t.fib = ctx::fiber{};
  t_blk = nullptr;
  t_th = nullptr;
  if (b.has_fault) throw b.first_fault;
}

}  // namespace

void run_grid(const Launch& l, Schedule schedule, uint64_t seed) {
  t_block_dim = l.block;
  t_grid_dim = l.grid;
  uint64_t k = 0;
  for (unsigned z = 0; z < l.grid.z; ++z)
    for (unsigned y = 0; y < l.grid.y; ++y)
      for (unsigned x = 0; x < l.grid.x; ++x, ++k) {
        t_block_idx = {x, y, z};
        run_block(l, schedule, seed, k);
      }
}

bool is_stack_guard(uintptr_t p) {
  const int n = std::min(g_nguards.load(), kMaxGuards);
  for (int i = 0; i < n; ++i) {
    const uintptr_t g = g_guards[i].load();
    if (p >= g && p < g + kGuard) return true;
  }
  return false;
}

// ---- device intrinsics -------------------------------------------------------------------------

void syncthreads() { syncthreads_reduce(0, 0); }

int syncthreads_reduce(int pred, int op) {
  Block& b = *t_blk;
  Thread& me = self();
  const int p = pred != 0;
  b.acc_or |= p;
  b.acc_and &= p;
  b.acc_count += p;
  me.state = State::kBarrier;
  me.gen = b.bar_gen;
  ++b.bar_arrived;
  maybe_release_barrier(b);
  yield();
  return b.result[me.gen % 2][op];
}

void syncwarp(unsigned mask) { warp_arrive(mask, 0, "__syncwarp"); }

uint64_t warp_exchange(unsigned mask, uint64_t value, int src, int width, int mode) {
  Thread& me = self();
  if (width <= 0 || width > kWarpSize || (width & (width - 1)) != 0)
    fault(cudaErrorLaunchFailure, std::string(kernel_name()) + ": shuffle width " +
                                      std::to_string(width) + " at " + where());
  const unsigned gen = warp_arrive(mask, value, "shuffle");
  const Warp& w = t_blk->warps[static_cast<size_t>(me.warp)];
  const int base = me.lane & ~(width - 1);
  int from = me.lane;
  switch (mode) {
    case 0:
      from = base + (src & (width - 1));
      break;
    case 1:
      from = me.lane ^ src;
      if (from >= base + width) from = me.lane;
      break;
    case 2:
      from = me.lane + src;
      if (from >= base + width) from = me.lane;
      break;
    default:
      from = me.lane - src;
      if (from < base) from = me.lane;
      break;
  }
  if (from < 0 || from >= kWarpSize || ((mask >> from) & 1u) == 0)
    fault(cudaErrorLaunchFailure, std::string(kernel_name()) + ": shuffle at " + where() +
                                      " reads lane " + std::to_string(from) + ", not in the mask");
  return w.vals[gen % 2][from];
}

unsigned warp_vote(unsigned mask, int pred) {
  Thread& me = self();
  const unsigned gen = warp_arrive(mask, pred != 0, "vote");
  const Warp& w = t_blk->warps[static_cast<size_t>(me.warp)];
  unsigned out = 0;
  for (int l = 0; l < kWarpSize; ++l)
    if (((mask >> l) & 1u) != 0 && w.vals[gen % 2][l] != 0) out |= 1u << l;
  return out;
}

void nanosleep_ns(unsigned ns) {
  Thread& me = self();
  me.state = State::kSleep;
  yield();
  (void)ns;  // the scheduler sleeps when every thread of the block sleeps
}

[[noreturn]] void trap() {
  fault(cudaErrorLaunchFailure, std::string(kernel_name()) + ": __trap() at " + where());
}

uint64_t globaltimer_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}
}  // namespace tandem_emu
