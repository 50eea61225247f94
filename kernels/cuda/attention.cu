// Attention kernels (decode-oriented, exact for prefill too).
//
// attention_kernel<TK, TV>: grid (n * Hkv * ceil(rep / 4), nsplit), 128 threads = 4 warps.
// Block (i, g, head group, split s) computes query row i for up to 4 query heads of kv head g
// (rep = Hq / Hkv) over its key chunk [s * chunk, (s + 1) * chunk) cut at the query's visible
// count. Each warp takes every 4th key of the chunk; lanes own dims lane + 32 t (t < 8, so
// d <= 256) of q, k, v and o; a score is a shuffle reduction; each warp keeps an online softmax
// (running max m, sum l, unnormalised o) per head. At the end the 4 warp states are combined
// through shared memory (4 * 4 * d + 32 floats) into a normalised partial: straight into
// out when nsplit == 1, else into workspace partials [nsplit, n, Hq, d] / [nsplit, n, Hq].
//
// combine_kernel: grid (n * Hq), 128 threads over d; merges the nsplit partials of one row in
// split order with merge_element, exactly as merge_partial_row would.
#include <algorithm>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/merge.cuh"

namespace tandem::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * kWarp;
constexpr int kHeads = 4;               // query heads per block
constexpr int kDimsPerLane = 8;         // d <= 32 * 8
constexpr int64_t kMinSplitKeys = 256;  // never split into chunks smaller than this
constexpr int kMaxSplits = 64;

struct AttnParams {
  const float* q;
  int64_t q_s0, q_s1;
  const void* k;
  const void* v;
  int64_t k_s0, k_s1, v_s0, v_s1;
  const int32_t* q_pos;
  int64_t k_pos0, t_keys, chunk;
  int32_t d, rep, hkv, hgroups;
  float scale;
  float* o;  // final output or split partials
  int64_t o_s0, o_s1;
  float* lse;
  int64_t l_s0, l_s1;
  int64_t split_o_stride, split_l_stride;  // between splits (0 when nsplit == 1)
  // Paged keys (nullptr: one contiguous span): key j is row j % page_rows of the page starting
  // pages[j / page_rows] elements from the span's base (device memory).
  const int64_t* pages;
  int64_t page_rows;
};

// Element offset of key j's row (row stride s0) from the span's base.
__device__ __forceinline__ int64_t key_offset(const AttnParams& p, int64_t j, int64_t s0) {
  if (p.pages == nullptr) return j * s0;
  return p.pages[j / p.page_rows] + (j % p.page_rows) * s0;
}

template <typename TK, typename TV>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttnParams p) {
  TANDEM_DYNAMIC_SHARED(float, smem);  // o [kWarps][kHeads][d], m [kWarps][kHeads], l [...]
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int d = p.d;
  const int64_t bx = blockIdx.x;
  const int hg = static_cast<int>(bx % p.hgroups);
  const int g = static_cast<int>((bx / p.hgroups) % p.hkv);
  const int64_t i = bx / (static_cast<int64_t>(p.hgroups) * p.hkv);
  const int s = blockIdx.y;
  const int nh = min(kHeads, p.rep - hg * kHeads);  // valid heads of this block (uniform)
  const int h0 = g * p.rep + hg * kHeads;           // first query head

  const int64_t vis =
      min(max(static_cast<int64_t>(p.q_pos[i]) - p.k_pos0 + 1, int64_t{0}), p.t_keys);
  const int64_t j0 = min(s * p.chunk, vis), j1 = min((s + 1) * p.chunk, vis);

  float q[kHeads][kDimsPerLane], o[kHeads][kDimsPerLane], m[kHeads], l[kHeads];
#pragma unroll
  for (int r = 0; r < kHeads; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t) {
      const int c = lane + kWarp * t;
      o[r][t] = 0.0f;
      q[r][t] = (r < nh && c < d) ? p.q[i * p.q_s0 + (h0 + r) * p.q_s1 + c] : 0.0f;
    }
  }
  const TK* kb = static_cast<const TK*>(p.k) + g * p.k_s1;
  const TV* vb = static_cast<const TV*>(p.v) + g * p.v_s1;
  for (int64_t j = j0 + warp; j < j1; j += kWarps) {
    float kf[kDimsPerLane], vf[kDimsPerLane];
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t) {
      const int c = lane + kWarp * t;
      kf[t] = c < d ? to_f32<TK>(kb[key_offset(p, j, p.k_s0) + c]) : 0.0f;
      vf[t] = c < d ? to_f32<TV>(vb[key_offset(p, j, p.v_s0) + c]) : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kHeads; ++r) {
      if (r >= nh) break;
      float dot = 0.0f;
#pragma unroll
      for (int t = 0; t < kDimsPerLane; ++t) dot = fmaf(q[r][t], kf[t], dot);
      const float sc = p.scale * warp_sum(dot);
      const float mn = fmaxf(m[r], sc);
      // Rescale what was accumulated under the old max (nothing yet while it is -inf).
      const float alpha = m[r] == -INFINITY ? 0.0f : expf(m[r] - mn);
      const float pr = expf(sc - mn);
      m[r] = mn;
      l[r] = l[r] * alpha + pr;
#pragma unroll
      for (int t = 0; t < kDimsPerLane; ++t) o[r][t] = fmaf(pr, vf[t], o[r][t] * alpha);
    }
  }

  // Combine the warps' states.
  float* so = smem;
  float* sm = so + kWarps * kHeads * d;
  float* sl = sm + kWarps * kHeads;
#pragma unroll
  for (int r = 0; r < kHeads; ++r) {
#pragma unroll
    for (int t = 0; t < kDimsPerLane; ++t) {
      const int c = lane + kWarp * t;
      if (c < d) so[(warp * kHeads + r) * d + c] = o[r][t];
    }
    if (lane == 0) {
      sm[warp * kHeads + r] = m[r];
      sl[warp * kHeads + r] = l[r];
    }
  }
  __syncthreads();
  float* out_o = p.o + s * p.split_o_stride;
  float* out_l = p.lse + s * p.split_l_stride;
  for (int e = threadIdx.x; e < nh * d; e += kThreads) {
    const int r = e / d, c = e % d;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, sm[w * kHeads + r]);
    const int64_t h = h0 + r;
    float* orow = out_o + i * p.o_s0 + h * p.o_s1;
    if (mx == -INFINITY) {  // no visible key in this chunk: the empty partial
      orow[c] = 0.0f;
      if (c == 0) out_l[i * p.l_s0 + h * p.l_s1] = -INFINITY;
      continue;
    }
    float sum = 0.0f, acc = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = sm[w * kHeads + r];
      if (mw == -INFINITY) continue;  // this warp saw no key: weight 0, skipped
      const float wt = expf(mw - mx);
      sum += sl[w * kHeads + r] * wt;
      acc += so[(w * kHeads + r) * d + c] * wt;
    }
    orow[c] = acc / sum;
    if (c == 0) out_l[i * p.l_s0 + h * p.l_s1] = mx + logf(sum);
  }
}

__global__ void combine_kernel(const float* po, const float* pl, int nsplit, int64_t rows, int d,
                               float* o, int64_t o_s0, int64_t o_s1, float* lse, int64_t l_s0,
                               int64_t l_s1, int64_t hq) {
  const int64_t row = blockIdx.x;  // (i, h) flattened
  const int64_t i = row / hq, h = row % hq;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = po[row * d + c];
    float la = pl[row];
    for (int sp = 1; sp < nsplit; ++sp)
      merge_element(acc, la, po[(sp * rows + row) * d + c], pl[sp * rows + row]);
    o[i * o_s0 + h * o_s1 + c] = la == -INFINITY ? 0.0f : acc;
    if (c == 0) lse[i * l_s0 + h * l_s1] = la;
  }
}

template <typename TK>
void launch_v(DType vt, dim3 grid, size_t smem, const AttnParams& p, cudaStream_t stream) {
  switch (vt) {
    case DType::kF32:
      TANDEM_LAUNCH(grid, kThreads, smem, stream, attention_kernel<TK, float>)(p);
      break;
    case DType::kF16:
      TANDEM_LAUNCH(grid, kThreads, smem, stream, attention_kernel<TK, __half>)(p);
      break;
    default:
      TANDEM_LAUNCH(grid, kThreads, smem, stream, attention_kernel<TK, __nv_bfloat16>)(p);
      break;
  }
}

}  // namespace

void attention(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& q_pos, int64_t k_pos0, float scale, const AttnPartial& out,
               int num_sms, Workspace& ws, cudaStream_t stream, const DevicePages* pages) {
  TANDEM_CHECK(q.dtype == DType::kF32 && q.ndim == 3 && q.stride[2] == 1, "attention q ",
               q.describe());
  const int64_t n = q.dim(0), hq = q.dim(1), d = q.dim(2);
  TANDEM_CHECK(k.ndim == 3 && same_shape(k, v) && is_float_dtype(k.dtype) &&
                   is_float_dtype(v.dtype) && k.stride[2] == 1 && v.stride[2] == 1 && k.dim(2) == d,
               "attention k ", k.describe(), " v ", v.describe(), " for q ", q.describe());
  const int64_t t_keys = k.dim(0), hkv = k.dim(1);
  TANDEM_CHECK(hkv > 0 && hq % hkv == 0, "attention heads: Hq=", hq, " Hkv=", hkv);
  TANDEM_CHECK(d >= 1 && d <= kAttnMaxHeadDim, "attention head_dim ", d, " (CUDA: 1..",
               kAttnMaxHeadDim, ")");
  TANDEM_CHECK(q_pos.dtype == DType::kI32 && q_pos.numel() == n && q_pos.contiguous(),
               "attention q_pos ", q_pos.describe());
  TANDEM_CHECK(out.o.dtype == DType::kF32 && same_shape(out.o, q) && out.o.stride[2] == 1 &&
                   out.lse.dtype == DType::kF32 && out.lse.ndim == 2 && out.lse.dim(0) == n &&
                   out.lse.dim(1) == hq,
               "attention out o ", out.o.describe(), " lse ", out.lse.describe());
  for (const TensorView* t : {&q, &k, &v, &q_pos, &out.o, &out.lse})
    check_device_memory(*t, "attention operand");
  if (pages != nullptr)
    TANDEM_CHECK(pages->offsets != nullptr && pages->rows > 0 &&
                     pages->count == (t_keys + pages->rows - 1) / pages->rows,
                 "attention pages: ", pages->count, " pages of ", pages->rows, " rows for ", t_keys,
                 " keys");
  if (n == 0 || hq == 0) return;

  const int64_t rep = hq / hkv;
  const int64_t hgroups = (rep + kHeads - 1) / kHeads;
  const int64_t blocks = n * hkv * hgroups;
  TANDEM_CHECK(blocks <= 0x7fffffff, "attention grid too large: ", blocks);
  // Split the keys while the grid is under two blocks per multiprocessor. q_pos lives on the
  // device, so the split is sized by T (an upper bound of every query's visible count).
  int64_t nsplit = 1;
  const int64_t target = 2 * static_cast<int64_t>(std::max(num_sms, 1));
  if (blocks < target && t_keys >= 2 * kMinSplitKeys)
    nsplit = std::min<int64_t>(
        {(target + blocks - 1) / blocks, t_keys / kMinSplitKeys, int64_t{kMaxSplits}});
  const int64_t chunk = std::max<int64_t>(1, (t_keys + nsplit - 1) / nsplit);

  AttnParams p{};
  p.q = q.as<const float>();
  p.q_s0 = q.stride[0];
  p.q_s1 = q.stride[1];
  p.k = k.data;
  p.v = v.data;
  p.k_s0 = k.stride[0];
  p.k_s1 = k.stride[1];
  p.v_s0 = v.stride[0];
  p.v_s1 = v.stride[1];
  p.q_pos = q_pos.as<const int32_t>();
  p.k_pos0 = k_pos0;
  p.t_keys = t_keys;
  p.chunk = chunk;
  p.d = static_cast<int32_t>(d);
  p.rep = static_cast<int32_t>(rep);
  p.hkv = static_cast<int32_t>(hkv);
  p.hgroups = static_cast<int32_t>(hgroups);
  p.scale = scale;
  if (pages != nullptr) {
    p.pages = pages->offsets;
    p.page_rows = pages->rows;
  }
  float* part_o = nullptr;
  float* part_l = nullptr;
  if (nsplit == 1) {
    p.o = out.o.as<float>();
    p.o_s0 = out.o.stride[0];
    p.o_s1 = out.o.stride[1];
    p.lse = out.lse.as<float>();
    p.l_s0 = out.lse.stride[0];
    p.l_s1 = out.lse.stride[1];
  } else {
    const int64_t rows = n * hq;
    const size_t o_bytes = static_cast<size_t>(nsplit * rows * d) * sizeof(float);
    const size_t o_bytes_aligned = (o_bytes + 255) / 256 * 256;
    char* base = static_cast<char*>(
        ws.get(o_bytes_aligned + static_cast<size_t>(nsplit * rows) * sizeof(float)));
    part_o = reinterpret_cast<float*>(base);
    part_l = reinterpret_cast<float*>(base + o_bytes_aligned);
    p.o = part_o;
    p.o_s0 = hq * d;
    p.o_s1 = d;
    p.lse = part_l;
    p.l_s0 = hq;
    p.l_s1 = 1;
    p.split_o_stride = rows * d;
    p.split_l_stride = rows;
  }
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(nsplit));
  const size_t smem = static_cast<size_t>(kWarps * kHeads * (d + 2)) * sizeof(float);  // <= 16.5 KB
  switch (k.dtype) {
    case DType::kF32:
      launch_v<float>(v.dtype, grid, smem, p, stream);
      break;
    case DType::kF16:
      launch_v<__half>(v.dtype, grid, smem, p, stream);
      break;
    default:
      launch_v<__nv_bfloat16>(v.dtype, grid, smem, p, stream);
      break;
  }
  TANDEM_CUDA_LAUNCH_CHECK("attention");
  if (nsplit == 1) return;
  const int64_t rows = n * hq;
  TANDEM_CHECK(rows <= 0x7fffffff, "attention combine grid too large: ", rows);
  TANDEM_LAUNCH(static_cast<unsigned>(rows), 128, 0, stream, combine_kernel)
  (part_o, part_l, static_cast<int>(nsplit), rows, static_cast<int>(d), out.o.as<float>(),
   out.o.stride[0], out.o.stride[1], out.lse.as<float>(), out.lse.stride[0], out.lse.stride[1], hq);
  TANDEM_CUDA_LAUNCH_CHECK("attention combine");
}

}  // namespace tandem::cuda
