// Query-similarity reuse (CLO §3.1-3.2): thresholds, aggregation, the importance proxy and the
// kept selections.
#include "kvstore/similarity_reuse.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "kernels/common.h"
#include "kernels/cpu/parallel.h"

namespace tandem {

double reuse_threshold(double eta, double importance, double power) {
  const double lambda = std::pow(std::clamp(importance, 0.0, 1.0), power);
  const double theta =
      lambda * std::acos(std::clamp(eta, -1.0, 1.0)) + (1.0 - lambda) * std::numbers::pi;
  return std::cos(theta);
}

double cosine_similarity(const float* a, const float* b, int32_t d) {
  double ab = 0, aa = 0, bb = 0;
  for (int32_t c = 0; c < d; ++c) {
    ab += double(a[c]) * b[c];
    aa += double(a[c]) * a[c];
    bb += double(b[c]) * b[c];
  }
  if (aa == 0 || bb == 0) return 0.0;
  return ab / std::sqrt(aa * bb);
}

double aggregate_similarity(std::span<const double> sim, std::span<const float> importance) {
  TANDEM_CHECK(sim.size() == importance.size(), "similarities and importances differ in count");
  bool any = false;
  for (float s : importance) any |= s > 0;
  double weight = 0, denom = 0, worst = std::numeric_limits<double>::infinity();
  bool non_positive = false;
  for (size_t i = 0; i < sim.size(); ++i) {
    const double w = any ? double(importance[i]) : 1.0;
    if (!(w > 0)) continue;
    weight += w;
    if (sim[i] <= 0) {
      non_positive = true;
      worst = std::min(worst, sim[i]);
    } else {
      denom += w / sim[i];
    }
  }
  if (non_positive) return worst;
  return denom > 0 ? weight / denom : 0.0;
}

std::vector<double> host_mass_share(const BlockAccess& blocks, std::span<const int32_t> host,
                                    int32_t host_tokens, int32_t first_pos, const float* q,
                                    const float* lse, int64_t n, int64_t m, int32_t q_pos0,
                                    int32_t n_head_q, int32_t group, float scale) {
  const int32_t b = blocks.layout.tokens, d = blocks.layout.head_dim;
  const int32_t hkv = n_head_q / group;
  m = std::clamp<int64_t>(m, 0, n);
  std::vector<double> share(static_cast<size_t>(n_head_q), 0.0);
  if (m == 0 || host_tokens == 0) return share;
  // KV heads are independent: each sums its own query heads' shares.
  tandem::parallel_for(int32_t{0}, hkv, [&](int32_t g) {
    std::vector<float> krow(static_cast<size_t>(d));
    for (int32_t pos = 0; pos < host_tokens; ++pos) {
      const int32_t id = host[static_cast<size_t>(pos / b)];
      blocks.read_host_k_row(id, g, pos % b, krow.data());
      for (int64_t i = n - m; i < n; ++i) {
        if (first_pos + pos > q_pos0 + i) continue;  // not visible to this query
        for (int32_t h = g * group; h < (g + 1) * group; ++h) {
          const float* qh = q + (i * n_head_q + h) * d;
          float dot = 0.0f;
          for (int32_t c = 0; c < d; ++c) dot += qh[c] * krow[static_cast<size_t>(c)];
          share[static_cast<size_t>(h)] +=
              std::exp(double(scale) * dot - double(lse[i * n_head_q + h]));
        }
      }
    }
  });
  for (double& s : share) s = std::min(1.0, s / static_cast<double>(m));
  return share;
}

std::vector<float> importance_of(std::span<const double> share) {
  double top = 0;
  for (double s : share) top = std::max(top, s);
  std::vector<float> out(share.size(), 0.0f);
  if (top > 0)
    for (size_t i = 0; i < share.size(); ++i) out[i] = static_cast<float>(share[i] / top);
  return out;
}

void ReuseHead::keep(const HostHead& h, std::span<const HostBlockRef> refs, const float* qg,
                     int32_t G) {
  const int32_t d = h.blocks.layout.head_dim;
  label.assign(qg, qg + int64_t{G} * d);
  blocks.clear();
  rows.clear();
  // The policies list blocks in ascending order: one pass finds each one's index.
  int32_t j = 0;
  for (const HostBlockRef& r : refs) {
    while (j < h.count() && h.ref(j).k != r.k) ++j;
    TANDEM_CHECK(j < h.count(), "a selected block outside the host blocks");
    KeptBlock kb{j, static_cast<int32_t>(rows.size()), -1};
    if (r.idx != nullptr) {
      kb.count = r.n_idx;
      rows.insert(rows.end(), r.idx, r.idx + r.n_idx);
    }
    blocks.push_back(kb);
  }
  host_tokens = h.host_tokens;
  valid = true;
}

int64_t ReuseHead::replay(const HostHead& h, std::vector<HostBlockRef>& refs,
                          std::vector<int32_t>& idx) const {
  const size_t base = idx.size();
  idx.insert(idx.end(), rows.begin(), rows.end());  // before the refs point into it
  int64_t picked = 0;
  for (const KeptBlock& kb : blocks) {
    HostBlockRef r = h.ref(kb.j);
    if (kb.count >= 0) {
      r.idx = idx.data() + base + static_cast<size_t>(kb.first);
      r.n_idx = kb.count;
    }
    refs.push_back(r);
    picked += r.rows();
  }
  return picked;
}

ReuseLayer::ReuseLayer(int32_t n_head_kv, int32_t n_head_q, double eta, double power)
    : heads(static_cast<size_t>(n_head_kv)),
      importance(static_cast<size_t>(n_head_q), 1.0f),
      threshold(static_cast<size_t>(n_head_kv), 0.0) {
  thresholds(eta, power);
}

void ReuseLayer::set_importance(std::span<const float> s, double eta, double power) {
  TANDEM_CHECK(s.size() == importance.size(), "importance of ", s.size(), " heads, not ",
               importance.size());
  importance.assign(s.begin(), s.end());
  thresholds(eta, power);
  measured = true;
}

void ReuseLayer::thresholds(double eta, double power) {
  const size_t G = importance.size() / heads.size();
  // A KV head is as important as its most important query head (the conservative choice).
  for (size_t g = 0; g < heads.size(); ++g) {
    float top = 0;
    for (size_t h = g * G; h < (g + 1) * G; ++h) top = std::max(top, importance[h]);
    threshold[g] = reuse_threshold(eta, top, power);
  }
}

void ReuseLayer::reset(double eta, double power) {
  for (ReuseHead& h : heads) h = ReuseHead();
  std::fill(importance.begin(), importance.end(), 1.0f);
  thresholds(eta, power);
  measured = false;
}

bool ReuseLayer::hit(int32_t g, const float* qg, int32_t G, int32_t d, int32_t host_tokens) const {
  const ReuseHead& h = heads[static_cast<size_t>(g)];
  if (!h.valid || h.host_tokens != host_tokens) return false;
  double sim[64];
  TANDEM_CHECK(G <= 64, "a group of ", G, " query heads");
  for (int32_t i = 0; i < G; ++i)
    sim[i] = cosine_similarity(qg + int64_t{i} * d, h.label.data() + int64_t{i} * d, d);
  const std::span<const float> w(importance.data() + int64_t{g} * G, static_cast<size_t>(G));
  return aggregate_similarity(std::span<const double>(sim, static_cast<size_t>(G)), w) >=
         threshold[static_cast<size_t>(g)];
}

}  // namespace tandem
