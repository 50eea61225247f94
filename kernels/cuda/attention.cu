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
//
// The block body (attend_block), the split combine (combine_splits) and the planning
// (plan_attention, below) are shared with attention_batch.cu through attention_body.cuh, so a
// batched segment computes exactly what its single call does.
#include <algorithm>

#include "kernels/cuda/attention.cuh"
#include "kernels/cuda/attention_body.cuh"

namespace tandem::cuda {
namespace attn {

AttnPlan plan_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& q_pos, int64_t k_pos0, float scale,
                        const AttnPartial& out, int num_sms, const DevicePages* pages) {
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
  AttnPlan plan;
  plan.n = n;
  plan.hq = hq;
  plan.d = d;
  if (n == 0 || hq == 0) return plan;

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
  plan.blocks = blocks;
  plan.nsplit = nsplit;

  AttnParams& p = plan.p;
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
  return plan;
}

}  // namespace attn

namespace {

using namespace attn;

template <typename TK, typename TV>
__global__ void __launch_bounds__(kThreads) attention_kernel(AttnParams p) {
  TANDEM_DYNAMIC_SHARED(float, smem);  // o [kWarps][kHeads][d], m [kWarps][kHeads], l [...]
  attend_block<TK, TV>(p, blockIdx.x, blockIdx.y, smem);
}

__global__ void combine_kernel(const float* po, const float* pl, int nsplit, int64_t rows, int d,
                               float* o, int64_t o_s0, int64_t o_s1, float* lse, int64_t l_s0,
                               int64_t l_s1, int64_t hq) {
  const int64_t row = blockIdx.x;  // (i, h) flattened
  const int64_t i = row / hq, h = row % hq;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float oc, la;
    combine_splits(po + row * d + c, rows * d, pl + row, rows, nsplit, oc, la);
    o[i * o_s0 + h * o_s1 + c] = oc;
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
  AttnPlan plan = plan_attention(q, k, v, q_pos, k_pos0, scale, out, num_sms, pages);
  if (plan.blocks == 0) return;
  const int64_t n = plan.n, hq = plan.hq, d = plan.d, nsplit = plan.nsplit;
  AttnParams& p = plan.p;
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
  const dim3 grid(static_cast<unsigned>(plan.blocks), static_cast<unsigned>(nsplit));
  const size_t smem = attention_smem(d);
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
  TANDEM_LAUNCH(static_cast<unsigned>(rows), kCombineThreads, 0, stream, combine_kernel)
  (part_o, part_l, static_cast<int>(nsplit), rows, static_cast<int>(d), out.o.as<float>(),
   out.o.stride[0], out.o.stride[1], out.lse.as<float>(), out.lse.stride[0], out.lse.stride[1], hq);
  TANDEM_CUDA_LAUNCH_CHECK("attention combine");
}

}  // namespace tandem::cuda
