// Attention of n queries over one contiguous span of T keys on the device, returning the partial
// (o, lse) of kernels/attn_partial.h; the contract of Backend::attention.
#pragma once

#include "kernels/attn_partial.h"
#include "kernels/backend.h"
#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// q f32 [n, Hq, d]; k, v f32/f16/bf16 [T, Hkv, d] (last dims contiguous); q_pos i32 [n] on the
// device. Key j (position k_pos0 + j) is visible to query i iff k_pos0 + j <= q_pos[i].
// GQA: query head h reads kv head h / (Hq / Hkv). out.o f32 [n, Hq, d], out.lse f32 [n, Hq]
// (natural log); a query that sees no key gets lse = -inf and o = 0. d <= 256.
// When (n x kv heads) is too small to fill the device the keys are split into chunks whose
// partials go to `ws` and are merged with merge_element (the rule of merge_partial_row).
// num_sms: multiprocessors of the device (sizes the split).
// pages (optional): the keys live in pages, as in Backend::attention_paged; k and v then point
// at the origin of the page offsets and give the strides within a page.
struct DevicePages {
  const int64_t* offsets = nullptr;  // device memory, `count` element offsets of the pages
  int64_t count = 0;
  int64_t rows = 0;  // keys per page
};
void attention(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& q_pos, int64_t k_pos0, float scale, const AttnPartial& out,
               int num_sms, Workspace& ws, cudaStream_t stream, const DevicePages* pages = nullptr);

// Backend::attention_batch: every segment's attention, each planned (checks, split) as its
// single call above, in one upload into `table` and at most two launches (attention_batch.cu),
// bit-identical to the single calls and merges. segs may be reused on return.
void attention_batch(const TensorView& q, const TensorView& q_pos, const AttnSegment* segs,
                     int64_t count, float scale, const AttnPartial& out, int num_sms, Workspace& ws,
                     UploadTable& table, cudaStream_t stream);

inline constexpr int64_t kAttnMaxHeadDim = 256;

}  // namespace tandem::cuda
