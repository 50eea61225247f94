// Buffer and the host heap allocator. Buffer's Backend& members live in backend.cpp.
#include "kernels/buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tandem {
namespace {

void* heap_allocate(void*, int64_t bytes) {
  TANDEM_CHECK(bytes >= 0, "negative size ", bytes);
  // aligned_alloc needs a multiple of the alignment, and 0 would make a null or shared pointer.
  const size_t rounded = static_cast<size_t>((bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) TANDEM_FAIL(kOutOfMemory, "cannot allocate ", bytes, " bytes");
  return p;
}

void heap_deallocate(void*, void* p) noexcept { std::free(p); }

void* huge_allocate(void*, int64_t bytes) {
  constexpr int64_t kHuge = int64_t{2} << 20;
  if (bytes < kHuge) return heap_allocate(nullptr, bytes);
  const size_t rounded = static_cast<size_t>((bytes + kHuge - 1) / kHuge * kHuge);
  void* p = std::aligned_alloc(static_cast<size_t>(kHuge), rounded);
  if (p == nullptr) TANDEM_FAIL(kOutOfMemory, "cannot allocate ", bytes, " bytes");
  // Advice only: where it is refused (THP "never", or no such call) the pages stay 4 KiB.
  (void)madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

}  // namespace

Allocator host_heap(MemoryKind kind) { return {&heap_allocate, &heap_deallocate, nullptr, kind}; }

Allocator host_heap_huge(MemoryKind kind) {
  return {&huge_allocate, &heap_deallocate, nullptr, kind};
}

std::string transparent_huge_pages() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  const size_t a = line.find('['), b = line.find(']');
  return a != std::string::npos && b != std::string::npos && a < b ? line.substr(a + 1, b - a - 1)
                                                                   : std::string();
}

double huge_page_fraction(std::istream& smaps, const void* p, int64_t bytes) {
  const auto lo = reinterpret_cast<uintptr_t>(p), hi = lo + static_cast<uintptr_t>(bytes);
  bool inside = false;
  int64_t huge_kb = 0;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t a = 0, b = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> a >> dash >> b && dash == '-') {
      inside = a < hi && lo < b;  // a mapping's first line: "start-end perms ..."
    } else if (inside && line.rfind("AnonHugePages:", 0) == 0) {
      huge_kb += std::stoll(line.substr(14));
    }
  }
  if (bytes <= 0) return 0.0;
  return std::min(1.0, static_cast<double>(huge_kb) * 1024.0 / static_cast<double>(bytes));
}

double huge_page_fraction(const void* p, int64_t bytes) {
  std::ifstream smaps("/proc/self/smaps");
  return smaps ? huge_page_fraction(smaps, p, bytes) : -1.0;
}

Buffer::Buffer(const Allocator& alloc, DType t, std::initializer_list<int64_t> dims)
    : view_(nullptr, t, dims, alloc.kind) {
  take(alloc);
}

Buffer Buffer::like(const Allocator& alloc, const TensorView& shape) {
  Buffer b;
  b.view_ = shape;
  b.view_.data = nullptr;
  b.view_.memory = alloc.kind;
  int64_t s = 1;
  for (int k = shape.ndim - 1; k >= 0; --k) {
    b.view_.stride[static_cast<size_t>(k)] = s;
    s *= shape.shape[static_cast<size_t>(k)];
  }
  b.take(alloc);
  return b;
}

Buffer Buffer::zeros(DType t, std::initializer_list<int64_t> dims) {
  Buffer b(t, dims);
  std::memset(b.view_.data, 0, static_cast<size_t>(b.view_.nbytes()));
  return b;
}

Buffer::Buffer(Buffer&& other) noexcept : alloc_(other.alloc_), view_(other.view_) {
  other.alloc_ = Allocator{};
  other.view_ = TensorView{};
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    alloc_ = other.alloc_;
    view_ = other.view_;
    other.alloc_ = Allocator{};
    other.view_ = TensorView{};
  }
  return *this;
}

void Buffer::take(const Allocator& alloc) {
  TANDEM_CHECK(alloc.allocate != nullptr && alloc.deallocate != nullptr,
               "an allocator without functions for ", view_.describe());
  const int64_t bytes = view_.nbytes();
  TANDEM_CHECK(bytes >= 0, "negative size ", view_.describe());
  void* p = alloc.allocate(alloc.context, bytes);  // throws: nothing taken, nothing to give back
  TANDEM_CHECK(p != nullptr, "the allocator returned null for ", view_.describe());
  view_.data = p;
  alloc_ = alloc;
}

void Buffer::release() noexcept {
  if (view_.data != nullptr) alloc_.deallocate(alloc_.context, view_.data);
  view_ = TensorView{};
  alloc_ = Allocator{};
}

}  // namespace tandem
