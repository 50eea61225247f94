// LSE merge of attention partials on the device (the rule of kernels/attn_partial.h).
#pragma once

#include "kernels/attn_partial.h"
#include "kernels/cuda/cuda_common.cuh"

namespace tandem::cuda {

// One element of merge_partial_row: (o_a, lse_a) <- merge((o_a, lse_a), (o_b, lse_b)), with the
// same arithmetic. An empty side (lse = -inf) is skipped, never multiplied, so whatever its o
// holds cannot leak in. Callers that share lse_a between threads update it only after every
// thread has read it.
__device__ __forceinline__ void merge_element(float& o_a, float& lse_a, float o_b, float lse_b) {
  if (lse_b == -INFINITY) return;
  if (lse_a == -INFINITY) {
    o_a = o_b;
    lse_a = lse_b;
    return;
  }
  const float m = fmaxf(lse_a, lse_b);
  const float wa = merge_weight(lse_a, m);
  const float wb = merge_weight(lse_b, m);
  const float inv = 1.0f / (wa + wb);
  o_a = (wa * o_a + wb * o_b) * inv;
  lse_a = m + logf(wa + wb);
}

// a <- merge(a, b) row by row: o f32 [n, heads, d] (last dim contiguous), lse f32 [n, heads].
// b may live in mapped pinned host memory (MemoryKind::kPinned, allocated with
// cudaHostAllocMapped): the kernel then reads it in place over the bus (zero copy) through the
// device alias of its pointers.
void merge(const AttnPartial& a, const AttnPartial& b, cudaStream_t stream);

}  // namespace tandem::cuda
