// The MAW (moving attention weight) kernels of the hybrid store's hgca policy, beside the host
// attention kernel: the per-step update of the stored keys' MAW from a decode query, and the
// seeding of a prompt's MAW from the attention of its last queries.
//
// MAW of a key for KV head g: an exponential moving average of p = the largest attention
// weight any of the g's G query heads gives it, exp(max_h(scale q_h.k - lse_h)).
#pragma once

#include <cstdint>

#include "kernels/dtype.h"

namespace tandem::cpu {

// One decode step over `rows` stored key rows k ([rows, hkv, d] in dtype `t`, device layout):
// maw[r * hkv + g] <- (1 - alpha) maw + alpha p. q_scaled f32 [hkv * G, d] is the query already
// multiplied by the softmax scale; lse f32 [hkv * G] the log-sum-exp the weights are relative to.
void maw_update_rows(const uint8_t* k, DType t, int32_t rows, int32_t hkv, int32_t G, int32_t d,
                     const float* q_scaled, const float* lse, float alpha, float* maw);

// p of one key row krow f32 [hkv, d] for KV head g (as maw_update_rows computes it).
float maw_prob(const float* q_scaled, const float* lse, const float* krow, int32_t g, int32_t G,
               int32_t d);

// The seed of one prompt key (f32 [d], of KV head g, at position pos): the mean over the
// observed queries i in [i0, n) that see it (pos <= pos0 + i) of p, times `rescale`. q f32
// [n, hq, d] (not scaled), lse f32 [n, hq].
float maw_seed(const float* q, const float* lse, int64_t i0, int64_t n, int32_t hq, int32_t G,
               int32_t d, float scale, const float* key, int32_t g, int64_t pos, int64_t pos0,
               float rescale);

}  // namespace tandem::cpu
