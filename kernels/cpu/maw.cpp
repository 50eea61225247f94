// MAW kernels (kernels/cpu/maw.h): 8 key rows at a time, one exp8 per KV head.
#include "kernels/cpu/maw.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/simd.h"

namespace tandem::cpu {

float maw_prob(const float* q_scaled, const float* lse, const float* krow, int32_t g, int32_t G,
               int32_t d) {
  float best = -std::numeric_limits<float>::infinity();
  for (int32_t h = g * G; h < (g + 1) * G; ++h)
    best = std::max(best, dot_f32(q_scaled + int64_t{h} * d, krow + int64_t{g} * d, d) - lse[h]);
  return std::exp(best);
}

void maw_update_rows(const uint8_t* k, DType t, int32_t rows, int32_t hkv, int32_t G, int32_t d,
                     const float* q_scaled, const float* lse, float alpha, float* maw) {
  const int64_t row = int64_t{hkv} * d, row_bytes = row * dtype_size(t);
  auto step = [alpha](float m, float p) { return (1.0f - alpha) * m + alpha * p; };
  thread_local std::vector<float> tile;  // 8 key rows [8, hkv, d] as f32
  tile.resize(static_cast<size_t>(8 * row));
  if (d % 8 != 0) {  // one row at a time
    for (int32_t r = 0; r < rows; ++r) {
      row_to_f32(k + r * row_bytes, t, tile.data(), row);
      for (int32_t g = 0; g < hkv; ++g)
        maw[r * hkv + g] = step(maw[r * hkv + g], maw_prob(q_scaled, lse, tile.data(), g, G, d));
    }
    return;
  }
  // 8 rows at a time: 8 dot products per query head reduced together, one exp8 per KV head.
  for (int32_t t0 = 0; t0 < rows; t0 += 8) {
    const int32_t nr = std::min(8, rows - t0);
    for (int32_t r = 0; r < 8; ++r)
      row_to_f32(k + (t0 + std::min(r, nr - 1)) * row_bytes, t, tile.data() + r * row, row);
    for (int32_t g = 0; g < hkv; ++g) {
      __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
      for (int32_t h = g * G; h < (g + 1) * G; ++h) {
        const float* qh = q_scaled + int64_t{h} * d;
        __m256 acc[8];
        for (__m256& x : acc) x = _mm256_setzero_ps();
        for (int32_t c = 0; c < d; c += 8) {
          const __m256 qv = _mm256_loadu_ps(qh + c);
          for (int32_t r = 0; r < 8; ++r)
            acc[r] = _mm256_fmadd_ps(
                qv, _mm256_loadu_ps(tile.data() + r * row + int64_t{g} * d + c), acc[r]);
        }
        best = _mm256_max_ps(best, _mm256_sub_ps(reduce8(acc), _mm256_set1_ps(lse[h])));
      }
      alignas(32) float p[8];
      _mm256_store_ps(p, exp8(best));
      for (int32_t r = 0; r < nr; ++r) {
        float& m = maw[(t0 + r) * hkv + g];
        m = step(m, p[r]);
      }
    }
  }
}

float maw_seed(const float* q, const float* lse, int64_t i0, int64_t n, int32_t hq, int32_t G,
               int32_t d, float scale, const float* key, int32_t g, int64_t pos, int64_t pos0,
               float rescale) {
  double acc = 0;
  for (int64_t i = i0; i < n; ++i) {
    if (pos > pos0 + i) continue;  // a later token of the chunk: not visible to query i
    float p = 0;
    for (int32_t h = g * G; h < (g + 1) * G; ++h)
      p = std::max(p, std::exp(scale * dot_f32(q + (i * hq + h) * d, key, d) - lse[i * hq + h]));
    acc += p;
  }
  return static_cast<float>(acc / static_cast<double>(n - i0)) * rescale;
}

}  // namespace tandem::cpu
