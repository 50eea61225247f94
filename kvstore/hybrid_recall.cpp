// topk's accounting of a layer's host batch: the CPU compute ratio and --device-budget's recall
// of the resident set (ScoutAttention §3.4; kvstore/resident.h).
#include <algorithm>

#include "kvstore/hybrid_runner.h"

namespace tandem {

void HybridRunner::account_topk(int32_t layer) {
  Slot& slot = slots_[static_cast<size_t>(layer)];
  const KvConfig& cfg = sh_.cfg;
  const bool budget_on = cfg.device_budget > 0;
  std::vector<float> score;
  std::vector<uint8_t> in_union, resident;
  // A sequence's items are its KV heads, consecutive (submit).
  for (size_t a = 0; a < slot.picks.size();) {
    const size_t seq = slot.picks[a].seq;
    size_t e = a;
    while (e < slot.picks.size() && slot.picks[e].seq == seq) ++e;
    const LayerSpans& spans = plan_.seqs[seq].layers[static_cast<size_t>(layer)];
    HybridKv& kv = *seqs_[seq].kv;
    // The ratio's denominator: topk's budget, or every host token when there are fewer.
    const int64_t budget =
        std::min<int64_t>(int64_t{cfg.topk_blocks} * sh_.geo.block, spans.host_tokens);
    if (budget == 0) {
      a = e;
      continue;
    }
    double ratio = 0;
    for (size_t i = a; i < e; ++i)
      ratio += static_cast<double>(slot.picked[i]) / static_cast<double>(budget);
    ratio /= static_cast<double>(e - a);
    HostStats& st = kv.stats();
    for (HostStats* t : {&st, &sh_.totals}) {
      t->ratio_sum += ratio;
      ++t->ratio_count;
    }
    if (!budget_on || !kv.has_reserve()) {
      a = e;
      continue;
    }
    ResidentLayer& r = kv.resident(layer);
    if (r.chosen) {
      ++r.steps;
      r.ratio_sum += ratio;
      r.ratio_last = ratio;
    }
    const size_t nb = spans.host.size();
    const bool due = recall_due(cfg, r);
    // Slots reserved since the last choice (the host grew) are filled at once, the blocks in
    // place kept: not a recall, and whatever the interval.
    const size_t filled = static_cast<size_t>(
        std::count_if(r.host.begin(), r.host.end(), [](int32_t j) { return j >= 0; }));
    const bool fill = !due && filled < r.host.size() && filled < nb;
    if (due || fill) {
      // The step's top-k bounds summed over KV heads, and the union of the heads' selections,
      // over the host blocks the step selected from (blocks evicted since come at a later recall).
      score.assign(nb, 0.0f);
      in_union.assign(nb, 0);
      resident.assign(nb, 0);
      for (size_t i = a; i < e; ++i) {
        const std::vector<float>& b = slot.bounds[i];
        for (size_t j = 0; j < nb && j < b.size(); ++j) score[j] += b[j];
        for (int32_t j : slot.chosen[i])
          if (static_cast<size_t>(j) < nb) in_union[static_cast<size_t>(j)] = 1;
      }
      for (int32_t j : r.host)
        if (j >= 0 && static_cast<size_t>(j) < nb) resident[static_cast<size_t>(j)] = 1;
      // A fill ranks the resident blocks first (all kept), then the union, then the rest.
      const int32_t slots = static_cast<int32_t>(r.dev.size());
      const std::vector<int32_t> set = due ? choose_recall(score, in_union, resident, slots)
                                           : choose_recall(score, resident, in_union, slots);
      kv.place_resident(sh_.backend, layer, assign_slots(r.host, set));
      if (fill) {
        a = e;
        continue;
      }
      if (r.chosen)
        for (HostStats* t : {&st, &sh_.totals}) {
          ++t->recalls;
          t->recall_steps += r.steps;
        }
      r.chosen = true;
      r.steps = 0;
      r.ratio_sum = r.ratio_last = 0;
    }
    a = e;
  }
}

}  // namespace tandem
