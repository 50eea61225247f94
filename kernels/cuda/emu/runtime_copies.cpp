// The emulator's copies and fills, with CUDA's rules: from pageable memory the bytes are staged at
// the call; to pageable memory the call waits; device-to-host into pinned memory is asynchronous,
// and the destination's pages stay PROT_NONE in the host view until the host synchronises with the
// stream (or an event after the copy), so a host read of a stream's output too early faults and
// is reported. A copy that overruns an allocation, or whose kind does not match its pointers, is
// refused with a message.
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels/cuda/emu/runtime_internal.h"

namespace tandem_emu {
namespace {

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

}  // namespace

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

bool pending_copy_at(uintptr_t p) {
  for (const Pending& c : g_pending)
    if (p >= c.lo.load() && p < c.hi.load()) return true;
  return false;
}

}  // namespace tandem_emu

using namespace tandem_emu;

namespace {

enum class Side { kDevice, kPinned, kPageable };

// Where [p, p + n) lives, and the address the device side uses for it; false if it starts in
// device or pinned memory but does not fit one allocation.
bool classify(const void* p, size_t n, Side* side, uintptr_t* dev_addr) {
  const uintptr_t u = reinterpret_cast<uintptr_t>(p);
  const Alloc a = find_alloc(u, std::max<size_t>(n, 1));
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
    *dev_addr = a.region == Region::kMappedDevice ? u : host_to_alias(u);
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
    } else if (ds == Side::kPinned && reinterpret_cast<uintptr_t>(dst) == alias_to_host(da)) {
      if (!stream_done(s, seq)) protect_pending(s, seq, reinterpret_cast<uintptr_t>(dst), n);
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
