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

HostBlockRef HostHead::ref(int32_t j) const {
  const int32_t id = host[static_cast<size_t>(j)];
  const int64_t off =
      int64_t{g} * blocks.layout.tokens * blocks.layout.head_dim * dtype_size(blocks.layout.dtype);
  HostBlockRef r;
  r.k = blocks.host_k(id) + off;
  r.v = blocks.host_v(id) + off;
  r.n = rows_of(j);
  return r;
}

int32_t HostHead::rows_of(int32_t j) const {
  return std::min(blocks.layout.tokens, host_tokens - j * blocks.layout.tokens);
}

int64_t select_full(const HostHead& h, std::vector<HostBlockRef>& refs) {
  int64_t rows = 0;
  for (int32_t j = 0; j < h.count(); ++j) refs.push_back(h.ref(j)), rows += refs.back().n;
  return rows;
}

int64_t select_topk(const HostHead& h, const float* qg, int32_t G, int32_t k,
                    std::vector<HostBlockRef>& refs) {
  const int32_t d = h.blocks.layout.head_dim;
  thread_local std::vector<float> bounds;
  bounds.resize(static_cast<size_t>(h.count()));
  for (int32_t j = 0; j < h.count(); ++j) {
    const int32_t id = h.host[static_cast<size_t>(j)];
    bounds[static_cast<size_t>(j)] =
        quest_bound(qg, G, d, h.blocks.host_kmin(id) + int64_t{h.g} * d,
                    h.blocks.host_kmax(id) + int64_t{h.g} * d);
  }
  int64_t rows = 0;
  for (int32_t j : top_k_indices(bounds, k)) refs.push_back(h.ref(j)), rows += refs.back().n;
  return rows;
}

int64_t select_hgca(const HostHead& h, float threshold, std::vector<HostBlockRef>& refs,
                    std::vector<int32_t>& idx) {
  const int32_t b = h.blocks.layout.tokens;
  thread_local std::vector<std::pair<int32_t, int32_t>> spans;  // (start in idx, count) per block
  spans.clear();
  for (int32_t j = 0; j < h.count(); ++j) {
    const float* maw = h.maw[static_cast<size_t>(j)] + int64_t{h.g} * b;
    const int32_t first = static_cast<int32_t>(idx.size());
    spans.emplace_back(first, select_above(maw, h.rows_of(j), threshold, idx));
  }
  int64_t rows = 0;
  for (int32_t j = 0; j < h.count(); ++j) {  // idx no longer grows: pointers are stable
    const auto [first, count] = spans[static_cast<size_t>(j)];
    if (count == 0) continue;
    HostBlockRef r = h.ref(j);
    r.idx = idx.data() + first;
    r.n_idx = count;
    refs.push_back(r);
    rows += count;
  }
  return rows;
}

}  // namespace tandem
