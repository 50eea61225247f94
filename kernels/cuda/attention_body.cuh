// The device code one attention call and attention_batch share (attention.cu,
// attention_batch.cu): the launch parameters, the split rule, the body of one attention block
// and the split combine. Both paths run these same functions so that a batched segment is
// bit-identical to the single call; the layout is described in attention.cu's header.
#pragma once

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/merge.cuh"

namespace tandem::cuda::attn {

inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * kWarp;
inline constexpr int kHeads = 4;               // query heads per block
inline constexpr int kDimsPerLane = 8;         // d <= 32 * 8
inline constexpr int64_t kMinSplitKeys = 256;  // never split into chunks smaller than this
inline constexpr int kMaxSplits = 64;
inline constexpr int kCombineThreads = 128;

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

// One call's launch: its parameters (outputs not yet set) and grid (blocks x nsplit).
struct AttnPlan {
  AttnParams p{};
  int64_t n = 0, hq = 0, d = 0;
  int64_t blocks = 0;  // n * Hkv * head groups; 0: nothing to launch
  int64_t nsplit = 1;
};

// Checks one call's operands (Backend::attention's contract) and plans it: the split is sized
// by T while the grid is under two blocks per multiprocessor (attention.cu).
AttnPlan plan_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& q_pos, int64_t k_pos0, float scale,
                        const AttnPartial& out, int num_sms, const DevicePages* pages);

// Dynamic shared memory of one attention block for head_dim d (<= 16.5 KB).
inline size_t attention_smem(int64_t d) {
  return static_cast<size_t>(kWarps * kHeads * (d + 2)) * sizeof(float);
}

// Element offset of key j's row (row stride s0) from the span's base.
__device__ __forceinline__ int64_t key_offset(const AttnParams& p, int64_t j, int64_t s0) {
  if (p.pages == nullptr) return j * s0;
  return p.pages[j / p.page_rows] + (j % p.page_rows) * s0;
}

// Block bx (query row i, kv head g, head group hg flattened) of split s: query row i for up
// to 4 query heads of kv head g over its key chunk, written normalised to split s of p's
// output. smem: attention_smem(d) bytes. Every thread of the block calls it.
template <typename TK, typename TV>
__device__ __forceinline__ void attend_block(const AttnParams& p, int64_t bx, int s, float* smem) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int d = p.d;
  const int hg = static_cast<int>(bx % p.hgroups);
  const int g = static_cast<int>((bx / p.hgroups) % p.hkv);
  const int64_t i = bx / (static_cast<int64_t>(p.hgroups) * p.hkv);
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

// One element of the merged partial of nsplit split partials (po[sp * o_split], pl[sp *
// l_split]), merged in split order with merge_element as merge_partial_row would; an empty
// result gets o = 0.
__device__ __forceinline__ void combine_splits(const float* po, int64_t o_split, const float* pl,
                                               int64_t l_split, int nsplit, float& o, float& lse) {
  float acc = po[0];
  float la = pl[0];
  for (int sp = 1; sp < nsplit; ++sp) merge_element(acc, la, po[sp * o_split], pl[sp * l_split]);
  o = la == -INFINITY ? 0.0f : acc;
  lse = la;
}

}  // namespace tandem::cuda::attn
