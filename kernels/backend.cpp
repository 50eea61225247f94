// Backend memory on the host (the CPU backend's, and the default of every backend), the
// allocators of a backend's memories, and Buffer's Backend& members.
#include "kernels/backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace tandem {
namespace {

void check_copy(const TensorView& src, const TensorView& dst, const char* what) {
  TANDEM_CHECK(
      src.dtype == dst.dtype && src.numel() == dst.numel() && src.contiguous() && dst.contiguous(),
      what, " ", src.describe(), " -> ", dst.describe());
}

}  // namespace

MemoryInfo host_memory_info() {
  MemoryInfo m;
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemTotal:") m.total_bytes = kib * 1024;
    if (key == "MemAvailable:") m.free_bytes = kib * 1024;
  }
  return m;
}

TensorView kv_page(const TensorView& kv, const KvPages& pages, size_t i) {
  TANDEM_CHECK(kv.ndim == 3 && pages.rows > 0 && static_cast<int64_t>(i) < pages.count, "kv page ",
               i, " of ", kv.describe());
  const int64_t t = kv.dim(0), first = static_cast<int64_t>(i) * pages.rows;
  TANDEM_CHECK(first < t, "kv page ", i, " past the span of ", t, " keys");
  TensorView page = kv;
  page.data = static_cast<char*>(kv.data) + pages.offsets[i] * dtype_size(kv.dtype);
  page.shape[0] = std::min<int64_t>(pages.rows, t - first);
  return page;
}

// Both memories of this default are the host heap.
void* Backend::allocate(int64_t bytes) {
  const Allocator heap = host_heap();
  return heap.allocate(heap.context, bytes);
}

void Backend::deallocate(void* p) {
  const Allocator heap = host_heap();
  heap.deallocate(heap.context, p);
}

void* Backend::allocate_host(int64_t bytes) { return Backend::allocate(bytes); }

void Backend::deallocate_host(void* p) { Backend::deallocate(p); }

void Backend::upload(const TensorView& src, const TensorView& dst) {
  check_copy(src, dst, "upload");
  if (src.data != dst.data && src.nbytes() > 0)
    std::memcpy(dst.data, src.data, static_cast<size_t>(src.nbytes()));
}

void Backend::download(const TensorView& src, const TensorView& dst) {
  check_copy(src, dst, "download");
  synchronize();
  if (src.data != dst.data && src.nbytes() > 0)
    std::memcpy(dst.data, src.data, static_cast<size_t>(src.nbytes()));
}

void Backend::wait_host_flag(const TensorView& flag, uint32_t target,
                             const std::function<void()>& help) {
  TANDEM_CHECK(flag.dtype == DType::kI32 && flag.numel() >= 1 && flag.memory != MemoryKind::kDevice,
               "host flag ", flag.describe());
  if (help) help();
  // Whatever raises the flag runs on other threads (help, if given, has normally waited for it).
  for (int spins = 0; !host_flag_reached(flag, target); ++spins)
    if (spins < 64)
      std::this_thread::yield();
    else
      std::this_thread::sleep_for(std::chrono::microseconds(20));
}

void Backend::raise_host_flag(const TensorView& flag, uint32_t value) {
  TANDEM_CHECK(flag.dtype == DType::kI32 && flag.numel() >= 1 && flag.memory != MemoryKind::kDevice,
               "host flag ", flag.describe());
  synchronize();  // a subclass that queues ops without overriding this: let them finish first
  publish_host_flag(flag, value);
}

bool Backend::sample(const TensorView&, const SampleRow*, int32_t*) { return false; }

namespace {

void* memory_allocate(void* backend, int64_t bytes) {
  return static_cast<Backend*>(backend)->allocate(bytes);
}
void memory_deallocate(void* backend, void* p) noexcept {
  static_cast<Backend*>(backend)->deallocate(p);
}
void* host_memory_allocate(void* backend, int64_t bytes) {
  return static_cast<Backend*>(backend)->allocate_host(bytes);
}
void host_memory_deallocate(void* backend, void* p) noexcept {
  static_cast<Backend*>(backend)->deallocate_host(p);
}

}  // namespace

Allocator backend_memory(Backend& backend) {
  return {&memory_allocate, &memory_deallocate, &backend, backend.memory_kind()};
}

Allocator backend_host_memory(Backend& backend) {
  return {&host_memory_allocate, &host_memory_deallocate, &backend, backend.host_memory_kind()};
}

Buffer::Buffer(Backend& backend, DType t, std::initializer_list<int64_t> dims)
    : Buffer(backend_memory(backend), t, dims) {}

Buffer Buffer::host(Backend& backend, DType t, std::initializer_list<int64_t> dims) {
  return Buffer(backend_host_memory(backend), t, dims);
}

Buffer Buffer::upload(Backend& backend, const TensorView& src) {
  TANDEM_CHECK(src.contiguous(), "upload of a strided view ", src.describe());
  Buffer b = like(backend_memory(backend), src);
  backend.upload(src, b.view());  // throws: b gives its memory back
  return b;
}

const float* host_readable(Backend& backend, const TensorView& src, std::vector<float>& staging) {
  TANDEM_CHECK(src.dtype == DType::kF32 && src.contiguous(), "host read of ", src.describe());
  if (backend.host_accessible()) {
    backend.synchronize();
    return src.as<const float>();
  }
  staging.resize(static_cast<size_t>(src.numel()));
  backend.download(src, TensorView(staging.data(), DType::kF32, {src.numel()}));
  return staging.data();
}

}  // namespace tandem
