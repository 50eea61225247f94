// The emulator's CUDA runtime: one emulated device with an H100's properties, device memory in
// its own address range (filled with NaN bytes when allocated, PROT_NONE while no stream or
// emulator copy is working, so a host access faults), pinned host memory mapped twice (the host
// view and a separate device alias, like cudaHostGetDevicePointer without UVA), streams as
// in-order queues each run by a worker thread (a launch or async copy returns before it runs),
// events, errors with CUDA's sticky/non-sticky split, the counters of kernels/cuda/emulator.h,
// and a SIGSEGV reporter that names what the host touched.
#include <fcntl.h>
#include <linux/falloc.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <sstream>
#include <thread>

#include "kernels/cuda/emu/emu_internal.h"
#include "kernels/cuda/emulator.h"

namespace tandem_emu {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kPage = 4096;
constexpr size_t kDeviceAlign = 256;
constexpr size_t kRedzone = 256;  // gap between device allocations
constexpr size_t kPinnedVa = size_t{64} << 30;

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// First-fit allocator of offsets in [0, cap).
class RangeAllocator {
 public:
  void init(size_t cap) { free_[0] = cap; }
  size_t allocate(size_t len, size_t align) {
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      const size_t off = round_up(it->first, align);
      if (off + len > it->first + it->second) continue;
      const size_t lo = it->first, hi = it->first + it->second;
      free_.erase(it);
      if (off > lo) free_[lo] = off - lo;
      if (hi > off + len) free_[off + len] = hi - (off + len);
      return off;
    }
    return SIZE_MAX;
  }
  void release(size_t off, size_t len) {
    auto it = free_.emplace(off, len).first;
    auto next = std::next(it);
    if (next != free_.end() && off + len == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

 private:
  std::map<size_t, size_t> free_;
};

struct Memory {
  std::mutex m;
  uintptr_t dev_lo = 0, dev_hi = 0;     // the reserved device range
  size_t dev_used = 0, dev_extent = 0;  // bytes in use; highest offset ever handed out
  RangeAllocator dev_alloc;
  std::map<uintptr_t, Alloc> dev;  // by lo
  int pinned_fd = -1;
  uintptr_t host_lo = 0, alias_lo = 0;  // the two views of the pinned file
  RangeAllocator pinned_alloc;
  std::map<uintptr_t, Alloc> pinned;  // by host-view lo
  uint64_t next_id = 1;
  // Arena protection: open while a stream runs a task or emulator code copies.
  std::mutex open_m;
  int open = 0;
};

Memory& mem() {
  static Memory* m = [] {
    auto* p = new Memory;
    const size_t reserve = round_up(settings().device_bytes + settings().device_bytes / 4, kPage);
    void* d = mmap(nullptr, reserve, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (d == MAP_FAILED) {
      std::perror("tandem emulator: reserving the device address range");
      std::abort();
    }
    p->dev_lo = reinterpret_cast<uintptr_t>(d);
    p->dev_hi = p->dev_lo + reserve;
    p->dev_alloc.init(reserve);
    p->pinned_fd = memfd_create("tandem-emu-pinned", MFD_CLOEXEC);
    if (p->pinned_fd < 0 || ftruncate(p->pinned_fd, static_cast<off_t>(kPinnedVa)) != 0) {
      std::perror("tandem emulator: pinned memory file");
      std::abort();
    }
    void* h = mmap(nullptr, kPinnedVa, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                   p->pinned_fd, 0);
    void* a = mmap(nullptr, kPinnedVa, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                   p->pinned_fd, 0);
    if (h == MAP_FAILED || a == MAP_FAILED) {
      std::perror("tandem emulator: mapping pinned memory");
      std::abort();
    }
    p->host_lo = reinterpret_cast<uintptr_t>(h);
    p->alias_lo = reinterpret_cast<uintptr_t>(a);
    p->pinned_alloc.init(kPinnedVa);
    return p;
  }();
  return *m;
}

void protect_extent(Memory& m, int prot) {
  if (m.dev_extent == 0) return;
  mprotect(reinterpret_cast<void*>(m.dev_lo), round_up(m.dev_extent, kPage), prot);
}

// ---- errors ------------------------------------------------------------------------------------

std::atomic<int> g_sticky{cudaSuccess};
thread_local cudaError_t t_last = cudaSuccess;

cudaError_t ret(cudaError_t e) {
  if (e != cudaSuccess) t_last = e;
  return e;
}

void report(const std::string& what) {
  std::fprintf(stderr, "tandem emulator: %s\n", what.c_str());
  std::fflush(stderr);
}

// ---- pinned copies still in flight ---------------------------------------------------------
// A cudaMemcpyAsync into pinned host memory leaves the destination's pages PROT_NONE in the host
// view until the host synchronises with the stream (the copy writes through the device alias),
// so a host read before the synchronisation faults and is reported.

struct Pending {
  std::atomic<uintptr_t> lo{0}, hi{0};
};
constexpr int kMaxPending = 4096;
Pending g_pending[kMaxPending];  // read by the signal handler: fixed, lock-free
struct PendingCopy {
  Stream* stream;
  uint64_t seq;
  uintptr_t lo, hi;  // pages of the host view
  int slot;
};
struct PendingTable {  // function-local: usable from other files' static initialisers
  std::mutex m;
  std::vector<PendingCopy> copies;
  std::map<uintptr_t, int> page_refs;
};
PendingTable& pending() {
  static PendingTable* t = new PendingTable;
  return *t;
}

void protect_pending(Stream* s, uint64_t seq, uintptr_t p, size_t n) {
  const uintptr_t lo = p / kPage * kPage, hi = round_up(p + n, kPage);
  PendingTable& t = pending();
  std::lock_guard<std::mutex> l(t.m);
  int slot = -1;
  for (int i = 0; i < kMaxPending; ++i)
    if (g_pending[i].hi.load() == 0) {
      slot = i;
      break;
    }
  if (slot < 0) return;  // too many in flight to track: unchecked
  for (uintptr_t pg = lo; pg < hi; pg += kPage)
    if (t.page_refs[pg]++ == 0) mprotect(reinterpret_cast<void*>(pg), kPage, PROT_NONE);
  g_pending[slot].lo = p;
  g_pending[slot].hi = p + n;
  t.copies.push_back({s, seq, lo, hi, slot});
}

// Unprotects the copies of s (every stream when s is null) up to sequence number done.
void release_pending(Stream* s, uint64_t done) {
  PendingTable& t = pending();
  std::lock_guard<std::mutex> l(t.m);
  auto keep = t.copies.begin();
  for (auto it = t.copies.begin(); it != t.copies.end(); ++it) {
    if ((s == nullptr || it->stream == s) && it->seq <= done) {
      for (uintptr_t pg = it->lo; pg < it->hi; pg += kPage)
        if (--t.page_refs[pg] == 0) {
          t.page_refs.erase(pg);
          mprotect(reinterpret_cast<void*>(pg), kPage, PROT_READ | PROT_WRITE);
        }
      g_pending[it->slot].hi = 0;
      g_pending[it->slot].lo = 0;
    } else {
      *keep++ = *it;
    }
  }
  t.copies.erase(keep, t.copies.end());
}

// ---- fault reporting -------------------------------------------------------------------------

struct sigaction g_prev_segv, g_prev_bus;

void on_fault(int sig, siginfo_t* si, void* uc) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
  Memory& m = mem();
  const char* what = nullptr;
  if (a >= m.dev_lo && a < m.dev_hi)
    what = "the host touched device memory outside a copy or kernel (use cudaMemcpy)";
  else if (is_stack_guard(a))
    what = "a CUDA thread overflowed its stack";
  else
    for (auto& p : g_pending)
      if (a >= p.lo.load() && a < p.hi.load()) {
        what =
            "the host touched pinned memory that a cudaMemcpyAsync is still writing: synchronise "
            "the stream (or an event recorded after the copy) before reading it";
        break;
      }
  if (what != nullptr) {
    char buf[512];
    const int len =
        std::snprintf(buf, sizeof buf, "tandem emulator: %s (address %p)\n", what, si->si_addr);
    if (len > 0) (void)!write(2, buf, static_cast<size_t>(std::min<int>(len, sizeof buf - 1)));
  }
  const struct sigaction& prev = sig == SIGBUS ? g_prev_bus : g_prev_segv;
  if ((prev.sa_flags & SA_SIGINFO) != 0 && prev.sa_sigaction != nullptr) {
    prev.sa_sigaction(sig, si, uc);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN && prev.sa_handler != nullptr) {
    prev.sa_handler(sig);
    return;
  }
  signal(sig, SIG_DFL);  // returning re-runs the access, which now ends the process
}

void install_fault_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &g_prev_segv);
    sigaction(SIGBUS, &sa, &g_prev_bus);
  });
}

void alt_signal_stack() {
  static thread_local std::unique_ptr<char[]> stack;
  if (stack) return;
  constexpr size_t kSize = 64 * 1024;
  stack.reset(new char[kSize]);
  stack_t ss{};
  ss.ss_sp = stack.get();
  ss.ss_size = kSize;
  sigaltstack(&ss, nullptr);
}

}  // namespace

// ---- settings ----------------------------------------------------------------------------------

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kForward:
      return "forward";
    case Schedule::kReverse:
      return "reverse";
    default:
      return "random";
  }
}

Settings& settings() {
  static Settings s = [] {
    Settings v;
    if (const char* e = std::getenv("TANDEM_EMU_DEVICE_GIB"); e != nullptr && *e != '\0')
      v.device_bytes = static_cast<size_t>(std::max(1.0 / 1024, std::atof(e)) * double(1 << 30));
    if (const char* e = std::getenv("TANDEM_EMU_SCHEDULE"); e != nullptr && *e != '\0') {
      const std::string sch = e;
      if (sch == "reverse") {
        v.schedule = Schedule::kReverse;
      } else if (sch.rfind("random", 0) == 0) {
        v.schedule = Schedule::kRandom;
        if (sch.size() > 7) v.seed = std::strtoull(sch.c_str() + 7, nullptr, 10);
      } else if (sch != "forward") {
        report("TANDEM_EMU_SCHEDULE=" + sch + ": expected forward, reverse or random[:SEED]");
        std::exit(2);
      }
    }
    if (const char* e = std::getenv("TANDEM_EMU_RACECHECK"); e != nullptr)
      v.racecheck = std::string(e) == "1";
    if (const char* e = std::getenv("TANDEM_EMU_PROTECT"); e != nullptr)
      v.protect = std::string(e) != "0";
    if (const char* e = std::getenv("TANDEM_EMU_DEFER"); e != nullptr)
      v.defer = std::string(e) == "1";
    return v;
  }();
  return s;
}

[[noreturn]] void fault(cudaError_t code, std::string what) {
  throw KernelFault{code, std::move(what)};
}

cudaError_t sticky_error() { return static_cast<cudaError_t>(g_sticky.load()); }
void set_last_error(cudaError_t e) { t_last = e; }

// ---- memory lookups --------------------------------------------------------------------------

Region region_of(uintptr_t p) {
  Memory& m = mem();
  if (p >= m.dev_lo && p < m.dev_hi) return Region::kDevice;
  if (p >= m.host_lo && p < m.host_lo + kPinnedVa) return Region::kMappedHost;
  if (p >= m.alias_lo && p < m.alias_lo + kPinnedVa) return Region::kMappedDevice;
  return Region::kNone;
}

Alloc find_alloc(uintptr_t p, size_t n) {
  Memory& m = mem();
  Alloc out;
  out.region = region_of(p);
  if (out.region == Region::kNone) return out;
  std::lock_guard<std::mutex> l(m.m);
  if (out.region == Region::kDevice) {
    auto it = m.dev.upper_bound(p);
    if (it != m.dev.begin() && p + n <= std::prev(it)->second.hi) return std::prev(it)->second;
    return out;
  }
  const uintptr_t host = out.region == Region::kMappedHost ? p : p - m.alias_lo + m.host_lo;
  auto it = m.pinned.upper_bound(host);
  if (it != m.pinned.begin() && host + n <= std::prev(it)->second.hi) {
    Alloc a = std::prev(it)->second;
    if (out.region == Region::kMappedDevice) {
      a.lo = a.lo - m.host_lo + m.alias_lo;
      a.hi = a.hi - m.host_lo + m.alias_lo;
      a.region = Region::kMappedDevice;
    }
    return a;
  }
  return out;
}

std::string describe_address(uintptr_t p, size_t n) {
  Memory& m = mem();
  std::ostringstream os;
  os << "0x" << std::hex << p << std::dec << " (" << n << " bytes)";
  const Region r = region_of(p);
  if (r == Region::kNone) return os.str() + ", not device or pinned memory";
  std::lock_guard<std::mutex> l(m.m);
  const std::map<uintptr_t, Alloc>& table = r == Region::kDevice ? m.dev : m.pinned;
  const uintptr_t q = r == Region::kMappedDevice ? p - m.alias_lo + m.host_lo : p;
  auto it = table.upper_bound(q);
  if (it != table.begin()) {
    const Alloc& a = std::prev(it)->second;
    os << ", ending " << (q + n - a.hi) << " bytes past the end of allocation #" << a.id << " of "
       << a.bytes << " bytes";
  }
  if (it != table.end())
    os << ", " << (it->second.lo - q) << " bytes before allocation #" << it->second.id;
  return os.str();
}

ArenaAccess::ArenaAccess() {
  Memory& m = mem();
  std::lock_guard<std::mutex> l(m.open_m);
  if (m.open++ == 0 && settings().protect) protect_extent(m, PROT_READ | PROT_WRITE);
}
ArenaAccess::~ArenaAccess() {
  Memory& m = mem();
  std::lock_guard<std::mutex> l(m.open_m);
  if (--m.open == 0 && settings().protect) protect_extent(m, PROT_NONE);
}

// ---- streams -----------------------------------------------------------------------------------

struct Stream {
  int id = 0;
  std::mutex m;
  std::condition_variable cv_task, cv_done;
  std::deque<Task> q;
  uint64_t enq = 0, done = 0;
  uint64_t released = settings().defer ? 0 : UINT64_MAX;  // tasks up to this one may run
  bool stop = false;
  std::thread worker;
};

namespace {

struct StreamTable {
  std::mutex m;
  std::vector<Stream*> all;
  int next = 1;
};
StreamTable& streams() {
  static StreamTable* t = new StreamTable;
  return *t;
}

void worker_loop(Stream* s) {
  alt_signal_stack();
  std::unique_ptr<ArenaAccess> open;
  for (;;) {
    Task t;
    {
      std::unique_lock<std::mutex> l(s->m);
      s->cv_task.wait(
          l, [&] { return (s->stop && s->q.empty()) || (!s->q.empty() && s->done < s->released); });
      if (s->q.empty()) return;
      t = std::move(s->q.front());
      s->q.pop_front();
    }
    if (!open) open = std::make_unique<ArenaAccess>();
    if (sticky_error() == cudaSuccess) {
      try {
        t();
      } catch (const KernelFault& f) {
        int expected = cudaSuccess;
        g_sticky.compare_exchange_strong(expected, f.code);
        report(f.what + " [" + cudaGetErrorString(f.code) + "; the context is now unusable]");
      } catch (const std::exception& e) {
        int expected = cudaSuccess;
        g_sticky.compare_exchange_strong(expected, cudaErrorUnknown);
        report(std::string("task failed: ") + e.what());
      }
    }
    std::lock_guard<std::mutex> l(s->m);
    if (s->q.empty()) open.reset();  // closed before anyone sees the work done
    ++s->done;
    s->cv_done.notify_all();
  }
}

Stream* new_stream() {
  mem();
  install_fault_handler();
  auto* s = new Stream;
  {
    std::lock_guard<std::mutex> l(streams().m);
    s->id = streams().next++;
    streams().all.push_back(s);
  }
  s->worker = std::thread(worker_loop, s);
  return s;
}

Stream* default_stream() {
  static Stream* s = [] {
    Stream* d = new_stream();
    d->worker.detach();  // lives as long as the process
    return d;
  }();
  return s;
}

uint64_t enqueue_seq(Stream* s, Task t) {
  std::lock_guard<std::mutex> l(s->m);
  s->q.push_back(std::move(t));
  s->cv_task.notify_one();
  return ++s->enq;
}

// Waiting for a stream lets it run (under TANDEM_EMU_DEFER, nothing else does).
void wait_done(Stream* s, uint64_t seq) {
  std::unique_lock<std::mutex> l(s->m);
  if (s->released < seq) {
    s->released = seq;
    s->cv_task.notify_one();
  }
  s->cv_done.wait(l, [&] { return s->done >= seq; });
}

// A host wait on the device, counted with its time.
template <typename F>
void host_wait(F&& f) {
  const auto t0 = Clock::now();
  f();
  counters().host_syncs.fetch_add(1);
  counters().host_sync_ns.fetch_add(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

std::vector<Stream*> all_streams() {
  default_stream();
  std::lock_guard<std::mutex> l(streams().m);
  return streams().all;
}

// Waits for everything queued on s so far; its pinned copies become readable.
void drain(Stream* s) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(s->m);
    seq = s->enq;
  }
  wait_done(s, seq);
  release_pending(s, seq);
}

cudaError_t sync_all() {
  host_wait([] {
    for (Stream* s : all_streams()) drain(s);
  });
  return sticky_error();
}

}  // namespace

Stream* resolve(cudaStream_t s) { return s != nullptr ? s : default_stream(); }
void enqueue(Stream* s, Task t) { enqueue_seq(s, std::move(t)); }

cudaError_t sync_stream(Stream* s) {
  host_wait([s] { drain(s); });
  return sticky_error();
}

// ---- events ------------------------------------------------------------------------------------

struct Event {
  Stream* stream = nullptr;  // of the last record
  uint64_t seq = 0;
  std::shared_ptr<Clock::time_point> when = std::make_shared<Clock::time_point>();
};

// ---- counters ----------------------------------------------------------------------------------

Counters& counters() {
  static Counters* c = new Counters;
  return *c;
}

void add_kernel_counters(const std::string& name, const KernelCounters& k) {
  Counters& c = counters();
  std::lock_guard<std::mutex> l(c.m);
  KernelCounters& t = c.kernels[name];
  t.launches += k.launches;
  t.blocks += k.blocks;
  t.threads += k.threads;
  t.device_read += k.device_read;
  t.device_write += k.device_write;
  t.mapped_read += k.mapped_read;
  t.mapped_write += k.mapped_write;
}

}  // namespace tandem_emu

using namespace tandem_emu;

// ---- the runtime API -------------------------------------------------------------------------

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
    case cudaErrorIllegalAddress:
      return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorAssert:
      return "cudaErrorAssert";
    default:
      return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorAssert:
      return "device-side assert triggered";
    default:
      return "unknown error";
  }
}

cudaError_t cudaGetLastError() {
  const cudaError_t s = sticky_error();
  if (s != cudaSuccess) return s;
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() {
  const cudaError_t s = sticky_error();
  return s != cudaSuccess ? s : t_last;
}

cudaError_t cudaGetDeviceCount(int* n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : ret(cudaErrorInvalidValue);
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return ret(cudaErrorInvalidValue);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "Tandem SIMT emulator (H100 SXM properties)");
  prop->totalGlobalMem = settings().device_bytes;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->sharedMemPerBlockOptin = 227 * 1024;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->memoryBusWidth = 5120;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  cudaDeviceProp p;
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return ret(cudaErrorInvalidValue);
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = p.maxThreadsPerBlock;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = static_cast<int>(p.sharedMemPerBlock);
      break;
    case cudaDevAttrWarpSize:
      *value = p.warpSize;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = p.multiProcessorCount;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = p.major;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = p.minor;
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = static_cast<int>(p.sharedMemPerMultiprocessor);
      break;
    default:
      return ret(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return ret(sync_all()); }

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  Memory& m = mem();
  std::lock_guard<std::mutex> l(m.m);
  *total = settings().device_bytes;
  *free = *total - std::min(*total, m.dev_used);
  return sticky_error();
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  if (sticky_error() != cudaSuccess) return sticky_error();
  if (bytes == 0) return cudaSuccess;
  Memory& m = mem();
  install_fault_handler();
  const size_t len = round_up(bytes, kDeviceAlign);
  Alloc a;
  {
    std::lock_guard<std::mutex> l(m.m);
    if (m.dev_used + len > settings().device_bytes) return ret(cudaErrorMemoryAllocation);
    const size_t off = m.dev_alloc.allocate(len + kRedzone, kDeviceAlign);
    if (off == SIZE_MAX) return ret(cudaErrorMemoryAllocation);
    a.lo = m.dev_lo + off;
    a.hi = a.lo + bytes;
    a.id = m.next_id++;
    a.region = Region::kDevice;
    a.bytes = bytes;
    m.dev[a.lo] = a;
    m.dev_used += len;
    std::lock_guard<std::mutex> lo(m.open_m);
    const size_t extent = off + len + kRedzone;
    if (extent > m.dev_extent) {
      const size_t old = round_up(m.dev_extent, kPage);
      m.dev_extent = extent;
      const size_t now = round_up(extent, kPage);
      if (now > old && (m.open > 0 || !settings().protect))
        mprotect(reinterpret_cast<void*>(m.dev_lo + old), now - old, PROT_READ | PROT_WRITE);
    }
  }
  {
    ArenaAccess open;
    std::memset(reinterpret_cast<void*>(a.lo), 0xff, bytes);  // NaN in f32, f16 and bf16
  }
  *p = reinterpret_cast<void*>(a.lo);
  return cudaSuccess;
}

namespace {

// Waits for the device (a free does), then removes the allocation starting at p from table;
// false (reported) when p starts none.
bool take_alloc(std::map<uintptr_t, Alloc>& table, void* p, const char* call, Alloc* out) {
  sync_all();
  {
    std::lock_guard<std::mutex> l(mem().m);
    auto it = table.find(reinterpret_cast<uintptr_t>(p));
    if (it != table.end()) {
      *out = it->second;
      table.erase(it);
      return true;
    }
  }
  // Reported outside the lock: describe_address takes it.
  report(std::string(call) + "(" + describe_address(reinterpret_cast<uintptr_t>(p), 1) +
         "): not the start of a live allocation of its kind");
  return false;
}

}  // namespace

cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  Memory& m = mem();
  Alloc a;
  if (!take_alloc(m.dev, p, "cudaFree", &a)) return ret(cudaErrorInvalidDevicePointer);
  std::lock_guard<std::mutex> l(m.m);
  const size_t len = round_up(a.bytes, kDeviceAlign);
  m.dev_used -= len;
  m.dev_alloc.release(a.lo - m.dev_lo, len + kRedzone);
  const uintptr_t plo = round_up(a.lo, kPage), phi = (a.lo + len) / kPage * kPage;
  if (phi > plo) madvise(reinterpret_cast<void*>(plo), phi - plo, MADV_DONTNEED);
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  *p = nullptr;
  if (sticky_error() != cudaSuccess) return sticky_error();
  Memory& m = mem();
  install_fault_handler();
  const size_t len = round_up(std::max<size_t>(bytes, 1), kPage);
  Alloc a;
  {
    std::lock_guard<std::mutex> l(m.m);
    const size_t off = m.pinned_alloc.allocate(len, kPage);
    if (off == SIZE_MAX) return ret(cudaErrorMemoryAllocation);
    a.lo = m.host_lo + off;
    a.hi = a.lo + bytes;
    a.id = m.next_id++;
    a.region = Region::kMappedHost;
    a.bytes = bytes;
    m.pinned[a.lo] = a;
  }
  std::memset(reinterpret_cast<void*>(a.lo), 0xff, bytes);
  *p = reinterpret_cast<void*>(a.lo);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return cudaHostAlloc(p, bytes, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void* p) {
  if (p == nullptr) return cudaSuccess;
  Memory& m = mem();
  Alloc a;
  if (!take_alloc(m.pinned, p, "cudaFreeHost", &a)) return ret(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> l(m.m);
  const size_t len = round_up(std::max<size_t>(a.bytes, 1), kPage);
  const size_t off = a.lo - m.host_lo;
  fallocate(m.pinned_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
            static_cast<off_t>(len));
  m.pinned_alloc.release(off, len);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned) {
  const Alloc a = find_alloc(reinterpret_cast<uintptr_t>(host), 1);
  if (a.id == 0 || a.region != Region::kMappedHost) return ret(cudaErrorInvalidValue);
  *dev =
      reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(host) - mem().host_lo + mem().alias_lo);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  *attr = cudaPointerAttributes{};
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  const Alloc a = find_alloc(u, 1);
  Memory& m = mem();
  if (a.id == 0) return cudaSuccess;  // pageable (or not allocated): unregistered
  switch (a.region) {
    case Region::kDevice:
      attr->type = cudaMemoryTypeDevice;
      attr->devicePointer = const_cast<void*>(p);
      break;
    case Region::kMappedHost:
      attr->type = cudaMemoryTypeHost;
      attr->hostPointer = const_cast<void*>(p);
      attr->devicePointer = reinterpret_cast<void*>(u - m.host_lo + m.alias_lo);
      break;
    case Region::kMappedDevice:
      attr->type = cudaMemoryTypeHost;
      attr->devicePointer = const_cast<void*>(p);
      attr->hostPointer = reinterpret_cast<void*>(u - m.alias_lo + m.host_lo);
      break;
    default:
      break;
  }
  return cudaSuccess;
}

namespace {

enum class Side { kDevice, kPinned, kPageable };

// Where [p, p + n) lives, and the address the device side uses for it; false if it starts in
// device or pinned memory but does not fit one allocation.
bool classify(const void* p, size_t n, Side* side, uintptr_t* dev_addr) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  const Alloc a = find_alloc(u, std::max<size_t>(n, 1));
  Memory& m = mem();
  if (a.region == Region::kNone) {
    *side = Side::kPageable;
    *dev_addr = u;
    return true;
  }
  if (a.id == 0) return false;
  if (a.region == Region::kDevice) {
    *side = Side::kDevice;
    *dev_addr = u;
  } else {
    *side = Side::kPinned;
    *dev_addr = a.region == Region::kMappedDevice ? u : u - m.host_lo + m.alias_lo;
  }
  return true;
}

cudaError_t copy(void* dst, const void* src, size_t n, cudaMemcpyKind kind, cudaStream_t stream,
                 bool sync_call) {
  if (sticky_error() != cudaSuccess) return sticky_error();
  if (n == 0) return cudaSuccess;
  Side ds, ss;
  uintptr_t da, sa;
  if (!classify(dst, n, &ds, &da)) {
    report(std::string(sync_call ? "cudaMemcpy" : "cudaMemcpyAsync") + ": destination " +
           describe_address(reinterpret_cast<uintptr_t>(dst), n) + " overruns its allocation");
    return ret(cudaErrorInvalidValue);
  }
  if (!classify(src, n, &ss, &sa)) {
    report(std::string(sync_call ? "cudaMemcpy" : "cudaMemcpyAsync") + ": source " +
           describe_address(reinterpret_cast<uintptr_t>(src), n) + " overruns its allocation");
    return ret(cudaErrorInvalidValue);
  }
  const bool d_dev = ds == Side::kDevice, s_dev = ss == Side::kDevice;
  const bool ok = kind == cudaMemcpyDefault ||
                  (kind == cudaMemcpyHostToDevice && d_dev && !s_dev) ||
                  (kind == cudaMemcpyDeviceToHost && s_dev && !d_dev) ||
                  (kind == cudaMemcpyDeviceToDevice && (d_dev || s_dev)) ||
                  (kind == cudaMemcpyHostToHost && !d_dev && !s_dev);
  if (!ok) {
    report("cudaMemcpy: kind " + std::to_string(kind) + " does not match the pointers (dst " +
           describe_address(reinterpret_cast<uintptr_t>(dst), n) + ", src " +
           describe_address(reinterpret_cast<uintptr_t>(src), n) + ")");
    return ret(cudaErrorInvalidMemcpyDirection);
  }
  Stream* s = resolve(stream);
  Counters& c = counters();
  c.copies.fetch_add(1);
  if (d_dev && s_dev) {
    c.d2d.fetch_add(static_cast<int64_t>(n));
    const uint64_t seq = enqueue_seq(s, [da, sa, n] {
      std::memmove(reinterpret_cast<void*>(da), reinterpret_cast<const void*>(sa), n);
    });
    if (sync_call) host_wait([&] { wait_done(s, seq); });
  } else if (d_dev) {  // host -> device
    c.h2d.fetch_add(static_cast<int64_t>(n));
    if (ss == Side::kPageable) {
      // Staged now (the caller may reuse src on return); the DMA runs in stream order.
      auto staged = std::make_shared<std::vector<unsigned char>>(
          static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + n);
      enqueue_seq(s,
                  [da, staged, n] { std::memcpy(reinterpret_cast<void*>(da), staged->data(), n); });
    } else {  // pinned: read when the stream gets there, as a DMA would
      const uint64_t seq = enqueue_seq(s, [da, sa, n] {
        std::memcpy(reinterpret_cast<void*>(da), reinterpret_cast<const void*>(sa), n);
      });
      if (sync_call) host_wait([&] { wait_done(s, seq); });
    }
  } else if (s_dev) {  // device -> host
    c.d2h.fetch_add(static_cast<int64_t>(n));
    const uint64_t seq = enqueue_seq(s, [da, sa, n] {
      std::memcpy(reinterpret_cast<void*>(da), reinterpret_cast<const void*>(sa), n);
    });
    if (sync_call || ds == Side::kPageable) {
      // To pageable memory the copy is synchronous, as in CUDA.
      host_wait([&] { wait_done(s, seq); });
    } else if (ds == Side::kPinned &&
               reinterpret_cast<uintptr_t>(dst) == da - mem().alias_lo + mem().host_lo) {
      bool done;
      {
        std::lock_guard<std::mutex> l(s->m);
        done = s->done >= seq;
      }
      if (!done) protect_pending(s, seq, reinterpret_cast<uintptr_t>(dst), n);
    }
  } else {  // host -> host
    const uint64_t seq = enqueue_seq(s, [da, sa, n] {
      std::memmove(reinterpret_cast<void*>(da), reinterpret_cast<const void*>(sa), n);
    });
    host_wait([&] { wait_done(s, seq); });
  }
  return sticky_error();
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind, nullptr, true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream, false);
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (sticky_error() != cudaSuccess) return sticky_error();
  if (bytes == 0) return cudaSuccess;
  const Alloc a = find_alloc(reinterpret_cast<uintptr_t>(p), bytes);
  if (a.id == 0 || a.region == Region::kMappedHost) {
    report("cudaMemset: " + describe_address(reinterpret_cast<uintptr_t>(p), bytes) +
           " is not inside one device allocation");
    return ret(cudaErrorInvalidValue);
  }
  counters().memset.fetch_add(static_cast<int64_t>(bytes));
  enqueue(resolve(stream), [p, value, bytes] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t bytes) {
  return cudaMemsetAsync(p, value, bytes, nullptr);
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = new_stream();
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr) return ret(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> l(s->m);
    s->stop = true;
    s->released = UINT64_MAX;
    s->cv_task.notify_one();
  }
  s->worker.join();  // runs what was queued first, as CUDA does
  {
    std::lock_guard<std::mutex> l(streams().m);
    streams().all.erase(std::remove(streams().all.begin(), streams().all.end(), s),
                        streams().all.end());
  }
  release_pending(s, UINT64_MAX);
  delete s;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) { return ret(sync_stream(resolve(s))); }

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Stream* s = resolve(stream);
  std::lock_guard<std::mutex> l(s->m);
  if (s->released < s->enq) {  // a host that polls is waiting: the stream may run
    s->released = s->enq;
    s->cv_task.notify_one();
  }
  if (s->done < s->enq) return cudaErrorNotReady;
  return sticky_error();
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned) {
  if (e == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (e->stream == nullptr) return cudaSuccess;  // never recorded: nothing to wait for
  Stream* on = e->stream;
  const uint64_t seq = e->seq;
  enqueue(resolve(stream), [on, seq] { wait_done(on, seq); });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) {
  *e = new Event;
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  delete e;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  if (e == nullptr) return ret(cudaErrorInvalidResourceHandle);
  Stream* s = resolve(stream);
  auto when = std::make_shared<Clock::time_point>();
  e->when = when;
  e->stream = s;
  e->seq = enqueue_seq(s, [when] { *when = Clock::now(); });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (e == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (e->stream == nullptr) return cudaSuccess;
  host_wait([e] { wait_done(e->stream, e->seq); });
  release_pending(e->stream, e->seq);
  return ret(sticky_error());
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (e == nullptr) return ret(cudaErrorInvalidResourceHandle);
  if (e->stream == nullptr) return cudaSuccess;
  bool done;
  {
    Stream* s = e->stream;
    std::lock_guard<std::mutex> l(s->m);
    done = s->done >= e->seq;
    if (s->released < e->seq) {
      s->released = e->seq;
      s->cv_task.notify_one();
    }
  }
  if (!done) return cudaErrorNotReady;
  release_pending(e->stream, e->seq);
  return sticky_error();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (start == nullptr || end == nullptr || start->stream == nullptr || end->stream == nullptr)
    return ret(cudaErrorInvalidResourceHandle);
  if (cudaEventQuery(start) != cudaSuccess || cudaEventQuery(end) != cudaSuccess)
    return ret(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(*end->when - *start->when).count();
  return cudaSuccess;
}

// ---- kernels/cuda/emulator.h -------------------------------------------------------------------

namespace tandem {

bool cuda_is_emulated() { return true; }

CudaEmulatorCounters cuda_emulator_counters() {
  Counters& c = counters();
  CudaEmulatorCounters out;
  out.launches = c.launches.load();
  out.copies = c.copies.load();
  out.h2d_bytes = c.h2d.load();
  out.d2h_bytes = c.d2h.load();
  out.d2d_bytes = c.d2d.load();
  out.memset_bytes = c.memset.load();
  out.host_syncs = c.host_syncs.load();
  out.host_sync_seconds = static_cast<double>(c.host_sync_ns.load()) * 1e-9;
  out.cublas_calls = c.cublas_calls.load();
  out.cublas_bytes = c.cublas_bytes.load();
  out.cublas_flops = c.cublas_flops.load();
  std::lock_guard<std::mutex> l(c.m);
  for (const auto& [name, k] : c.kernels) {
    CudaKernelCounters& o = out.kernels[name];
    o.launches = k.launches;
    o.blocks = k.blocks;
    o.threads = k.threads;
    o.device_read_bytes = k.device_read;
    o.device_write_bytes = k.device_write;
    o.mapped_read_bytes = k.mapped_read;
    o.mapped_write_bytes = k.mapped_write;
    out.kernel_device_read_bytes += k.device_read;
    out.kernel_device_write_bytes += k.device_write;
    out.kernel_mapped_read_bytes += k.mapped_read;
    out.kernel_mapped_write_bytes += k.mapped_write;
  }
  return out;
}

void cuda_emulator_reset_counters() {
  Counters& c = counters();
  for (auto* a : {&c.launches, &c.copies, &c.h2d, &c.d2h, &c.d2d, &c.memset, &c.host_syncs,
                  &c.host_sync_ns, &c.cublas_calls, &c.cublas_bytes})
    a->store(0);
  c.cublas_flops.store(0.0);
  std::lock_guard<std::mutex> l(c.m);
  c.kernels.clear();
}

std::string cuda_emulator_settings() {
  const Settings& s = settings();
  std::ostringstream os;
  os << "SIMT emulator: " << (s.device_bytes >> 20) << " MiB device, schedule "
     << schedule_name(s.schedule);
  if (s.schedule == Schedule::kRandom) os << " (seed " << s.seed << ")";
  os << ", racecheck " << (s.racecheck ? "on" : "off") << ", host access to device memory "
     << (s.protect ? "faults" : "allowed") << ", streams " << (s.defer ? "deferred" : "eager");
  return os.str();
}

}  // namespace tandem
