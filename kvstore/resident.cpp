// The resident set of --device-budget: its choices (kvstore/resident.h) and HybridKv's device
// blocks and copies for it.
#include "kvstore/resident.h"

#include <algorithm>
#include <numeric>

#include "kvstore/hybrid_kv.h"
#include "kvstore/selection.h"

namespace tandem {

int32_t resident_reserve(const KvConfig& cfg, int64_t length) {
  const int32_t b = resident_blocks(cfg);
  if (b == 0) return 0;
  return static_cast<int32_t>(
      std::min<int64_t>(b, TableGeometry(cfg).counts(std::max<int64_t>(length, 0)).host_blocks));
}

void summed_bounds(const BlockAccess& blocks, std::span<const int32_t> host, const float* q,
                   int32_t n_head_kv, int32_t G, std::vector<float>& out) {
  const int32_t d = blocks.layout.head_dim;
  out.assign(host.size(), 0.0f);
  for (size_t j = 0; j < host.size(); ++j)
    for (int32_t g = 0; g < n_head_kv; ++g)
      out[j] +=
          quest_bound(q + int64_t{g} * G * d, G, d, blocks.host_kmin(host[j]) + int64_t{g} * d,
                      blocks.host_kmax(host[j]) + int64_t{g} * d);
}

std::vector<int32_t> choose_initial(std::span<const float> score, int32_t r) {
  return top_k_indices(score, r);
}

std::vector<int32_t> choose_recall(std::span<const float> score, std::span<const uint8_t> in_union,
                                   std::span<const uint8_t> resident, int32_t r) {
  std::vector<int32_t> order(score.size());
  std::iota(order.begin(), order.end(), 0);
  // 0: in the union, 1: resident already, 2: the rest.
  auto tier = [&](int32_t j) {
    const size_t u = static_cast<size_t>(j);
    return in_union[u] != 0 ? 0 : resident[u] != 0 ? 1 : 2;
  };
  const size_t n = std::min(order.size(), static_cast<size_t>(std::max(r, 0)));
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](int32_t a, int32_t b) {
                      const int ta = tier(a), tb = tier(b);
                      if (ta != tb) return ta < tb;
                      const float sa = score[static_cast<size_t>(a)];
                      const float sb = score[static_cast<size_t>(b)];
                      return sa > sb || (sa == sb && a < b);
                    });
  order.resize(n);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<int32_t> assign_slots(std::vector<int32_t>& slots, std::span<const int32_t> wanted) {
  std::vector<uint8_t> keep(slots.size(), 0);
  std::vector<int32_t> fresh;
  for (int32_t j : wanted) {
    const auto it = std::find(slots.begin(), slots.end(), j);
    if (it != slots.end())
      keep[static_cast<size_t>(it - slots.begin())] = 1;
    else
      fresh.push_back(j);
  }
  std::vector<int32_t> copies;
  size_t next = 0;
  for (size_t s = 0; s < slots.size(); ++s) {
    if (keep[s]) continue;
    slots[s] = next < fresh.size() ? fresh[next++] : -1;
    if (slots[s] >= 0) copies.push_back(static_cast<int32_t>(s));
  }
  return copies;
}

bool recall_due(const KvConfig& cfg, const ResidentLayer& r) {
  if (r.dev.empty()) return false;
  if (!r.chosen) return true;
  if (cfg.recall_interval == KvConfig::kRecallAuto)
    return r.steps > 0 && (r.ratio_sum + r.ratio_last) / (r.steps + 1) > cfg.recall_threshold;
  return cfg.recall_interval > 0 && r.steps >= cfg.recall_interval;
}

// ---- HybridKv's side ----

void HybridKv::reserve_resident(int32_t blocks) {
  TANDEM_CHECK(!shared_.blocks.device.mirrored(), "resident blocks on a mirrored device pool");
  resident_.resize(static_cast<size_t>(shared_.shape.n_layer));
  for (ResidentLayer& r : resident_)
    for (int32_t i = 0; i < blocks; ++i) {
      const int32_t id = shared_.blocks.device.alloc();
      // The step's plan counted these blocks before it started.
      TANDEM_CHECK(id >= 0, "device pool exhausted reserving the resident set");
      r.dev.push_back(id);
      r.host.push_back(-1);  // empty until a recall or a fill (kvstore/hybrid_recall.cpp)
    }
}

int64_t HybridKv::place_resident(Backend& be, int32_t layer, std::span<const int32_t> slots) {
  ResidentLayer& r = resident_[static_cast<size_t>(layer)];
  const LayerTable& l = layers_[static_cast<size_t>(layer)];
  const BlockAccess& bk = shared_.blocks;
  // The device block gets K then V as [Hkv, block, d] each (its MAW part unused), which the
  // device part reads through strides: K transposed back to rows from the host block's columns,
  // V from its tiles (as the host block holds it where it is by rows), into the store's host
  // staging first. Two copies per block, queued after the ops before them on a device; upload
  // lets its source be reused once it returns, so one block of staging each serves them all
  // (HostSpanStaging).
  const DType dt = bk.layout.dtype;
  const int64_t bytes = bk.layout.dev_kv_bytes(), elems = bytes / dtype_size(dt);
  uint8_t* k_rows = HostSpanStaging::reserve(shared_.staging.host_k, bytes);
  for (int32_t s : slots) {
    const int32_t j = r.host[static_cast<size_t>(s)];
    TANDEM_CHECK(j >= 0 && j < static_cast<int32_t>(l.host.size()), "resident slot ", s,
                 " holds no host block");
    const int32_t id = l.host[static_cast<size_t>(j)];
    uint8_t* dev = static_cast<uint8_t*>(bk.device.data(r.dev[static_cast<size_t>(s)]));
    bk.host_k_as_rows(id, k_rows);
    be.upload(TensorView(k_rows, dt, {elems}, shared_.staging.host_k.view().memory),
              TensorView(dev, dt, {elems}, bk.device.memory()));
    be.upload(shared_.staging.v_rows(bk, id),
              TensorView(dev + bytes, dt, {elems}, bk.device.memory()));
  }
  const int64_t copied = static_cast<int64_t>(slots.size()) * 2 * bytes;
  for (HostStats* st : {&stats_, &shared_.totals}) {
    st->recall_blocks += static_cast<int64_t>(slots.size());
    st->recall_bytes += copied;
  }
  return copied;
}

void HybridKv::choose_resident(Backend& be, int32_t layer, const float* q) {
  ResidentLayer& r = resident_[static_cast<size_t>(layer)];
  const LayerTable& l = layers_[static_cast<size_t>(layer)];
  const KvShape& sh = shared_.shape;
  thread_local std::vector<float> score;
  summed_bounds(shared_.blocks, l.host, q, sh.n_head_kv, sh.n_head_q / sh.n_head_kv, score);
  std::fill(r.host.begin(), r.host.end(), -1);
  const std::vector<int32_t> set = choose_initial(score, static_cast<int32_t>(r.dev.size()));
  place_resident(be, layer, assign_slots(r.host, set));
  r.chosen = true;
  r.steps = 0;
  r.ratio_sum = r.ratio_last = 0;
}

void HybridKv::free_resident() {
  for (ResidentLayer& r : resident_)
    for (int32_t id : r.dev) shared_.blocks.device.free(id);
  resident_.clear();
}

}  // namespace tandem
