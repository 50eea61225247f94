// Buffer: Tandem's one owning allocation, a contiguous TensorView over bytes that came from an
// Allocator and go back to it when the Buffer dies. The allocators: the host heap (here), a
// backend's memory and its host memory (kernels/backend.h), CUDA device and mapped pinned memory
// (kernels/cuda/cuda_memory.h).
//
// This header sits below backend.h (it includes tensor.h only) and stays C++17: the .cu files
// that nvcc compiles see it through backend.h.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>

#include "kernels/tensor.h"

namespace tandem {

class Backend;  // kernels/backend.h; Buffer's Backend& members are defined in backend.cpp

// Where a Buffer's bytes come from: two functions and the object they act on, plus the kind of
// memory they hand out. A value rather than an interface that memory owners implement, because a
// backend owns two memories (allocate/deallocate and allocate_host/deallocate_host): as a value
// each is just (backend, one pair of functions), with no adapter object whose lifetime must match
// the backend's, and a Buffer keeps a copy.
struct Allocator {
  // `bytes` (>= 0) uninitialised bytes, 64-byte aligned at least, never null (zero bytes
  // included); throws on failure (kOutOfMemory when memory is short).
  void* (*allocate)(void* context, int64_t bytes) = nullptr;
  // Gives back a pointer allocate returned. Called from destructors: must not throw.
  void (*deallocate)(void* context, void* p) noexcept = nullptr;
  void* context = nullptr;              // must outlive every allocation made through it
  MemoryKind kind = MemoryKind::kHost;  // the memory kind of every view of the bytes
};

// The host heap: aligned_alloc(64) and free; zero bytes allocate 64. Its views say `kind`: kHost,
// or the memory that host bytes stand in for where there is no device (a CPU-only KV tier).
Allocator host_heap(MemoryKind kind = MemoryKind::kHost);

// The host heap for large buffers read as long streams (the KV pools' chunks,
// kvstore/block_pool.h): from 2 MiB up, 2 MiB aligned, a multiple of 2 MiB, and advised for
// transparent huge pages (madvise MADV_HUGEPAGE), which the kernel backs with 2 MiB pages where
// THP is "madvise" or "always" (4 KiB pages where it is "never", as host_heap); smaller buffers
// as host_heap. docs/host-attention.md, fourteenth session: the host attention kernel read 8%
// more per second from such pages.
Allocator host_heap_huge(MemoryKind kind = MemoryKind::kHost);

// The kernel's transparent-huge-page mode, the bracketed word of
// /sys/kernel/mm/transparent_hugepage/enabled: "always", "madvise" or "never"; "" where the file
// is missing or unreadable (no THP support).
std::string transparent_huge_pages();

// The share of [p, p + bytes) that 2 MiB pages back now: the AnonHugePages of the mappings of
// /proc/self/smaps that overlap the range (each mapping's count taken as lying inside the range,
// so the range should be whole mappings, as a buffer of host_heap_huge's is), over bytes, at most
// 1. -1 where smaps cannot be read. What a benchmark reports next to figures that depend on it:
// madvise is advice, and the kernel may back a range with 4 KiB pages where 2 MiB ones are short.
double huge_page_fraction(const void* p, int64_t bytes);
// The same over an smaps listing (for tests).
double huge_page_fraction(std::istream& smaps, const void* p, int64_t bytes);

// Move-only owner of one allocation. An empty Buffer (default-constructed or moved from) owns
// nothing; every other one owns exactly one allocation, zero bytes included (its view has a
// non-null pointer and numel() 0), and gives it back to its allocator once, when destroyed or
// assigned over.
class Buffer {
 public:
  Buffer() = default;
  // Uninitialised memory of dims from alloc, viewed contiguous with alloc.kind.
  Buffer(const Allocator& alloc, DType t, std::initializer_list<int64_t> dims);
  // From the host heap, viewed as `kind` (see host_heap).
  Buffer(DType t, std::initializer_list<int64_t> dims, MemoryKind kind = MemoryKind::kHost)
      : Buffer(host_heap(kind), t, dims) {}
  // From the backend's own memory (Backend::allocate, memory_kind()); the backend must outlive
  // the buffer.
  Buffer(Backend& backend, DType t, std::initializer_list<int64_t> dims);

  // Uninitialised memory from alloc with shape's dtype and dims (any rank), contiguous.
  static Buffer like(const Allocator& alloc, const TensorView& shape);
  // From the host heap, zero-filled.
  static Buffer zeros(DType t, std::initializer_list<int64_t> dims);
  // Host memory that the backend reads in place (Backend::allocate_host, host_memory_kind()).
  static Buffer host(Backend& backend, DType t, std::initializer_list<int64_t> dims);
  // A contiguous copy of src (host memory, contiguous) in the backend's memory (Backend::upload).
  static Buffer upload(Backend& backend, const TensorView& src);

  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }

  // Read-only: the view's pointer is the allocation that the destructor gives back.
  const TensorView& view() const { return view_; }
  template <typename T>
  T* as() const {
    return view_.as<T>();
  }
  bool empty() const { return view_.empty(); }

 private:
  // view_ describes the memory to take (data null); allocates it from alloc.
  void take(const Allocator& alloc);
  void release() noexcept;

  Allocator alloc_;
  TensorView view_;  // data: the allocation, null when empty
};

}  // namespace tandem
