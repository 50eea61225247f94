// Backend::attention_batch on the device: every segment of the batch in one upload and at most
// two launches, bit-identical to the single calls (attention.cu, merge.cu) it replaces.
//
// The host plans each segment exactly as the single call would (attn::plan_attention: same
// checks, same split), then sends one table: the segments' parameters, the prefix of their
// blocks, the groups, the prefix of their (row, head) pairs and every page offset.
//
// attention_batch_kernel: grid (sum over segments of blocks x nsplit), 128 threads. Thread 0
// finds the block's segment (binary search on the block prefix) and copies its parameters to
// shared memory; the block then runs attend_block, the single kernel's body, for its dtypes.
// A group of one segment without split writes out directly, as the single call does; every
// other segment writes its split partials to the workspace.
//
// combine_batch_kernel: grid (the (row, head) pairs of the groups that need it), 128 threads over
// d. Per element: each segment's splits combined with combine_splits (combine_kernel's rule),
// then merged into the group's running partial with merge_element in segment order (merge's
// rule: an empty side is skipped), and written to out. The values between the steps stay in
// registers where the single calls store and reload them: floats either way, the same bits.
#include <algorithm>
#include <cstring>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_body.cuh"

namespace tandem::cuda {
namespace {

using namespace attn;

enum : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2 };

int32_t dtype_code(DType t) { return t == DType::kF32 ? kF32 : t == DType::kF16 ? kF16 : kBF16; }

// No member initializers: it lives in __shared__ memory.
struct BatchSeg {
  AttnParams p;    // as the single call's, its output the group's rows or its partials
  int32_t blocks;  // n * Hkv * head groups (the single call's grid.x)
  int32_t nsplit;  // the single call's grid.y
  int32_t kt, vt;  // dtype codes of k and v
};

struct BatchGroup {
  int64_t q_row0;
  int32_t seg0, nseg;  // its segments in the table, in order
};

// The last index k < count with prefix[k] <= x (prefix ascending, prefix[0] == 0 <= x).
__device__ __forceinline__ int find_prefix(const int64_t* prefix, int count, int64_t x) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (prefix[mid] <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

template <typename TK>
__device__ __forceinline__ void attend_v(const BatchSeg& sg, int64_t bx, int s, float* smem) {
  switch (sg.vt) {
    case kF32:
      return attend_block<TK, float>(sg.p, bx, s, smem);
    case kF16:
      return attend_block<TK, __half>(sg.p, bx, s, smem);
    default:
      return attend_block<TK, __nv_bfloat16>(sg.p, bx, s, smem);
  }
}

__global__ void __launch_bounds__(kThreads)
    attention_batch_kernel(const BatchSeg* segs, const int64_t* block0, int nseg) {
  TANDEM_DYNAMIC_SHARED(float, smem);  // attend_block's
  __shared__ BatchSeg sg;
  __shared__ int64_t local;
  if (threadIdx.x == 0) {
    const int64_t b = blockIdx.x;
    const int k = find_prefix(block0, nseg, b);
    sg = segs[k];
    local = b - block0[k];
  }
  __syncthreads();
  const int64_t bx = local % sg.blocks;
  const int s = static_cast<int>(local / sg.blocks);
  switch (sg.kt) {
    case kF32:
      return attend_v<float>(sg, bx, s, smem);
    case kF16:
      return attend_v<__half>(sg, bx, s, smem);
    default:
      return attend_v<__nv_bfloat16>(sg, bx, s, smem);
  }
}

__global__ void combine_batch_kernel(const BatchSeg* segs, const BatchGroup* groups,
                                     const int64_t* pair0, int ngroups, int64_t hq, int d, float* o,
                                     int64_t o_s0, int64_t o_s1, float* lse, int64_t l_s0,
                                     int64_t l_s1) {
  const int64_t b = blockIdx.x;
  const int gi = find_prefix(pair0, ngroups, b);
  const BatchGroup gr = groups[gi];
  const int64_t pair = b - pair0[gi], i = pair / hq, h = pair % hq;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float acc = 0.0f, la = -INFINITY;
    for (int k = 0; k < gr.nseg; ++k) {
      const BatchSeg& sg = segs[gr.seg0 + k];
      const AttnParams& p = sg.p;
      float oc, lc;
      combine_splits(p.o + i * p.o_s0 + h * p.o_s1 + c, p.split_o_stride,
                     p.lse + i * p.l_s0 + h * p.l_s1, p.split_l_stride, sg.nsplit, oc, lc);
      if (k == 0) {
        acc = oc;
        la = lc;
      } else {
        merge_element(acc, la, oc, lc);
      }
    }
    o[(gr.q_row0 + i) * o_s0 + h * o_s1 + c] = acc;
    if (c == 0) lse[(gr.q_row0 + i) * l_s0 + h * l_s1] = la;
  }
}

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

void attention_batch(const TensorView& q, const TensorView& q_pos, const AttnSegment* segs,
                     int64_t count, float scale, const AttnPartial& out, int num_sms, Workspace& ws,
                     UploadTable& table, cudaStream_t stream) {
  check_attention_batch(q, q_pos, segs, count, out);
  const int64_t hq = q.dim(1), d = q.dim(2);
  if (hq == 0) return;  // nothing to compute, as in the single call
  // Which segments run: every group's first (it sets the group's rows, even from no key) and
  // every later one with keys (merging an empty partial changes nothing). Groups of no rows
  // are skipped, as the single calls do nothing for them.
  struct Kept {
    int64_t seg;
    bool first;
  };
  std::vector<Kept> kept;
  kept.reserve(static_cast<size_t>(count));
  int64_t n_pages = 0, n_groups = 0;
  for (int64_t s = 0; s < count; ++s) {
    const AttnSegment& g = segs[s];
    const bool first = s == 0 || segs[s - 1].q_row0 != g.q_row0 || segs[s - 1].q_rows != g.q_rows;
    if (g.q_rows == 0) continue;
    TANDEM_CHECK(g.k.ndim == 3, "attention_batch segment ", s, ": k ", g.k.describe());
    if (!first && g.k.dim(0) == 0) continue;
    kept.push_back({s, first});
    n_groups += first;
    n_pages += g.pages.count;
  }
  if (kept.empty()) return;
  const size_t nseg = kept.size();

  // The table: segments, block prefix, groups, pair prefix, page offsets.
  const size_t at_block0 = align_up(nseg * sizeof(BatchSeg), 16);
  const size_t at_groups = align_up(at_block0 + (nseg + 1) * sizeof(int64_t), 16);
  const size_t at_pair0 =
      align_up(at_groups + static_cast<size_t>(n_groups) * sizeof(BatchGroup), 16);
  const size_t at_pages =
      align_up(at_pair0 + static_cast<size_t>(n_groups + 1) * sizeof(int64_t), 16);
  const size_t bytes = at_pages + static_cast<size_t>(n_pages) * sizeof(int64_t);
  unsigned char* host = table.prepare(bytes, stream);
  unsigned char* dev = table.device();
  auto* h_block0 = reinterpret_cast<int64_t*>(host + at_block0);
  auto* h_pair0 = reinterpret_cast<int64_t*>(host + at_pair0);
  auto* h_pages = reinterpret_cast<int64_t*>(host + at_pages);

  // Plan every kept segment as its single call; partials are placed once all are planned.
  std::vector<AttnPlan> plans(nseg);
  std::vector<int32_t> group_of(nseg);
  std::vector<BatchGroup> groups;
  groups.reserve(static_cast<size_t>(n_groups));
  int64_t page_at = 0;
  for (size_t k = 0; k < nseg; ++k) {
    const AttnSegment& g = segs[kept[k].seg];
    const int64_t r0 = g.q_row0, r1 = g.q_row0 + g.q_rows;
    const AttnPartial rows{out.o.slice(r0, r1), out.lse.slice(r0, r1)};
    DevicePages dp;
    if (g.pages.count > 0) {
      TANDEM_CHECK(g.pages.offsets != nullptr && g.pages.rows > 0, "attention_batch segment ",
                   kept[k].seg, ": ", g.pages.count, " pages of ", g.pages.rows, " rows");
      std::memcpy(h_pages + page_at, g.pages.offsets,
                  static_cast<size_t>(g.pages.count) * sizeof(int64_t));
      dp = DevicePages{reinterpret_cast<const int64_t*>(dev + at_pages) + page_at, g.pages.count,
                       g.pages.rows};
      page_at += g.pages.count;
    }
    plans[k] = plan_attention(q.slice(r0, r1), g.k, g.v, q_pos.slice(r0, r1), g.k_pos0, scale, rows,
                              num_sms, g.pages.count > 0 ? &dp : nullptr);
    TANDEM_CHECK(plans[k].blocks > 0, "attention_batch segment ", kept[k].seg, " has no block");
    if (kept[k].first) groups.push_back(BatchGroup{r0, static_cast<int32_t>(k), 0});
    ++groups.back().nseg;
    group_of[k] = static_cast<int32_t>(groups.size() - 1);
  }

  // Outputs: a group of one unsplit segment writes out (as the single call); every other
  // segment its partials [nsplit, n, Hq, d] and [nsplit, n, Hq] in the workspace.
  auto direct = [&](size_t k) { return groups[group_of[k]].nseg == 1 && plans[k].nsplit == 1; };
  size_t o_floats = 0, l_floats = 0;
  std::vector<size_t> o_at(nseg), l_at(nseg);
  for (size_t k = 0; k < nseg; ++k) {
    if (direct(k)) continue;
    const size_t rows = static_cast<size_t>(plans[k].nsplit * plans[k].n * hq);
    o_at[k] = o_floats;
    l_at[k] = l_floats;
    o_floats += align_up(rows * static_cast<size_t>(d), 64);
    l_floats += align_up(rows, 64);
  }
  float* part =
      o_floats > 0 ? static_cast<float*>(ws.get((o_floats + l_floats) * sizeof(float))) : nullptr;
  int64_t total_blocks = 0;
  for (size_t k = 0; k < nseg; ++k) {
    AttnPlan& pl = plans[k];
    AttnParams& p = pl.p;
    const AttnSegment& g = segs[kept[k].seg];
    if (direct(k)) {
      p.o = out.o.as<float>() + g.q_row0 * out.o.stride[0];
      p.o_s0 = out.o.stride[0];
      p.o_s1 = out.o.stride[1];
      p.lse = out.lse.as<float>() + g.q_row0 * out.lse.stride[0];
      p.l_s0 = out.lse.stride[0];
      p.l_s1 = out.lse.stride[1];
    } else {
      const int64_t rows = pl.n * hq;
      p.o = part + o_at[k];
      p.o_s0 = hq * d;
      p.o_s1 = d;
      p.lse = part + o_floats + l_at[k];
      p.l_s0 = hq;
      p.l_s1 = 1;
      p.split_o_stride = rows * d;
      p.split_l_stride = rows;
    }
    const BatchSeg sg{p, static_cast<int32_t>(pl.blocks), static_cast<int32_t>(pl.nsplit),
                      dtype_code(g.k.dtype), dtype_code(g.v.dtype)};
    std::memcpy(host + k * sizeof(BatchSeg), &sg, sizeof(BatchSeg));
    h_block0[k] = total_blocks;
    total_blocks += pl.blocks * pl.nsplit;
  }
  h_block0[nseg] = total_blocks;
  TANDEM_CHECK(total_blocks <= 0x7fffffff, "attention_batch grid too large: ", total_blocks);

  // The groups that need the combine, compacted to the front of the group table.
  int64_t pairs = 0;
  int32_t n_combine = 0;
  for (const BatchGroup& gr : groups) {
    if (gr.nseg == 1 && direct(static_cast<size_t>(gr.seg0))) continue;
    std::memcpy(host + at_groups + static_cast<size_t>(n_combine) * sizeof(BatchGroup), &gr,
                sizeof(BatchGroup));
    h_pair0[n_combine] = pairs;
    pairs += plans[static_cast<size_t>(gr.seg0)].n * hq;
    ++n_combine;
  }
  h_pair0[n_combine] = pairs;
  TANDEM_CHECK(pairs <= 0x7fffffff, "attention_batch combine grid too large: ", pairs);

  table.upload(stream);
  const auto* d_segs = reinterpret_cast<const BatchSeg*>(dev);
  TANDEM_LAUNCH(static_cast<unsigned>(total_blocks), kThreads, attention_smem(d), stream,
                attention_batch_kernel)
  (d_segs, reinterpret_cast<const int64_t*>(dev + at_block0), static_cast<int>(nseg));
  TANDEM_CUDA_LAUNCH_CHECK("attention_batch");
  if (n_combine == 0) return;
  TANDEM_LAUNCH(static_cast<unsigned>(pairs), kCombineThreads, 0, stream, combine_batch_kernel)
  (d_segs, reinterpret_cast<const BatchGroup*>(dev + at_groups),
   reinterpret_cast<const int64_t*>(dev + at_pair0), static_cast<int>(n_combine), hq,
   static_cast<int>(d), out.o.as<float>(), out.o.stride[0], out.o.stride[1], out.lse.as<float>(),
   out.lse.stride[0], out.lse.stride[1]);
  TANDEM_CUDA_LAUNCH_CHECK("attention_batch combine");
}

}  // namespace tandem::cuda
