// Host-side helpers of cuda_common.cuh: view checks, launch shapes, the workspace and upload
// tables.
#include <algorithm>

#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

RowLayout row_layout(const TensorView& t) {
  TANDEM_CHECK(t.ndim >= 1 && t.ndim <= 4, "CUDA op: view ", t.describe());
  TANDEM_CHECK(t.stride[static_cast<size_t>(t.ndim - 1)] == 1 || t.dim(-1) == 1,
               "CUDA op: last dim must be contiguous: ", t.describe());
  RowLayout l;
  l.cols = t.dim(-1);
  if (t.contiguous() || t.ndim == 1) {
    l.nlead = 1;
    l.shape[0] = std::max<int64_t>(1, n_rows(t));
    l.stride[0] = l.cols;
    return l;
  }
  l.nlead = t.ndim - 1;
  for (int a = 0; a < l.nlead; ++a) {
    l.shape[a] = t.shape[static_cast<size_t>(a)];
    l.stride[a] = t.stride[static_cast<size_t>(a)];
  }
  return l;
}

int64_t n_rows(const TensorView& t) {
  int64_t r = 1;
  for (int a = 0; a < t.ndim - 1; ++a) r *= t.shape[static_cast<size_t>(a)];
  return r;
}

bool same_shape(const TensorView& a, const TensorView& b) {
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[static_cast<size_t>(i)] != b.shape[static_cast<size_t>(i)]) return false;
  return true;
}

bool is_float_dtype(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

void check_device_memory(const TensorView& t, const char* what) {
  TANDEM_CHECK(t.memory != MemoryKind::kHost || t.data == nullptr, "CUDA op: ", what, " ",
               t.describe(), " is in pageable host memory (needs device or mapped pinned memory)");
}

void* device_pointer(const TensorView& t) {
  if (t.memory != MemoryKind::kPinned || t.data == nullptr) return t.data;
  cudaPointerAttributes attr{};
  TANDEM_CUDA_CHECK(cudaPointerGetAttributes(&attr, t.data));
  TANDEM_CHECK(attr.devicePointer != nullptr, t.describe(),
               " is pinned but not mapped into the device (allocate it with cudaHostAllocMapped)");
  return attr.devicePointer;
}

unsigned grid_for(int64_t n, int threads) {
  constexpr int64_t kMaxBlocks = 65536;  // grid-stride loops cover the rest
  return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, kMaxBlocks));
}

Workspace::~Workspace() {
  if (ptr_ != nullptr) cudaFree(ptr_);  // no throw from a destructor; nothing to do on failure
}

void* Workspace::get(size_t bytes) {
  if (bytes <= bytes_) return ptr_;
  if (ptr_ != nullptr) {
    // Earlier ops on any stream may still read the old block.
    TANDEM_CUDA_CHECK(cudaDeviceSynchronize());
    TANDEM_CUDA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    bytes_ = 0;
  }
  const size_t want = std::max<size_t>(bytes, size_t{1} << 20);
  TANDEM_CUDA_CHECK(cudaMalloc(&ptr_, want));
  bytes_ = want;
  return ptr_;
}

UploadTable::~UploadTable() {
  if (dev_ != nullptr) cudaFree(dev_);  // cudaFree waits for the device; nothing to do on failure
}

unsigned char* UploadTable::prepare(size_t bytes, cudaStream_t stream) {
  if (bytes > cap_) {
    if (dev_ != nullptr) {
      TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream));
      TANDEM_CUDA_CHECK(cudaFree(dev_));
    }
    dev_ = nullptr;
    cap_ = 0;
    const size_t want = std::max<size_t>(bytes * 2, 4096);
    TANDEM_CUDA_CHECK(cudaMalloc(&dev_, want));
    cap_ = want;
  }
  if (host_.size() < bytes) host_.resize(bytes);
  size_ = bytes;
  return host_.data();
}

void UploadTable::upload(cudaStream_t stream) {
  if (size_ > 0)
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dev_, host_.data(), size_, cudaMemcpyHostToDevice, stream));
}

}  // namespace tandem::cuda
