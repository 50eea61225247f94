// Sampling kernel: grid (n rows) x 1, 1024 threads, one row per block, no sort. Each selection
// step (top-k by count, top-p by mass, the draw by mass) finds the element at which a cumulative
// quantity over the (value desc, id asc) order crosses a target: a 4-pass radix select on the
// 32-bit order key of the value (256-bin count and double mass histograms in shared memory, 3 KB),
// then a scan in id order among the elements equal to the selected value. The kept set is always
// a prefix of that order, written as a cutoff (key, id). The row is re-read from global memory
// (L2-resident) by every pass: about 15 reads of the row for a full top-k + top-p draw.
#include <climits>

#include "kernels/cuda/sampling.cuh"

namespace tandem::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBins = 256;

// Ascending key = descending value (IEEE order made unsigned, then inverted). -0 and +0 compare
// equal on the CPU, so they share the key of +0 (and are then ordered by id).
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t b = __float_as_uint(v == 0.0f ? 0.0f : v);
  const uint32_t o = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ~o;
}

// The kept prefix of the order: (key, id) <= (cut.key, cut.id).
struct Cut {
  uint32_t key;
  int32_t id;
};

__device__ __forceinline__ bool kept(uint32_t key, int32_t id, Cut c) {
  return key < c.key || (key == c.key && id <= c.id);
}

struct Shared {
  double mass[kBins];
  uint32_t count[kBins];
  double dred[kThreads / kWarp];
  int ired[kThreads / kWarp];
  double base;
  uint32_t prefix;
  int found, last;
  float fred[kThreads / kWarp];
};

// What one selection step weighs: every candidate 1 (count), or its probability
// float(exp(s - max) / z) as the CPU stores it (mass).
struct Weigh {
  bool by_mass;
  float mx;
  double z;
  __device__ double operator()(float s) const {
    return by_mass ? static_cast<double>(static_cast<float>(static_cast<double>(expf(s - mx)) / z))
                   : 1.0;
  }
};

__device__ double block_sum_d(double v, Shared& sh) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if (lane == 0) sh.dred[warp] = v;
  __syncthreads();
  double t = 0.0;
  for (int w = 0; w < kThreads / kWarp; ++w) t += sh.dred[w];  // fixed order: deterministic
  return t;
}

// The first element of the kept order whose cumulative weight crosses target (> when strict,
// >= otherwise); the last kept element when rounding leaves none. Returns the new cutoff.
__device__ Cut select(const float* row, int64_t vocab, float temp, Cut cut, Weigh weigh,
                      double target, bool strict, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  double base = 0.0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
      sh.mass[b] = 0.0;
      sh.count[b] = 0;
    }
    __syncthreads();
    for (int64_t t = threadIdx.x; t < vocab; t += blockDim.x) {
      const float l = row[t];
      if (l == -INFINITY) continue;
      const float s = l / temp;
      const uint32_t key = order_key(s);
      if (!kept(key, static_cast<int32_t>(t), cut) || (key & mask) != prefix) continue;
      const int b = (key >> shift) & 0xff;
      atomicAdd(&sh.mass[b], weigh(s));
      atomicAdd(&sh.count[b], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double cum = base, last_base = base;
      int chosen = -1, last = -1;
      for (int b = 0; b < kBins; ++b) {
        if (sh.count[b] == 0) continue;
        const double next = cum + sh.mass[b];
        if (strict ? next > target : next >= target) {
          chosen = b;
          break;
        }
        last = b;
        last_base = cum;
        cum = next;
      }
      if (chosen < 0) {  // rounding: the target is at or past the total; take the last element
        chosen = last;
        cum = last_base;
      }
      sh.prefix = prefix | (static_cast<uint32_t>(chosen) << shift);
      sh.base = cum;
    }
    __syncthreads();
    prefix = sh.prefix;
    base = sh.base;
    mask |= 0xffu << shift;
  }
  // Ties on the selected value, in id order: chunks of blockDim ids, a block count for each
  // element's rank among the ties, the first rank whose cumulative weight crosses.
  if (threadIdx.x == 0) {
    sh.found = INT_MAX;
    sh.last = -1;
  }
  __syncthreads();
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int64_t running = 0;
  for (int64_t c0 = 0; c0 < vocab; c0 += blockDim.x) {
    const int64_t t = c0 + threadIdx.x;
    bool tie = false;
    double w = 0.0;
    if (t < vocab) {
      const float l = row[t];
      if (l != -INFINITY) {
        const float s = l / temp;
        const uint32_t key = order_key(s);
        tie = key == prefix && kept(key, static_cast<int32_t>(t), cut);
        w = weigh(s);
      }
    }
    const unsigned ballot = __ballot_sync(0xffffffffu, tie);
    if (lane == 0) sh.ired[warp] = __popc(ballot);
    __syncthreads();
    int64_t before = running + __popc(ballot & ((1u << lane) - 1u));
    int64_t total = 0;
    for (int wi = 0; wi < kThreads / kWarp; ++wi) {
      if (wi < warp) before += sh.ired[wi];
      total += sh.ired[wi];
    }
    bool crossed = false;
    if (tie) {
      const double cum = base + static_cast<double>(before + 1) * w;
      crossed = strict ? cum > target : cum >= target;
      if (crossed) atomicMin(&sh.found, static_cast<int>(t));
      atomicMax(&sh.last, static_cast<int>(t));
    }
    running += total;
    // A barrier whose result every thread gets: all leave the loop together, and the atomics
    // of this chunk are visible after it.
    if (__syncthreads_or(crossed)) break;
  }
  const Cut out{prefix, sh.found != INT_MAX ? sh.found : sh.last};
  __syncthreads();  // sh is reused by the caller's next step
  return out;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(const float* logits, RowLayout ll, const SampleRow* rows, int32_t* ids) {
  __shared__ Shared sh;
  const int64_t i = blockIdx.x, vocab = ll.cols;
  const float* row = logits + ll.offset(i);
  const float temp = rows[i].temperature;
  const int32_t k = rows[i].top_k;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;

  // Greedy, and the max / candidate count for sampling: (value, first index) reductions.
  float bv = -INFINITY;
  int64_t bi = LLONG_MAX;
  int cnt = 0;
  for (int64_t t = threadIdx.x; t < vocab; t += blockDim.x) {
    const float l = row[t];
    if (l > bv) {
      bv = l;
      bi = t;
    }
    cnt += l != -INFINITY;
  }
#pragma unroll
  for (int o = kWarp / 2; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
    cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
  }
  __shared__ int64_t sidx[kThreads / kWarp];
  if (lane == 0) {
    sh.fred[warp] = bv;
    sidx[warp] = bi;
    sh.ired[warp] = cnt;
  }
  __syncthreads();
  float best = -INFINITY;
  int64_t best_i = LLONG_MAX;
  int64_t count = 0;
  for (int w = 0; w < kThreads / kWarp; ++w) {
    if (sh.fred[w] > best || (sh.fred[w] == best && sidx[w] < best_i)) {
      best = sh.fred[w];
      best_i = sidx[w];
    }
    count += sh.ired[w];
  }
  __syncthreads();
  const int32_t greedy = best_i == LLONG_MAX ? 0 : static_cast<int32_t>(best_i);
  if (temp <= 0.0f || k == 1 || count == 0) {
    if (threadIdx.x == 0) ids[i] = greedy;
    return;
  }
  Cut cut{0xffffffffu, INT_MAX};
  if (k > 0 && k < count)
    cut = select(row, vocab, temp, cut, Weigh{false, 0.0f, 1.0}, k, false, sh);
  const float mx = best / temp;  // the largest candidate is always kept
  // Softmax normaliser over the kept candidates.
  double z = 0.0;
  for (int64_t t = threadIdx.x; t < vocab; t += blockDim.x) {
    const float l = row[t];
    if (l == -INFINITY) continue;
    const float s = l / temp;
    if (kept(order_key(s), static_cast<int32_t>(t), cut)) z += static_cast<double>(expf(s - mx));
  }
  z = block_sum_d(z, sh);
  const Weigh mass{true, mx, z};
  const float tp = rows[i].top_p;
  if (tp < 1.0f) cut = select(row, vocab, temp, cut, mass, tp, false, sh);
  // The kept mass, then the draw.
  double total = 0.0;
  for (int64_t t = threadIdx.x; t < vocab; t += blockDim.x) {
    const float l = row[t];
    if (l == -INFINITY) continue;
    const float s = l / temp;
    if (kept(order_key(s), static_cast<int32_t>(t), cut)) total += mass(s);
  }
  total = block_sum_d(total, sh);
  const Cut pick = select(row, vocab, temp, cut, mass, rows[i].uniform * total, true, sh);
  if (threadIdx.x == 0) ids[i] = pick.id;
}

}  // namespace

void sample(const TensorView& logits, const SampleRow* rows, const TensorView& ids,
            cudaStream_t stream) {
  TANDEM_CHECK(logits.dtype == DType::kF32 && logits.ndim == 2, "sample logits ",
               logits.describe());
  const int64_t n = logits.dim(0), vocab = logits.dim(1);
  TANDEM_CHECK(vocab > 0 && vocab < INT_MAX, "sample vocab ", vocab);
  TANDEM_CHECK(ids.dtype == DType::kI32 && ids.numel() == n && ids.contiguous(), "sample ids ",
               ids.describe(), " for logits ", logits.describe());
  TANDEM_CHECK(rows != nullptr || n == 0, "sample: no rows");
  check_device_memory(ids, "ids");
  check_device_memory(logits, "logits");
  if (n == 0) return;
  TANDEM_CHECK(n <= 0x7fffffff, "sample: too many rows ", n);
  TANDEM_LAUNCH(static_cast<unsigned>(n), kThreads, 0, stream, sample_kernel)
  (logits.as<const float>(), row_layout(logits), rows, ids.as<int32_t>());
  TANDEM_CUDA_LAUNCH_CHECK("sample");
}

}  // namespace tandem::cuda
