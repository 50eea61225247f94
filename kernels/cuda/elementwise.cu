// Elementwise kernels: one thread per element in a grid-stride loop, 256 threads per block,
// grid = min(ceil(numel / 256), 65536). Each element's offset comes from the views' RowLayouts,
// so strided leading dims cost one division per element and contiguous views one more.
#include "kernels/cuda/elementwise.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;

enum class Op : int { kSiluMul, kAdd, kRelu };

template <Op kOp>
__global__ void elementwise_kernel(const float* a, RowLayout la, const float* b, RowLayout lb,
                                   float* out, RowLayout lo, int64_t total) {
  const int64_t cols = lo.cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = e / cols, c = e % cols;
    const float x = a[la.offset(r) + c];
    float y;
    if constexpr (kOp == Op::kSiluMul) {
      // silu(g) * u = g / (1 + e^-g) * u; large negative g gives e^-g = inf and -0.
      y = x / (1.0f + expf(-x)) * b[lb.offset(r) + c];
    } else if constexpr (kOp == Op::kAdd) {
      y = x + b[lb.offset(r) + c];
    } else {
      y = fmaxf(x, 0.0f);
    }
    out[lo.offset(r) + c] = y;
  }
}

void check_f32(const char* op, const TensorView& a, const TensorView& b) {
  TANDEM_CHECK(a.dtype == DType::kF32 && b.dtype == DType::kF32 && same_shape(a, b), op, ": ",
               a.describe(), " vs ", b.describe());
  check_device_memory(a, op);
  check_device_memory(b, op);
}

template <Op kOp>
void launch(const char* name, const TensorView& a, const TensorView& b, const TensorView& out,
            cudaStream_t stream) {
  const int64_t total = a.numel();
  if (total == 0) return;
  TANDEM_LAUNCH(grid_for(total, kThreads), kThreads, 0, stream, elementwise_kernel<kOp>)
  (a.as<const float>(), row_layout(a), b.as<const float>(), row_layout(b), out.as<float>(),
   row_layout(out), total);
  TANDEM_CUDA_LAUNCH_CHECK(name);
}

}  // namespace

void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out,
              cudaStream_t stream) {
  check_f32("silu_mul", gate, up);
  check_f32("silu_mul", gate, out);
  launch<Op::kSiluMul>("silu_mul", gate, up, out, stream);
}

void relu(const TensorView& x, cudaStream_t stream) {
  check_f32("relu", x, x);
  launch<Op::kRelu>("relu", x, x, x, stream);
}

void add(const TensorView& a, const TensorView& b, const TensorView& out, cudaStream_t stream) {
  check_f32("add", a, b);
  check_f32("add", a, out);
  launch<Op::kAdd>("add", a, b, out, stream);
}

}  // namespace tandem::cuda
