// Merge kernel: grid ceil(n * heads / 8) x 1, 256 threads; each block owns 8 (row, head) pairs.
// Phase 1: one thread per pair reads both lse values; phase 2: every thread merges elements of
// the 8 rows of d floats (coalesced along d); phase 3: the new lse values are written. lse_a is
// read only in phase 1 and written only in phase 3, so no thread sees a half-merged row.
#include "kernels/cuda/merge.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kPairs = 8;

struct MergeView {
  float* o;
  const float* lse;
  int64_t o_s0, o_s1, l_s0, l_s1;
};

__global__ void merge_kernel(MergeView a, float* a_lse, MergeView b, int64_t heads, int64_t pairs,
                             int d) {
  __shared__ float la_s[kPairs], lb_s[kPairs];
  const int64_t p0 = static_cast<int64_t>(blockIdx.x) * kPairs;
  if (threadIdx.x < kPairs && p0 + threadIdx.x < pairs) {
    const int64_t p = p0 + threadIdx.x, i = p / heads, h = p % heads;
    la_s[threadIdx.x] = a.lse[i * a.l_s0 + h * a.l_s1];
    lb_s[threadIdx.x] = b.lse[i * b.l_s0 + h * b.l_s1];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kPairs * d; e += blockDim.x) {
    const int pp = e / d, c = e % d;
    const int64_t p = p0 + pp;
    if (p >= pairs) break;  // e only grows: later elements are out of range too
    const float lb = lb_s[pp];
    if (lb == -INFINITY) continue;  // b empty: a unchanged, b's o not even read
    const int64_t i = p / heads, h = p % heads;
    float* oa = a.o + i * a.o_s0 + h * a.o_s1 + c;
    float la = la_s[pp];
    float o = *oa;
    merge_element(o, la, b.o[i * b.o_s0 + h * b.o_s1 + c], lb);
    *oa = o;
  }
  __syncthreads();
  if (threadIdx.x < kPairs && p0 + threadIdx.x < pairs) {
    const int64_t p = p0 + threadIdx.x, i = p / heads, h = p % heads;
    float la = la_s[threadIdx.x];
    float unused = 0.0f;
    merge_element(unused, la, 0.0f, lb_s[threadIdx.x]);
    a_lse[i * a.l_s0 + h * a.l_s1] = la;
  }
}

}  // namespace

void merge(const AttnPartial& a, const AttnPartial& b, cudaStream_t stream) {
  TANDEM_CHECK(a.o.ndim == 3 && same_shape(a.o, b.o) && a.o.dtype == DType::kF32 &&
                   b.o.dtype == DType::kF32 && a.o.stride[2] == 1 && b.o.stride[2] == 1,
               "merge o ", a.o.describe(), " with ", b.o.describe());
  const int64_t n = a.o.dim(0), heads = a.o.dim(1), d = a.o.dim(2);
  for (const TensorView* l : {&a.lse, &b.lse})
    TANDEM_CHECK(l->dtype == DType::kF32 && l->ndim == 2 && l->dim(0) == n && l->dim(1) == heads,
                 "merge lse ", l->describe(), " for o ", a.o.describe());
  TANDEM_CHECK(a.o.memory != MemoryKind::kPinned && a.lse.memory != MemoryKind::kPinned,
               "merge: a must be in device memory");
  check_device_memory(a.o, "merge a.o");
  check_device_memory(a.lse, "merge a.lse");
  check_device_memory(b.o, "merge b.o");
  check_device_memory(b.lse, "merge b.lse");
  const int64_t pairs = n * heads;
  if (pairs == 0 || d == 0) return;
  TANDEM_CHECK(d <= 4096 && (pairs + kPairs - 1) / kPairs <= 0x7fffffff,
               "merge too large: ", a.o.describe());
  const MergeView av{a.o.as<float>(), a.lse.as<const float>(), a.o.stride[0],
                     a.o.stride[1],   a.lse.stride[0],         a.lse.stride[1]};
  const MergeView bv{static_cast<float*>(device_pointer(b.o)),
                     static_cast<const float*>(device_pointer(b.lse)),
                     b.o.stride[0],
                     b.o.stride[1],
                     b.lse.stride[0],
                     b.lse.stride[1]};
  const unsigned grid = static_cast<unsigned>((pairs + kPairs - 1) / kPairs);
  TANDEM_LAUNCH(grid, kThreads, 0, stream, merge_kernel)
  (av, a.lse.as<float>(), bv, heads, pairs, static_cast<int>(d));
  TANDEM_CUDA_LAUNCH_CHECK("merge");
}

}  // namespace tandem::cuda
