// Unit tests of Buffer (kernels/buffer.h): one allocate and one deallocate per owned allocation,
// through whichever allocator made it; move-only ownership; the memory kind of the view; zero
// elements; failures that leave nothing allocated.
#include <sys/mman.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/common.h"
#include "kernels/tensor.h"

using namespace tandem;

namespace {

// An allocator over the host heap that counts its calls and remembers what is live; it fails
// (kOutOfMemory, or a null pointer) when told to.
struct CountingMemory {
  int allocs = 0;  // calls of allocate, failed ones included
  int frees = 0;
  int64_t last_bytes = -1;
  bool fail = false;
  bool return_null = false;
  std::map<void*, int64_t> live;

  Allocator allocator(MemoryKind kind = MemoryKind::kDevice) {
    return {&allocate, &deallocate, this, kind};
  }

  static void* allocate(void* self, int64_t bytes) {
    CountingMemory& m = *static_cast<CountingMemory*>(self);
    ++m.allocs;
    m.last_bytes = bytes;
    if (m.fail) TANDEM_FAIL(kOutOfMemory, "counting allocator told to fail");
    if (m.return_null) return nullptr;
    const Allocator heap = host_heap();
    void* p = heap.allocate(heap.context, bytes);
    m.live[p] = bytes;
    return p;
  }
  static void deallocate(void* self, void* p) noexcept {
    CountingMemory& m = *static_cast<CountingMemory*>(self);
    ++m.frees;
    m.live.erase(p);
    const Allocator heap = host_heap();
    heap.deallocate(heap.context, p);
  }
};

}  // namespace

static_assert(!std::is_copy_constructible_v<Buffer> && !std::is_copy_assignable_v<Buffer>);
// vector<Buffer> moves (never copies) its elements when it grows only if this holds.
static_assert(std::is_nothrow_move_constructible_v<Buffer> &&
              std::is_nothrow_move_assignable_v<Buffer>);

TEST_CASE("buffer: one allocate and one deallocate per buffer, through its allocator", "[buffer]") {
  CountingMemory mem;
  {
    const Buffer b(mem.allocator(), DType::kF16, {3, 5});
    CHECK(mem.allocs == 1);
    CHECK(mem.last_bytes == 3 * 5 * 2);
    CHECK(mem.frees == 0);
    REQUIRE(mem.live.count(b.view().data) == 1);
    CHECK(!b.empty());
    CHECK(b.view().dtype == DType::kF16);
    CHECK(b.view().ndim == 2);
    CHECK(b.view().dim(0) == 3);
    CHECK(b.view().dim(1) == 5);
    CHECK(b.view().contiguous());
    CHECK(b.as<uint16_t>() == b.view().data);
  }
  CHECK(mem.allocs == 1);
  CHECK(mem.frees == 1);
  CHECK(mem.live.empty());

  const Buffer empty;  // owns nothing, frees nothing
  CHECK(empty.empty());
  CHECK(empty.view().data == nullptr);
}

TEST_CASE("buffer: moves hand the allocation over, the old owner frees nothing", "[buffer]") {
  CountingMemory mem, other;
  Buffer a(mem.allocator(), DType::kF32, {4});
  void* const p = a.view().data;

  Buffer b(std::move(a));  // move construction
  CHECK(a.empty());        // moved from: empty
  CHECK(a.view().data == nullptr);
  CHECK(b.view().data == p);
  CHECK(mem.frees == 0);

  Buffer c(other.allocator(), DType::kF32, {8});
  c = std::move(b);  // c's own allocation goes back to its own allocator, once
  CHECK(other.frees == 1);
  CHECK(other.live.empty());
  CHECK(mem.frees == 0);
  CHECK(c.view().data == p);
  CHECK(b.empty());

  Buffer& alias = c;
  c = std::move(alias);  // self-move keeps the allocation
  CHECK(c.view().data == p);
  CHECK(mem.frees == 0);

  c = Buffer();  // assigning an empty buffer frees
  CHECK(mem.frees == 1);
  CHECK(mem.live.empty());
  CHECK(mem.allocs == 1);
  CHECK(other.allocs == 1);
}

TEST_CASE("buffer: the view carries the allocator's memory kind", "[buffer]") {
  CountingMemory mem;
  for (MemoryKind kind : {MemoryKind::kHost, MemoryKind::kPinned, MemoryKind::kDevice}) {
    const Buffer b(mem.allocator(kind), DType::kI32, {2});
    CHECK(b.view().memory == kind);
  }
  CHECK(Buffer(DType::kF32, {2}).view().memory == MemoryKind::kHost);
  // Host bytes standing in for device memory where there is none (a CPU-only KV tier).
  CHECK(Buffer(DType::kF32, {2}, MemoryKind::kDevice).view().memory == MemoryKind::kDevice);
  CHECK(Buffer::zeros(DType::kF32, {2}).view().memory == MemoryKind::kHost);

  // The CPU backend's memory and host memory are both ordinary host memory.
  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  CHECK(Buffer(*cpu, DType::kF32, {2}).view().memory == cpu->memory_kind());
  CHECK(Buffer::host(*cpu, DType::kF32, {2}).view().memory == cpu->host_memory_kind());
  CHECK(backend_memory(*cpu).kind == cpu->memory_kind());
  CHECK(backend_host_memory(*cpu).kind == cpu->host_memory_kind());
}

TEST_CASE("buffer: like and upload make contiguous copies of any shape", "[buffer]") {
  // A strided [2, 3] view: every other column of a [2, 6] buffer.
  Buffer wide(DType::kF32, {2, 6});
  for (int i = 0; i < 12; ++i) wide.as<float>()[i] = static_cast<float>(i);
  TensorView strided = wide.view();
  strided.shape[1] = 3;
  strided.stride[1] = 2;
  CountingMemory mem;
  const Buffer like = Buffer::like(mem.allocator(MemoryKind::kPinned), strided);
  CHECK(mem.last_bytes == 2 * 3 * 4);
  CHECK(like.view().memory == MemoryKind::kPinned);
  CHECK(like.view().dim(1) == 3);
  CHECK(like.view().stride[0] == 3);
  CHECK(like.view().stride[1] == 1);

  const Buffer rank4 = Buffer::like(host_heap(), TensorView(nullptr, DType::kU8, {2, 3, 4, 5}));
  CHECK(rank4.view().ndim == 4);
  CHECK(rank4.view().nbytes() == 120);
  CHECK(rank4.view().contiguous());

  const std::unique_ptr<Backend> cpu = make_cpu_backend();
  CHECK_THROWS(Buffer::upload(*cpu, strided));  // a strided source is refused, before allocating
  const Buffer up = Buffer::upload(*cpu, wide.view());
  CHECK(up.view().data != wide.view().data);
  CHECK(std::memcmp(up.view().data, wide.view().data, 48) == 0);

  const Buffer z = Buffer::zeros(DType::kF32, {5});
  for (int i = 0; i < 5; ++i) CHECK(z.as<float>()[i] == 0.0f);
}

TEST_CASE("buffer: zero elements still allocate once, with their own pointer", "[buffer]") {
  CountingMemory mem;
  {
    const Buffer b(mem.allocator(), DType::kF32, {0, 8});
    CHECK(mem.allocs == 1);
    CHECK(mem.last_bytes == 0);
    CHECK(b.view().numel() == 0);
    CHECK(b.view().data != nullptr);
    CHECK(!b.empty());  // a buffer of nothing is not the empty buffer
  }
  CHECK(mem.frees == 1);
  CHECK(mem.live.empty());

  const Buffer a(DType::kF32, {0}), b(DType::kF32, {0});  // the host heap, likewise
  CHECK(a.view().data != nullptr);
  CHECK(a.view().data != b.view().data);
}

TEST_CASE("buffer: a failed allocation throws and leaves nothing allocated", "[buffer]") {
  CountingMemory mem;
  mem.fail = true;
  try {
    const Buffer b(mem.allocator(), DType::kF32, {1 << 10});
    FAIL("no exception");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::kOutOfMemory);  // the allocator's own error, unchanged
  }
  CHECK(mem.allocs == 1);
  CHECK(mem.frees == 0);
  CHECK_THROWS_AS(Buffer::like(mem.allocator(), TensorView(nullptr, DType::kF32, {4})), Error);
  CHECK(mem.allocs == 2);
  CHECK(mem.frees == 0);

  mem.fail = false;
  mem.return_null = true;  // a broken allocator: caught, nothing to give back
  CHECK_THROWS_AS(Buffer(mem.allocator(), DType::kF32, {4}), Error);
  CHECK(mem.allocs == 3);
  CHECK(mem.frees == 0);

  mem.return_null = false;  // shapes that cannot be allocated never reach the allocator
  CHECK_THROWS_AS(Buffer(mem.allocator(), DType::kF32, {-4}), Error);
  CHECK_THROWS_AS(Buffer(mem.allocator(), DType::kF32, {1, 2, 3, 4, 5}), Error);
  CHECK_THROWS_AS(Buffer(Allocator{}, DType::kF32, {4}), Error);  // no functions at all
  CHECK(mem.allocs == 3);
  CHECK(mem.frees == 0);
  CHECK(mem.live.empty());
}

namespace {

// /proc/self/smaps: whether the mapping holding p is eligible for transparent huge pages (-1: no
// such line, or p in no mapping).
int thp_eligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::stoi(line.substr(12));
    }
  }
  return -1;
}

// Where THP is "madvise" or "always", the mapping holding p may take huge pages (the sanitizers'
// allocators map memory their own way: not checked there).
void check_huge_advised([[maybe_unused]] const void* p) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  const std::string mode = transparent_huge_pages();
  const int eligible = thp_eligible(p);
  INFO("THP " << mode << ", THPeligible " << eligible);
  if (eligible >= 0 && (mode == "madvise" || mode == "always")) CHECK(eligible == 1);
#endif
}

}  // namespace

TEST_CASE("buffer: host_heap_huge aligns large buffers to 2 MiB and advises huge pages",
          "[buffer]") {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  Buffer small(host_heap_huge(), DType::kU8, {1000});
  CHECK(reinterpret_cast<uintptr_t>(small.view().data) % 64 == 0);
  const int64_t n = (int64_t{3} << 20) + 5;  // not a multiple of 2 MiB
  Buffer big(host_heap_huge(MemoryKind::kDevice), DType::kU8, {n});
  CHECK(big.view().memory == MemoryKind::kDevice);
  auto* p = static_cast<unsigned char*>(big.view().data);
  CHECK(reinterpret_cast<uintptr_t>(p) % kHuge == 0);
  std::memset(p, 7, static_cast<size_t>(n));  // every byte asked for is there
  CHECK(p[n - 1] == 7);
  check_huge_advised(p);
}

TEST_CASE("buffer: the CPU backend's allocate takes 2 MiB pages from 2 MiB up", "[buffer]") {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto be = make_cpu_backend();
  Buffer small(*be, DType::kU8, {1000});
  CHECK(reinterpret_cast<uintptr_t>(small.view().data) % 64 == 0);
  const int64_t n = (int64_t{5} << 20) + 3;
  Buffer big(*be, DType::kU8, {n});
  auto* p = static_cast<unsigned char*>(big.view().data);
  CHECK(reinterpret_cast<uintptr_t>(p) % kHuge == 0);
  std::memset(p, 3, static_cast<size_t>(n));
  CHECK(p[n - 1] == 3);
  void* raw = be->allocate(int64_t{4} << 20);
  CHECK(reinterpret_cast<uintptr_t>(raw) % kHuge == 0);
  be->deallocate(raw);
  check_huge_advised(p);
}

TEST_CASE("buffer: huge_page_fraction adds the AnonHugePages of the mappings a range overlaps",
          "[buffer]") {
  // Two mappings inside [0x7f0000000000, +8 MiB), one before and one after it.
  const std::string listing =
      "7effffe00000-7f0000000000 rw-p 00000000 00:00 0\n"
      "Size:               2048 kB\n"
      "AnonHugePages:      2048 kB\n"
      "7f0000000000-7f0000400000 rw-p 00000000 00:00 0\n"
      "Size:               4096 kB\n"
      "AnonHugePages:      2048 kB\n"
      "THPeligible:    1\n"
      "7f0000400000-7f0000800000 rw-p 00000000 00:00 0\n"
      "Size:               4096 kB\n"
      "AnonHugePages:      4096 kB\n"
      "7f0000800000-7f0000a00000 rw-p 00000000 00:00 0\n"
      "AnonHugePages:      2048 kB\n";
  const auto* p = reinterpret_cast<const void*>(uintptr_t{0x7f0000000000});
  std::istringstream a(listing);
  CHECK(huge_page_fraction(a, p, int64_t{8} << 20) == 0.75);  // 6 of 8 MiB
  std::istringstream b(listing);                              // the first mapping only: 2 MiB of 4
  CHECK(huge_page_fraction(b, p, int64_t{4} << 20) == 0.5);
  std::istringstream c(listing);  // a count larger than the range is capped at 1
  CHECK(huge_page_fraction(c, p, int64_t{1} << 20) == 1.0);
  std::istringstream d("");
  CHECK(huge_page_fraction(d, p, int64_t{8} << 20) == 0.0);
  // A live mapping kept off huge pages has none.
  const size_t span = size_t{4} << 20;
  void* m = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(m != MAP_FAILED);
  REQUIRE(madvise(m, span, MADV_NOHUGEPAGE) == 0);
  std::memset(m, 1, span);
  const double f = huge_page_fraction(m, static_cast<int64_t>(span));
  munmap(m, span);
  CHECK((f == 0.0 || f == -1.0));
}
