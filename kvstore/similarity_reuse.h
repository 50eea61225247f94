// Query-similarity reuse of host selections (CLO §3.1-3.2, --similarity-reuse): per (sequence,
// layer, KV head) the selection a query-dependent policy (topk, tau) made is kept with its query
// label, the group's G query heads. A later decode query whose cosine similarity to the label,
// aggregated over the group by Eq. 10, reaches the KV head's threshold (Eq. 7-9) reuses that
// selection instead of selecting again; otherwise the policy selects afresh and the label and
// selection are replaced. A selection is only reused over the host entries it was made for: when
// tokens have reached the host since (a window block evicted), the lookup is a miss.
//
// Head importance (CLO takes DuoAttention's trained scores) is measured at run time: per query
// head, the share of its softmax mass that the prompt's last queries put on the host entries (the
// tokens outside the sinks and the device window), divided by the layer's largest share.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstore/block_access.h"
#include "kvstore/selection.h"

namespace tandem {

// Eq. 7-9: tau_i = cos(lambda * arccos(eta) + (1 - lambda) * pi), lambda = s^p (s clamped to
// [0, 1]). s = 1 gives eta, s = 0 gives -1 (always reused).
double reuse_threshold(double eta, double importance, double power);

// cos(a, b) over d floats, accumulated in float64; 0 when either vector is zero.
double cosine_similarity(const float* a, const float* b, int32_t d);

// Eq. 10: the importance-weighted harmonic mean of the query heads' similarities,
// sum(s_i) / sum(s_i / sim_i). Heads of importance 0 do not count (all 0: every head weighs 1).
// The harmonic mean is only defined for positive similarities: when a counted head has sim <= 0
// the result is the smallest such sim (the conservative end, below any positive threshold).
double aggregate_similarity(std::span<const double> sim, std::span<const float> importance);

// Per query head (Hq of them) of one layer: the softmax mass the last m of a prompt chunk's n
// queries put on the host entries, averaged over those queries. q [n, Hq, d] and lse [n, Hq] (the
// log-sum-exp over every key the query saw) are host memory; query i is at position q_pos0 + i;
// host entry t at position first_pos + t (entries after a query are not visible to it). The host
// entries are blocks `host` (oldest first) holding host_tokens rows.
std::vector<double> host_mass_share(const BlockAccess& blocks, std::span<const int32_t> host,
                                    int32_t host_tokens, int32_t first_pos, const float* q,
                                    const float* lse, int64_t n, int64_t m, int32_t q_pos0,
                                    int32_t n_head_q, int32_t group, float scale);

// The importance proxy: share / max share of the layer (all 0 when the maximum is 0).
std::vector<float> importance_of(std::span<const double> share);

// One block of a kept selection: block j of the host list (its index, not its id: ids may change
// when the prefix cache takes a chunk over, positions do not), all its rows (count < 0) or `count`
// rows listed in ReuseHead::rows from `first`.
struct KeptBlock {
  int32_t j = 0, first = 0, count = -1;
};

// One (sequence, layer, KV head)'s kept selection.
struct ReuseHead {
  bool valid = false;
  int32_t host_tokens = 0;   // host entries when the selection was made
  std::vector<float> label;  // the query it was made for, [G, d]
  std::vector<KeptBlock> blocks;
  std::vector<int32_t> rows;
  // Keeps the fresh selection refs (made by a policy over h for the query qg [G, d]).
  void keep(const HostHead& h, std::span<const HostBlockRef> refs, const float* qg, int32_t G);
  // Appends the kept selection to refs (rows into idx, which refs point into; not grown
  // afterwards); returns the rows.
  int64_t replay(const HostHead& h, std::vector<HostBlockRef>& refs,
                 std::vector<int32_t>& idx) const;
};

// One (sequence, layer)'s reuse state: the KV heads' kept selections and the thresholds and
// query-head weights of the lookups (importance 1 until a prompt measured it).
struct ReuseLayer {
  std::vector<ReuseHead> heads;   // [Hkv]
  std::vector<float> importance;  // [Hq]: the query heads' importance (the weights of Eq. 10)
  std::vector<double> threshold;  // [Hkv]: Eq. 7-9 of the group's largest importance
  bool measured = false;          // importance measured by a prompt (else all 1)

  ReuseLayer(int32_t n_head_kv, int32_t n_head_q, double eta, double power);
  // New importance [Hq] and the thresholds it gives.
  void set_importance(std::span<const float> s, double eta, double power);
  // Forgets every kept selection and the measured importance (a released sequence).
  void reset(double eta, double power);
  // Whether KV head g's kept selection serves the query qg [G, d] over host_tokens host entries.
  bool hit(int32_t g, const float* qg, int32_t G, int32_t d, int32_t host_tokens) const;
  // One decode lookup of KV head h.g for the query qg [G, d] over the host entries h, refs and
  // idx empty: a hit appends the kept selection; a miss runs select() (which appends a fresh
  // selection to them and returns its rows) and keeps it with qg as its label. picked receives
  // the rows; returns whether it hit.
  template <typename Select>
  bool pick(const HostHead& h, const float* qg, int32_t G, std::vector<HostBlockRef>& refs,
            std::vector<int32_t>& idx, int64_t& picked, Select&& select) {
    ReuseHead& kept = heads[static_cast<size_t>(h.g)];
    if (hit(h.g, qg, G, h.blocks.layout.head_dim, h.host_tokens)) {
      picked = kept.replay(h, refs, idx);
      return true;
    }
    picked = select();
    kept.keep(h, refs, qg, G);
    return false;
  }

 private:
  void thresholds(double eta, double power);  // from importance
};

}  // namespace tandem
