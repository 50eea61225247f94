// The emulator's memory: device memory in its own reserved address range (256-byte aligned, a red
// zone between allocations, filled with NaN bytes when allocated, PROT_NONE while no stream and
// no emulator copy is working, so a host access faults), and pinned host memory as one
// shared-memory file mapped twice: the host view and a separate device alias, like
// cudaHostGetDevicePointer without UVA. Lookups of the allocation holding an address, for the
// checks and the messages.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "kernels/cuda/emu/runtime_internal.h"

namespace tandem_emu {
namespace {

constexpr size_t kDeviceAlign = 256;
constexpr size_t kRedzone = 256;  // gap between device allocations
constexpr size_t kPinnedVa = size_t{64} << 30;

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

// ---- lookups -----------------------------------------------------------------------------------

void reserve_memory() { mem(); }

bool in_device_range(uintptr_t p) {
  const Memory& m = mem();
  return p >= m.dev_lo && p < m.dev_hi;
}

uintptr_t host_to_alias(uintptr_t p) { return p - mem().host_lo + mem().alias_lo; }
uintptr_t alias_to_host(uintptr_t p) { return p - mem().alias_lo + mem().host_lo; }

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

}  // namespace tandem_emu

using namespace tandem_emu;

// ---- the runtime API ---------------------------------------------------------------------------

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
