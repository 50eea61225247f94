// AttnPartial: the result of attention over part of the keys, and the one place the merge rule
// is written. o [n, heads, head_dim] f32, lse [n, heads] f32, natural log. An empty partial
// (no visible key) has lse = -inf and o = 0.
#pragma once

#include <cmath>
#include <limits>

#include "kernels/tensor.h"

// merge_weight is shared with the CUDA merge kernels (kernels/cuda/merge.cuh).
#if defined(__CUDACC__)
#define TANDEM_HOST_DEVICE __host__ __device__
#else
#define TANDEM_HOST_DEVICE
#endif

namespace tandem {

struct AttnPartial {
  TensorView o;    // f32 [n, heads, head_dim]
  TensorView lse;  // f32 [n, heads]
};

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Weight of a partial relative to the running max m. The partial that holds the max gets
// exactly 1, so (+inf, +inf) and (-inf, -inf) never compute inf - inf = NaN.
TANDEM_HOST_DEVICE inline float merge_weight(float lse, float m) {
  return lse == m ? 1.0f : std::exp(lse - m);
}

// (o_a, lse_a) <- merge((o_a, lse_a), (o_b, lse_b)) for one head row of d floats.
//   m = max(lse_a, lse_b), w = exp(lse - m), o = (w_a o_a + w_b o_b) / (w_a + w_b),
//   lse = m + log(w_a + w_b). A side with weight 0 (empty) is skipped, not multiplied, so
// whatever its o holds cannot leak in.
inline void merge_partial_row(float* o_a, float* lse_a, const float* o_b, float lse_b, int d) {
  const float la = *lse_a;
  if (lse_b == kNegInf) return;  // b empty: a unchanged
  if (la == kNegInf) {           // a empty: take b
    for (int i = 0; i < d; ++i) o_a[i] = o_b[i];
    *lse_a = lse_b;
    return;
  }
  const float m = la > lse_b ? la : lse_b;
  const float wa = merge_weight(la, m);
  const float wb = merge_weight(lse_b, m);
  const float inv = 1.0f / (wa + wb);
  for (int i = 0; i < d; ++i) o_a[i] = (wa * o_a[i] + wb * o_b[i]) * inv;
  *lse_a = m + std::log(wa + wb);
}

}  // namespace tandem
