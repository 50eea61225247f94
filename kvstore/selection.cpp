// Selection policies: Quest bounds, top-k, HGCA thresholds, digests.
#include "kvstore/selection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/common.h"
#include "kernels/cpu/simd.h"

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
  HostBlockRef r;
  r.k = blocks.host_k_head(id, g);  // by channel: (row i, channel c) at c * tokens + i
  r.k_ld = blocks.layout.tokens;
  r.v = blocks.host_v_head(id, g);  // by tiles of channels, or by rows
  r.v_tile = blocks.layout.host_v_tile();
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
                    std::vector<HostBlockRef>& refs, std::span<const uint8_t> skip,
                    std::vector<int32_t>* chosen, std::vector<float>* bounds_out) {
  const int32_t d = h.blocks.layout.head_dim;
  thread_local std::vector<float> local;
  std::vector<float>& bounds = bounds_out != nullptr ? *bounds_out : local;
  bounds.resize(static_cast<size_t>(h.count()));
  for (int32_t j = 0; j < h.count(); ++j) {
    const int32_t id = h.host[static_cast<size_t>(j)];
    bounds[static_cast<size_t>(j)] =
        quest_bound(qg, G, d, h.blocks.host_kmin(id) + int64_t{h.g} * d,
                    h.blocks.host_kmax(id) + int64_t{h.g} * d);
  }
  const std::vector<int32_t> top = top_k_indices(bounds, k);
  int64_t rows = 0;
  for (int32_t j : top) {
    if (static_cast<size_t>(j) < skip.size() && skip[static_cast<size_t>(j)] != 0) continue;
    refs.push_back(h.ref(j));
    rows += refs.back().n;
  }
  if (chosen != nullptr) *chosen = top;
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

namespace {

// Eq. 4 over the scores z [n, G] of a head's n host entries (each query head's softmax over them,
// averaged over the group): the largest masses first until their sum reaches tau (all of them if
// rounding never does), ties broken by position. order receives the positions; the first k
// (returned) are the selection, ascending.
size_t tau_prefix(const float* z, int32_t n, int32_t G, float tau, std::vector<int32_t>& order) {
  thread_local std::vector<double> mass;
  mass.assign(static_cast<size_t>(n), 0.0);
  for (int32_t g = 0; g < G; ++g) {
    float m = -std::numeric_limits<float>::infinity();
    for (int32_t p = 0; p < n; ++p) m = std::max(m, z[static_cast<size_t>(p) * G + g]);
    double sum = 0;
    for (int32_t p = 0; p < n; ++p) sum += std::exp(double(z[static_cast<size_t>(p) * G + g]) - m);
    for (int32_t p = 0; p < n; ++p)
      mass[static_cast<size_t>(p)] +=
          std::exp(double(z[static_cast<size_t>(p) * G + g]) - m) / (sum * G);
  }
  order.resize(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t c) {
    const double ma = mass[static_cast<size_t>(a)], mc = mass[static_cast<size_t>(c)];
    return ma > mc || (ma == mc && a < c);
  });
  size_t k = 0;
  for (double acc = 0; k < order.size() && acc < tau;) acc += mass[static_cast<size_t>(order[k++])];
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k));
  return k;
}

// The refs of the ascending positions pos[0, k): per block its selected rows, listed in idx (not
// grown after the refs point into it). Returns the offset of the first in idx.
size_t refs_of_positions(const HostHead& h, const int32_t* pos, size_t k,
                         std::vector<HostBlockRef>& refs, std::vector<int32_t>& idx) {
  const int32_t b = h.blocks.layout.tokens;
  const size_t first = idx.size();
  idx.insert(idx.end(), pos, pos + k);
  for (size_t i = first; i < idx.size(); ++i) idx[i] %= b;
  for (size_t a = 0; a < k;) {
    const int32_t j = pos[a] / b;
    size_t e = a;
    while (e < k && pos[e] / b == j) ++e;
    HostBlockRef r = h.ref(j);
    r.idx = idx.data() + first + a;
    r.n_idx = static_cast<int32_t>(e - a);
    refs.push_back(r);
    a = e;
  }
  return first;
}

// Exact scores scale * q_g . k of every host entry, from the keys as stored: z [n, G]. K is read
// by channel as the block keeps it (HostBlockRef::k_ld), each channel's rows one contiguous run;
// every dot product still sums its channels in order.
void exact_scores(const HostHead& h, const float* qg, int32_t G, float scale, float* z) {
  const int32_t b = h.blocks.layout.tokens, d = h.blocks.layout.head_dim;
  const DType t = h.blocks.layout.dtype;
  const int64_t es = dtype_size(t);
  thread_local std::vector<float> col, dot;
  col.resize(static_cast<size_t>(b));
  dot.resize(static_cast<size_t>(b) * G);
  for (int32_t j = 0; j < h.count(); ++j) {
    const HostBlockRef r = h.ref(j);
    std::fill_n(dot.begin(), static_cast<size_t>(r.n) * G, 0.0f);
    for (int32_t c = 0; c < d; ++c) {
      cpu::row_to_f32(static_cast<const uint8_t*>(r.k) + c * r.k_ld * es, t, col.data(), r.n);
      for (int32_t i = 0; i < r.n; ++i)
        for (int32_t g = 0; g < G; ++g)
          dot[static_cast<size_t>(i) * G + g] +=
              qg[int64_t{g} * d + c] * col[static_cast<size_t>(i)];
    }
    for (int32_t i = 0; i < r.n; ++i)
      for (int32_t g = 0; g < G; ++g)
        z[static_cast<size_t>(j * b + i) * G + g] = scale * dot[static_cast<size_t>(i) * G + g];
  }
}

}  // namespace

int64_t select_tau(const HostHead& h, const float* qg, int32_t G, float scale, float tau,
                   std::vector<HostBlockRef>& refs, std::vector<int32_t>& idx) {
  const int32_t n = h.host_tokens;
  if (n == 0) return 0;
  thread_local std::vector<float> z;
  thread_local std::vector<int32_t> order;
  z.resize(static_cast<size_t>(n) * G);
  exact_scores(h, qg, G, scale, z.data());
  const size_t k = tau_prefix(z.data(), n, G, tau, order);
  refs_of_positions(h, order.data(), k, refs, idx);
  return static_cast<int64_t>(k);
}

void approx_head_scores(const HostHead& h, const float* qg, int32_t G, float scale, float* z) {
  const BlockAccess& bk = h.blocks;
  const int32_t b = bk.layout.tokens, d = bk.layout.head_dim, bits = bk.layout.key_bits;
  TANDEM_CHECK(bits == 8 || bits == 4, "approximate scores without key codes (--value-offload)");
  for (int32_t j = 0; j < h.count(); ++j) {
    const int32_t id = h.host[static_cast<size_t>(j)];
    approx_scores(bk.host_codes(id, h.g), h.rows_of(j), bk.host_kmin(id) + int64_t{h.g} * d,
                  bk.host_kmax(id) + int64_t{h.g} * d, d, bits, qg, G, scale,
                  z + int64_t{j} * b * G);
  }
}

int64_t select_quantized(const HostHead& h, const float* qg, int32_t G, float scale, float tau,
                         bool all, std::vector<HostBlockRef>& refs, std::vector<int32_t>& idx,
                         std::vector<float>& scores, QuantError* err) {
  const int32_t n = h.host_tokens, b = h.blocks.layout.tokens;
  if (n == 0) return 0;
  thread_local std::vector<float> z, exact;
  thread_local std::vector<int32_t> order;
  z.resize(static_cast<size_t>(n) * G);
  approx_head_scores(h, qg, G, scale, z.data());
  if (err != nullptr) {  // the sampled item: every logit against the exact one
    exact.resize(z.size());
    exact_scores(h, qg, G, scale, exact.data());
    for (size_t i = 0; i < z.size(); ++i) err->add(std::fabs(double(z[i]) - double(exact[i])));
  }
  const size_t first = scores.size();
  if (all) {  // every entry, with its approximate weight
    scores.insert(scores.end(), z.begin(), z.end());
    for (int32_t j = 0; j < h.count(); ++j) {
      HostBlockRef r = h.ref(j);
      r.s = scores.data() + first + static_cast<size_t>(j) * b * G;
      refs.push_back(r);
    }
    return n;
  }
  const size_t k = tau_prefix(z.data(), n, G, tau, order);
  for (size_t a = 0; a < k; ++a) {
    const float* zp = z.data() + static_cast<size_t>(order[a]) * G;
    scores.insert(scores.end(), zp, zp + G);
  }
  // scores is complete: the refs may point into it (their rows in the same order).
  const size_t ref0 = refs.size();
  refs_of_positions(h, order.data(), k, refs, idx);
  for (size_t r = ref0, row = 0; r < refs.size(); row += static_cast<size_t>(refs[r].n_idx), ++r)
    refs[r].s = scores.data() + first + row * G;
  return static_cast<int64_t>(k);
}

}  // namespace tandem
