// CudaBackend: device 0, one non-blocking stream, one cuBLAS handle, a grow-only workspace, and
// the rope inv_freq tables uploaded once each. Its memory is cudaMalloc'd device memory; upload
// and download are copies on the stream (download waits for it). Each op checks its views and
// launches the kernel of its own file (elementwise, convert, embedding, norm, softmax, rope,
// matmul, attention, attention_batch, merge, scatter, sampling, flag_wait) on the stream;
// synchronize() waits for it.
// Host flags are waited for and raised by kernels on the stream, so neither returns late.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_common.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.cuh"
#include "kernels/cuda/emulator.h"
#include "kernels/cuda/flag_wait.cuh"
#include "kernels/cuda/matmul.cuh"
#include "kernels/cuda/merge.cuh"
#include "kernels/cuda/norm.cuh"
#include "kernels/cuda/rope.cuh"
#include "kernels/cuda/sampling.cuh"
#include "kernels/cuda/scatter.cuh"
#include "kernels/cuda/softmax.cuh"

namespace tandem {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    TANDEM_CUDA_CHECK(cudaSetDevice(0));
    TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, 0));
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TANDEM_CUBLAS_CHECK(cublasCreate(&cublas_));
    TANDEM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  }
  ~CudaBackend() override {
    cudaStreamSynchronize(stream_);  // nothing may still use the workspace or the tables
    for (RopeEntry& e : rope_tables_) cudaFree(e.device);
    cudaFree(page_table_);
    cudaFree(sample_rows_);
    cudaFreeHost(sample_ids_);
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }
  std::string_view name() const override { return "cuda"; }

  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
              const TensorView& y) override {
    cuda::matmul(x, w, bias, y, cublas_, ws_, stream_);
  }
  void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) override {
    cuda::embedding(ids, table, out, stream_);
  }
  void rms_norm(const TensorView& x, const TensorView& w, float eps,
                const TensorView& out) override {
    cuda::rms_norm(x, w, eps, out, stream_);
  }
  void layer_norm(const TensorView& x, const TensorView& w, const TensorView& b, float eps,
                  const TensorView& out) override {
    cuda::layer_norm(x, w, b, eps, out, stream_);
  }
  void rope(const TensorView& x, const TensorView& pos, const RopeTable& rope) override {
    cuda::rope(x, pos, rope, inv_freq_on_device(rope), stream_);
  }
  void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) override {
    cuda::silu_mul(gate, up, out, stream_);
  }
  void relu(const TensorView& x) override { cuda::relu(x, stream_); }
  void add(const TensorView& a, const TensorView& b, const TensorView& out) override {
    cuda::add(a, b, out, stream_);
  }
  void softmax(const TensorView& x) override { cuda::softmax(x, stream_); }
  void attention(const TensorView& q, const TensorView& k, const TensorView& v,
                 const TensorView& q_pos, int64_t k_pos0, float scale,
                 const AttnPartial& out) override {
    cuda::attention(q, k, v, q_pos, k_pos0, scale, out, num_sms_, ws_, stream_);
  }
  // The page offsets go to a grow-only device table, copied on the stream (from pageable memory the
  // copy returns once staged; the next call's copy is ordered after this call's kernel).
  void attention_paged(const TensorView& q, const TensorView& k, const TensorView& v,
                       const KvPages& pages, const TensorView& q_pos, int64_t k_pos0, float scale,
                       const AttnPartial& out) override {
    const int64_t t_keys = k.ndim == 3 ? k.dim(0) : -1;
    TANDEM_CHECK(
        pages.rows > 0 && t_keys >= 0 && pages.count == (t_keys + pages.rows - 1) / pages.rows &&
            (pages.offsets != nullptr || pages.count == 0),
        "attention_paged: ", pages.count, " pages of ", pages.rows, " rows for ", k.describe());
    const size_t count = static_cast<size_t>(pages.count);
    if (count > page_table_cap_) {
      if (page_table_ != nullptr) {
        synchronize();  // no queued kernel may still read the old table
        TANDEM_CUDA_CHECK(cudaFree(page_table_));
      }
      page_table_ = nullptr;
      page_table_cap_ = 0;
      const size_t cap = std::max<size_t>(count * 2, 256);
      TANDEM_CUDA_CHECK(cudaMalloc(&page_table_, cap * sizeof(int64_t)));
      page_table_cap_ = cap;
    }
    if (count > 0)
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(page_table_, pages.offsets, count * sizeof(int64_t),
                                        cudaMemcpyHostToDevice, stream_));
    const cuda::DevicePages dp{page_table_, static_cast<int64_t>(count), pages.rows};
    cuda::attention(q, k, v, q_pos, k_pos0, scale, out, num_sms_, ws_, stream_,
                    count > 0 ? &dp : nullptr);
  }
  void merge(const AttnPartial& a, const AttnPartial& b) override { cuda::merge(a, b, stream_); }
  // One upload of the segment table and page offsets, one attention launch and at most one
  // combine launch, whatever the count (attention_batch.cu).
  void attention_batch(const TensorView& q, const TensorView& q_pos, const AttnSegment* segs,
                       int64_t count, float scale, const AttnPartial& out) override {
    cuda::attention_batch(q, q_pos, segs, count, scale, out, num_sms_, ws_, batch_table_, stream_);
  }
  // One upload of the offsets and one launch. The rows must not overlap: on the device they
  // are written at once, so an overlap would be a race (check_scatter_rows throws).
  void scatter_rows(const TensorView& src, const TensorView& dst, const int64_t* offsets,
                    int64_t n) override {
    const int64_t row = check_scatter_rows(src, dst, offsets, n);
    if (n == 0 || row == 0) return;
    const size_t bytes = static_cast<size_t>(n) * sizeof(int64_t);
    std::memcpy(scatter_table_.prepare(bytes, stream_), offsets, bytes);
    scatter_table_.upload(stream_);
    cuda::scatter_rows(src, dst, reinterpret_cast<const int64_t*>(scatter_table_.device()), n, row,
                       stream_);
  }
  void gather_rows(const TensorView& src, const int64_t* offsets, int64_t n,
                   const TensorView& dst) override {
    const int64_t row = check_gather_rows(src, offsets, n, dst);
    if (n == 0 || row == 0) return;
    const size_t bytes = static_cast<size_t>(n) * sizeof(int64_t);
    std::memcpy(gather_table_.prepare(bytes, stream_), offsets, bytes);
    gather_table_.upload(stream_);
    cuda::gather_rows(src, reinterpret_cast<const int64_t*>(gather_table_.device()), n, row, dst,
                      stream_);
  }
  void copy(const TensorView& src, const TensorView& dst) override {
    cuda::convert(src, dst, stream_);
  }
  void synchronize() override { TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

  // The wait occupies one thread of one SM until the flag comes. Its timeout (a trap, fatal to
  // the context) is far beyond any host attention of one layer: it only ends a hang.
  void wait_host_flag(const TensorView& flag, uint32_t target,
                      const std::function<void()>&) override {
    cuda::wait_flag(flag, target, kFlagTimeoutMs, stream_);
  }
  void raise_host_flag(const TensorView& flag, uint32_t value) override {
    cuda::raise_flag(flag, value, stream_);
  }
  // The rows are staged and uploaded (pageable: no wait), the ids come back through pinned
  // memory: one wait for the stream.
  bool sample(const TensorView& logits, const SampleRow* rows, int32_t* ids) override {
    TANDEM_CHECK(logits.ndim == 2, "sample: logits ", logits.describe());
    const size_t n = static_cast<size_t>(logits.dim(0));
    if (n == 0) return true;
    TANDEM_CHECK(rows != nullptr && ids != nullptr, "sample: no rows or ids");
    if (n > sample_cap_) {
      if (sample_cap_ > 0) {
        synchronize();  // no queued kernel may still use the old buffers
        cudaFree(sample_rows_);
        cudaFree(sample_out_);
        cudaFreeHost(sample_ids_);
      }
      sample_rows_ = nullptr;
      sample_out_ = nullptr;
      sample_ids_ = nullptr;
      sample_cap_ = 0;
      const size_t cap = std::max<size_t>(n * 2, 64);
      TANDEM_CUDA_CHECK(cudaMalloc(&sample_rows_, cap * sizeof(SampleRow)));
      TANDEM_CUDA_CHECK(cudaMalloc(&sample_out_, cap * sizeof(int32_t)));
      TANDEM_CUDA_CHECK(cudaHostAlloc(&sample_ids_, cap * sizeof(int32_t), cudaHostAllocDefault));
      sample_cap_ = cap;
    }
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(sample_rows_, rows, n * sizeof(SampleRow),
                                      cudaMemcpyHostToDevice, stream_));
    const int64_t rows_n = static_cast<int64_t>(n);
    const TensorView out(sample_out_, DType::kI32, {rows_n}, MemoryKind::kDevice);
    cuda::sample(logits, sample_rows_, out, stream_);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(sample_ids_, sample_out_, n * sizeof(int32_t),
                                      cudaMemcpyDeviceToHost, stream_));
    synchronize();
    std::copy_n(sample_ids_, n, ids);
    return true;
  }

  MemoryKind memory_kind() const override { return MemoryKind::kDevice; }
  void* allocate(int64_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)));
    if (e != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky: clear it
      TANDEM_FAIL(kOutOfMemory, "cannot allocate ", bytes,
                  " bytes of device memory: ", cudaGetErrorString(e));
    }
    return p;
  }
  // Waits for the stream first, so no queued op still uses the bytes.
  void deallocate(void* p) override {
    cudaStreamSynchronize(stream_);
    cudaFree(p);
  }
  // Pinned, mapped into the device's address space (UVA: the same pointer on both sides), so
  // the merge kernel reads it in place.
  void* allocate_host(int64_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1)),
                                        cudaHostAllocMapped | cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      TANDEM_FAIL(kOutOfMemory, "cannot allocate ", bytes,
                  " bytes of pinned host memory: ", cudaGetErrorString(e));
    }
    return p;
  }
  // Waits for the stream first, so no queued kernel still reads the bytes.
  void deallocate_host(void* p) override {
    cudaStreamSynchronize(stream_);
    cudaFreeHost(p);
  }
  MemoryKind host_memory_kind() const override { return MemoryKind::kPinned; }
  MemoryInfo memory_info() const override {
    size_t free = 0, total = 0;
    TANDEM_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return {static_cast<int64_t>(free), static_cast<int64_t>(total)};
  }
  // From pageable memory the copy returns once the source is staged, so src may be reused; the
  // stream orders it with the ops around it. From pinned memory the DMA reads the source when
  // the stream reaches it, so the call waits for that to keep the contract (src reusable on
  // return).
  void upload(const TensorView& src, const TensorView& dst) override {
    check_copy(src, dst, "upload");
    TANDEM_CHECK(dst.memory == MemoryKind::kDevice && src.memory != MemoryKind::kDevice, "upload ",
                 src.describe(), " -> ", dst.describe());
    if (src.nbytes() == 0) return;
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(src.nbytes()),
                                      cudaMemcpyHostToDevice, stream_));
    if (is_pinned(src.data)) synchronize();
  }
  void download(const TensorView& src, const TensorView& dst) override {
    check_copy(src, dst, "download");
    TANDEM_CHECK(src.memory == MemoryKind::kDevice && dst.memory != MemoryKind::kDevice,
                 "download ", src.describe(), " -> ", dst.describe());
    if (src.nbytes() > 0)
      TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(src.nbytes()),
                                        cudaMemcpyDeviceToHost, stream_));
    synchronize();
  }

 private:
  // Whether p is page-locked host memory (cudaHostAlloc'd or registered).
  static bool is_pinned(const void* p) {
    cudaPointerAttributes attr{};
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
      cudaGetLastError();  // pageable memory may report an error on old drivers: not pinned
      return false;
    }
    return attr.type == cudaMemoryTypeHost;
  }

  static constexpr uint32_t kFlagTimeoutMs = 30000;

  int64_t* page_table_ = nullptr;  // attention_paged's page offsets
  size_t page_table_cap_ = 0;
  cuda::UploadTable batch_table_;    // attention_batch's segments and page offsets
  cuda::UploadTable scatter_table_;  // scatter_rows' offsets
  cuda::UploadTable gather_table_;   // gather_rows' offsets
  // sample(): the rows (device), the ids (device, then pinned), for sample_cap_ rows.
  SampleRow* sample_rows_ = nullptr;
  int32_t* sample_out_ = nullptr;
  int32_t* sample_ids_ = nullptr;
  size_t sample_cap_ = 0;

  static void check_copy(const TensorView& src, const TensorView& dst, const char* what) {
    TANDEM_CHECK(src.dtype == dst.dtype && src.numel() == dst.numel() && src.contiguous() &&
                     dst.contiguous(),
                 what, " ", src.describe(), " -> ", dst.describe());
  }

  struct RopeEntry {
    std::vector<float> inv_freq;
    float* device = nullptr;
  };

  // The device copy of rope.inv_freq, uploaded on first use of these contents (a model has one
  // or two tables, so a linear search by contents is cheap and survives a moved RopeTable).
  const float* inv_freq_on_device(const RopeTable& rope) {
    if (rope.inv_freq.empty()) return nullptr;
    for (const RopeEntry& e : rope_tables_)
      if (e.inv_freq == rope.inv_freq) return e.device;
    RopeEntry e;
    e.inv_freq = rope.inv_freq;
    const size_t bytes = e.inv_freq.size() * sizeof(float);
    TANDEM_CUDA_CHECK(cudaMalloc(&e.device, bytes));
    rope_tables_.push_back(std::move(e));
    const RopeEntry& kept = rope_tables_.back();
    // On the backend's stream, so the rope kernel queued next sees it; from pageable memory the
    // bytes are staged before the call returns.
    TANDEM_CUDA_CHECK(
        cudaMemcpyAsync(kept.device, kept.inv_freq.data(), bytes, cudaMemcpyHostToDevice, stream_));
    return kept.device;
  }

  int num_sms_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  cuda::Workspace ws_;
  std::vector<RopeEntry> rope_tables_;
};

// Compiled for the same architectures as every kernel: whether the device can load it says
// whether it can run them.
__global__ void probe_kernel() {}

}  // namespace

CudaDeviceInfo cuda_device_info() {
  CudaDeviceInfo info;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error
    return info;
  }
  info.count = n;
  info.emulated = cuda_is_emulated();
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    info.name = prop.name;
    info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    info.sm_major = prop.major;
    info.sm_minor = prop.minor;
    info.sm_count = prop.multiProcessorCount;
  }
  cudaFuncAttributes attr{};
  info.runs_kernels = cudaFuncGetAttributes(&attr, probe_kernel) == cudaSuccess;
  if (!info.runs_kernels) cudaGetLastError();  // e.g. no kernel image for this device
  return info;
}

std::unique_ptr<Backend> make_cuda_backend() {
  const CudaDeviceInfo info = cuda_device_info();
  if (info.count == 0) TANDEM_FAIL(kUnsupported, "no CUDA device is visible (use --device cpu)");
  if (!info.runs_kernels)
    TANDEM_FAIL(kUnsupported, "CUDA device ", info.name, " (sm_", info.sm_major, info.sm_minor,
                ") cannot run this build's kernels (rebuild with its CMAKE_CUDA_ARCHITECTURES)");
  return std::make_unique<CudaBackend>();
}

}  // namespace tandem
