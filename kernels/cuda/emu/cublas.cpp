// cuBLAS for the emulator: a handle is a stream; cublasGemmEx runs on it with the CPU backend's
// matrix product under cuBLAS's rules (inputs f32, f16 or bf16, f32 accumulation, f32 output).
// The operands stay in device memory: the stream's worker holds the device range open while the
// CPU backend's threads read it. Counted as one launch, with its FLOPs and operand bytes.
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/emu/emu_internal.h"
#include "kernels/cuda/emu/include/cublas_v2.h"
#include "kernels/dtype.h"

namespace tandem_emu {

struct Cublas {
  cudaStream_t stream = nullptr;
};

namespace {

tandem::Backend& cpu() {
  static const std::unique_ptr<tandem::Backend> b = tandem::make_cpu_backend();
  return *b;
}

bool dtype_of(cudaDataType_t t, tandem::DType* out) {
  switch (t) {
    case CUDA_R_32F:
      *out = tandem::DType::kF32;
      return true;
    case CUDA_R_16F:
      *out = tandem::DType::kF16;
      return true;
    case CUDA_R_16BF:
      *out = tandem::DType::kBF16;
      return true;
  }
  return false;
}

float load(tandem::DType t, const void* p, int64_t i) {
  switch (t) {
    case tandem::DType::kF16:
      return tandem::f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case tandem::DType::kBF16:
      return tandem::bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Column-major C[m, n] = alpha op(A)[m, k] op(B)[k, n] + beta C, f32 accumulation.
void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
          const void* A, tandem::DType at, int lda, const void* B, tandem::DType bt, int ldb,
          float beta, float* C, int ldc) {
  // The backend's case: C^T[n, m] = X[n, k] . W[m, k]^T with A = W (op T) and B = X (op N).
  if (ta == CUBLAS_OP_T && tb == CUBLAS_OP_N && alpha == 1.0f && beta == 0.0f && lda == k) {
    std::vector<float> x(static_cast<size_t>(n) * static_cast<size_t>(k));
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c)
        x[static_cast<size_t>(r) * k + c] = load(bt, B, static_cast<int64_t>(r) * ldb + c);
    const tandem::TensorView xv(x.data(), tandem::DType::kF32, {n, k});
    const tandem::TensorView wv(const_cast<void*>(A), at, {m, k});
    std::vector<float> y(static_cast<size_t>(n) * static_cast<size_t>(m));
    const tandem::TensorView yv(y.data(), tandem::DType::kF32, {n, m});
    cpu().matmul(xv, wv, tandem::TensorView{}, yv);
    for (int r = 0; r < n; ++r)
      std::copy_n(y.data() + static_cast<size_t>(r) * m, m, C + static_cast<int64_t>(r) * ldc);
    return;
  }
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int p = 0; p < k; ++p) {
        const int64_t ai = ta == CUBLAS_OP_N ? i + static_cast<int64_t>(p) * lda
                                             : p + static_cast<int64_t>(i) * lda;
        const int64_t bi = tb == CUBLAS_OP_N ? p + static_cast<int64_t>(j) * ldb
                                             : j + static_cast<int64_t>(p) * ldb;
        acc += load(at, A, ai) * load(bt, B, bi);
      }
      float& c = C[i + static_cast<int64_t>(j) * ldc];
      c = alpha * acc + (beta == 0.0f ? 0.0f : beta * c);
    }
}

}  // namespace
}  // namespace tandem_emu

using namespace tandem_emu;

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new Cublas;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C,
                            cudaDataType_t Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  tandem::DType at, bt;
  if (!dtype_of(Atype, &at) || !dtype_of(Btype, &bt) || Ctype != CUDA_R_32F ||
      computeType != CUBLAS_COMPUTE_32F || at != bt || transa == CUBLAS_OP_C ||
      transb == CUBLAS_OP_C)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, transa == CUBLAS_OP_N ? m : k) ||
      ldb < std::max(1, transb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  // The operands must be device memory of the sizes the leading dims imply.
  const size_t es = tandem::dtype_size(at);
  const auto span = [](int rows, int cols, int ld, size_t e) {
    return rows == 0 || cols == 0 ? size_t{0} : (static_cast<size_t>(cols - 1) * ld + rows) * e;
  };
  const size_t a_bytes =
      span(transa == CUBLAS_OP_N ? m : k, transa == CUBLAS_OP_N ? k : m, lda, es);
  const size_t b_bytes =
      span(transb == CUBLAS_OP_N ? k : n, transb == CUBLAS_OP_N ? n : k, ldb, es);
  const size_t c_bytes = span(m, n, ldc, sizeof(float));
  for (auto [p, bytes] : {std::pair{A, a_bytes}, std::pair{B, b_bytes},
                          std::pair{static_cast<const void*>(C), c_bytes}}) {
    if (bytes == 0) continue;
    const Alloc a = find_alloc(reinterpret_cast<uintptr_t>(p), bytes);
    if (a.id == 0 || a.region != Region::kDevice) return CUBLAS_STATUS_INVALID_VALUE;
  }
  const float al = *static_cast<const float*>(alpha), be = *static_cast<const float*>(beta);
  Counters& c = counters();
  c.launches.fetch_add(1);
  c.cublas_calls.fetch_add(1);
  c.cublas_flops.fetch_add(2.0 * m * n * k);
  c.cublas_bytes.fetch_add(static_cast<int64_t>(a_bytes + b_bytes + c_bytes));
  enqueue(resolve(handle->stream), [=] {
    gemm(transa, transb, m, n, k, al, A, at, lda, B, bt, ldb, be, static_cast<float*>(C), ldc);
  });
  return CUBLAS_STATUS_SUCCESS;
}
