// Backend memory on the host (the CPU backend's, and the default of every backend), and the
// owning BackendBuffer.
#include "kernels/backend.h"

#include <cstdlib>
#include <cstring>

namespace tandem {
namespace {

void check_copy(const TensorView& src, const TensorView& dst, const char* what) {
  TANDEM_CHECK(
      src.dtype == dst.dtype && src.numel() == dst.numel() && src.contiguous() && dst.contiguous(),
      what, " ", src.describe(), " -> ", dst.describe());
}

}  // namespace

void* Backend::allocate(int64_t bytes) {
  TANDEM_CHECK(bytes >= 0, "negative size");
  const size_t rounded = static_cast<size_t>((bytes + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (p == nullptr) TANDEM_FAIL(kOutOfMemory, "cannot allocate ", bytes, " bytes");
  return p;
}

void Backend::deallocate(void* p) { std::free(p); }

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

BackendBuffer::BackendBuffer(Backend& backend, DType t, std::initializer_list<int64_t> dims)
    : mem_(nullptr, Free{&backend}) {
  view_ = TensorView(nullptr, t, dims, backend.memory_kind());
  mem_.reset(backend.allocate(view_.nbytes()));
  view_.data = mem_.get();
}

BackendBuffer BackendBuffer::upload(Backend& backend, const TensorView& host) {
  TANDEM_CHECK(host.contiguous(), "upload of a strided view ", host.describe());
  BackendBuffer b;
  b.mem_ = std::unique_ptr<void, Free>(backend.allocate(host.nbytes()), Free{&backend});
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
