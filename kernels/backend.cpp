// Backend memory on the host (the CPU backend's, and the default of every backend), and the
// owning BackendBuffer.
#include "kernels/backend.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
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

void* Backend::allocate(int64_t bytes) {
  TANDEM_CHECK(bytes >= 0, "negative size");
  const size_t rounded = static_cast<size_t>((bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) TANDEM_FAIL(kOutOfMemory, "cannot allocate ", bytes, " bytes");
  return p;
}

void Backend::deallocate(void* p) { std::free(p); }

void* Backend::allocate_host(int64_t bytes) { return Backend::allocate(bytes); }

void Backend::deallocate_host(void* p) { std::free(p); }

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

BackendBuffer::BackendBuffer(Backend& backend, DType t, std::initializer_list<int64_t> dims)
    : mem_(nullptr, Free{&backend, false}) {
  view_ = TensorView(nullptr, t, dims, backend.memory_kind());
  mem_.reset(backend.allocate(view_.nbytes()));
  view_.data = mem_.get();
}

BackendBuffer BackendBuffer::host(Backend& backend, DType t, std::initializer_list<int64_t> dims) {
  BackendBuffer b;
  b.view_ = TensorView(nullptr, t, dims, backend.host_memory_kind());
  b.mem_ =
      std::unique_ptr<void, Free>(backend.allocate_host(b.view_.nbytes()), Free{&backend, true});
  b.view_.data = b.mem_.get();
  return b;
}

BackendBuffer BackendBuffer::upload(Backend& backend, const TensorView& host) {
  TANDEM_CHECK(host.contiguous(), "upload of a strided view ", host.describe());
  BackendBuffer b;
  b.mem_ = std::unique_ptr<void, Free>(backend.allocate(host.nbytes()), Free{&backend, false});
  b.view_ = host;
  b.view_.data = b.mem_.get();
  b.view_.memory = backend.memory_kind();
  int64_t s = 1;
  for (int k = host.ndim - 1; k >= 0; --k) {
    b.view_.stride[static_cast<size_t>(k)] = s;
    s *= host.shape[static_cast<size_t>(k)];
  }
  backend.upload(host, b.view_);
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
