// CudaBackend skeleton: device discovery, error checking, allocation of each memory kind, and
// the Backend ops, which throw kUnsupported until their kernels land (CUDA backend issue).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "kernels/cuda/cuda_backend.h"

#define TANDEM_CUDA_CHECK(call)                                                             \
  do {                                                                                      \
    const cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess)                                                                \
      ::tandem::throw_error(::tandem::ErrorKind::kInternal,                                 \
                            ::tandem::cat(#call, ": ", cudaGetErrorString(err_)), __FILE__, \
                            __LINE__);                                                      \
  } while (0)

#define TANDEM_CUBLAS_CHECK(call)                                                            \
  do {                                                                                       \
    const cublasStatus_t st_ = (call);                                                       \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                        \
      ::tandem::throw_error(::tandem::ErrorKind::kInternal,                                  \
                            ::tandem::cat(#call, ": cuBLAS status ", static_cast<int>(st_)), \
                            __FILE__, __LINE__);                                             \
  } while (0)

namespace tandem {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend() {
    TANDEM_CUDA_CHECK(cudaSetDevice(0));
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    TANDEM_CUBLAS_CHECK(cublasCreate(&cublas_));
    TANDEM_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  }
  ~CudaBackend() override {
    cublasDestroy(cublas_);
    cudaStreamDestroy(stream_);
  }
  std::string_view name() const override { return "cuda"; }

  void matmul(const TensorView&, const TensorView&, const TensorView&, const TensorView&) override {
    missing("matmul");
  }
  void embedding(const TensorView&, const TensorView&, const TensorView&) override {
    missing("embedding");
  }
  void rms_norm(const TensorView&, const TensorView&, float, const TensorView&) override {
    missing("rms_norm");
  }
  void layer_norm(const TensorView&, const TensorView&, const TensorView&, float,
                  const TensorView&) override {
    missing("layer_norm");
  }
  void rope(const TensorView&, const TensorView&, const RopeTable&) override { missing("rope"); }
  void silu_mul(const TensorView&, const TensorView&, const TensorView&) override {
    missing("silu_mul");
  }
  void relu(const TensorView&) override { missing("relu"); }
  void add(const TensorView&, const TensorView&, const TensorView&) override { missing("add"); }
  void softmax(const TensorView&) override { missing("softmax"); }
  void attention(const TensorView&, const TensorView&, const TensorView&, const TensorView&,
                 int64_t, float, const AttnPartial&) override {
    missing("attention");
  }
  void merge(const AttnPartial&, const AttnPartial&) override { missing("merge"); }
  void copy(const TensorView&, const TensorView&) override { missing("copy"); }
  void synchronize() override { TANDEM_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  [[noreturn]] static void missing(const char* op) {
    TANDEM_FAIL(kUnsupported, "the CUDA backend has no ", op,
                " kernel in this build yet; use --device cpu");
  }

  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
};

}  // namespace

CudaDeviceInfo cuda_device_info() {
  CudaDeviceInfo info;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
    cudaGetLastError();  // clear the sticky "no device / no driver" error
    return info;
  }
  info.count = n;
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
    info.name = prop.name;
    info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    info.sm_major = prop.major;
    info.sm_minor = prop.minor;
  }
  return info;
}

std::unique_ptr<Backend> make_cuda_backend() {
  if (cuda_device_info().count == 0)
    TANDEM_FAIL(kUnsupported, "no CUDA device is visible (use --device cpu)");
  return std::make_unique<CudaBackend>();
}

}  // namespace tandem
