// Selection policies: Quest bounds, top-k, HGCA thresholds, digests.
#include "kvstore/selection.h"

#include <algorithm>
#include <numeric>

namespace tandem {

float quest_bound(const float* q, int32_t G, int32_t d, const float* kmin, const float* kmax) {
  float total = 0.0f;
  for (int32_t h = 0; h < G; ++h) {
    const float* qh = q + static_cast<int64_t>(h) * d;
    for (int32_t c = 0; c < d; ++c) total += std::max(qh[c] * kmin[c], qh[c] * kmax[c]);
  }
  return total;
}

std::vector<int32_t> top_k_indices(std::span<const float> bounds, int32_t k) {
  std::vector<int32_t> idx(bounds.size());
  std::iota(idx.begin(), idx.end(), 0);
  if (k < static_cast<int32_t>(idx.size())) {
    std::nth_element(
        idx.begin(), idx.begin() + std::max(k, 0), idx.end(), [&](int32_t a, int32_t b) {
          return bounds[static_cast<size_t>(a)] > bounds[static_cast<size_t>(b)] ||
                 (bounds[static_cast<size_t>(a)] == bounds[static_cast<size_t>(b)] && a < b);
        });
    idx.resize(static_cast<size_t>(std::max(k, 0)));
  }
  std::sort(idx.begin(), idx.end());
  return idx;
}

int32_t select_above(const float* maw, int32_t n, float threshold, std::vector<int32_t>& out) {
  int32_t count = 0;
  for (int32_t i = 0; i < n; ++i)
    if (maw[i] > threshold) {
      out.push_back(i);
      ++count;
    }
  return count;
}

void digest_add(float* kmin, float* kmax, const float* k, int32_t d) {
  for (int32_t c = 0; c < d; ++c) {
    kmin[c] = std::min(kmin[c], k[c]);
    kmax[c] = std::max(kmax[c], k[c]);
  }
}

}  // namespace tandem
