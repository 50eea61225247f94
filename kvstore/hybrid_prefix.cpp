// HybridKv and the prefix cache: adopting a cached chain, releasing a sequence's chunks into it.
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/simd.h"
#include "kvstore/hybrid_kv.h"
#include "kvstore/hybrid_runner.h"

namespace tandem {

void HybridKv::adopt(std::span<PrefixCache::Entry* const> chain) {
  TANDEM_CHECK(length_ == 0 && entry_of_.empty(), "adopt into a sequence that holds tokens");
  PrefixCache* cache = shared_.cache;
  if (chain.empty()) return;
  TANDEM_CHECK(cache != nullptr, "adopt without a prefix cache");
  const KvShape& sh = shared_.shape;
  const BlockAccess& bk = shared_.blocks;
  const int32_t b = shared_.geo.block, sinks = shared_.geo.sinks, hkv = sh.n_head_kv;
  const int32_t d = sh.head_dim, m = static_cast<int32_t>(chain.size());
  const int32_t total = sinks + m * b;
  TANDEM_CHECK(total <= capacity_, "adopting ", total, " tokens past the capacity ", capacity_);
  // Where `total` tokens live: whole chunks on the host (shared), the rest on the device.
  const int32_t nh = shared_.geo.counts(total).host_tokens / b;
  const int64_t row = bk.row_elems(), es = dtype_size(bk.layout.dtype);
  const int32_t dev_rows = total - nh * b;  // sinks + the window's chunks
  std::vector<float> k(static_cast<size_t>(dev_rows * row)), v(k.size());
  for (int32_t layer = 0; layer < sh.n_layer; ++layer) {
    LayerTable& l = layers_[static_cast<size_t>(layer)];
    for (int32_t j = 0; j < nh; ++j)
      push_host(l, chain[static_cast<size_t>(j)]->host[static_cast<size_t>(layer)]);
    l.host_tokens = nh * b;
    if (dev_rows == 0) continue;
    // The device rows, f32 [dev_rows, Hkv, d]: the sinks (device layout in the entry), then
    // the window's chunks from the host layout (K by channel, V by tiles or rows).
    const std::vector<uint8_t>& sb = chain[0]->sinks;
    const int64_t sink_bytes = int64_t{sinks} * row * es;
    TANDEM_CHECK(static_cast<int64_t>(sb.size()) == 2 * sink_bytes * sh.n_layer,
                 "cached sinks of the wrong size");
    const uint8_t* ks = sb.data() + 2 * sink_bytes * layer;
    cpu::row_to_f32(ks, bk.layout.dtype, k.data(), sinks * row);
    cpu::row_to_f32(ks + sink_bytes, bk.layout.dtype, v.data(), sinks * row);
    for (int32_t j = nh; j < m; ++j) {
      const int32_t id = chain[static_cast<size_t>(j)]->host[static_cast<size_t>(layer)];
      for (int32_t g = 0; g < hkv; ++g)
        for (int32_t t = 0; t < b; ++t) {
          const int64_t dst = (int64_t{sinks + (j - nh) * b + t} * hkv + g) * d;
          bk.read_host_k_row(id, g, t, k.data() + dst);
          bk.read_host_v_row(id, g, t, v.data() + dst);
        }
    }
    RowSource src;
    src.k = k.data();
    src.v = v.data();
    store(layer, src, 0, dev_rows, nullptr);  // positions 0 ..: the sinks, then the window
    shared_.rows.flush();                     // before k and v are refilled for the next layer
  }
  // Every adopted chunk is referenced: the shared host ones, and those copied into the window,
  // whose blocks become the entries' ones when they leave it.
  for (PrefixCache::Entry* e : chain) {
    cache->ref(e);
    entry_of_.push_back(e);
  }
  length_ = total;
}

std::vector<uint8_t> HybridKv::sink_rows() {
  const BlockAccess& bk = shared_.blocks;
  const int32_t sinks = shared_.geo.sinks;
  const int64_t bytes = int64_t{sinks} * bk.row_bytes();
  std::vector<uint8_t> out(static_cast<size_t>(2 * bytes * shared_.shape.n_layer));
  if (sinks == 0) return out;
  for (size_t layer = 0; layer < layers_.size(); ++layer) {
    const uint8_t *k = nullptr, *v = nullptr;
    shared_.rows.read_block(layers_[layer].sink, sinks, k, v);
    std::memcpy(out.data() + 2 * bytes * layer, k, static_cast<size_t>(bytes));
    std::memcpy(out.data() + 2 * bytes * layer + bytes, v, static_cast<size_t>(bytes));
  }
  return out;
}

bool HybridKv::chunk_to_host(int32_t j, std::vector<int32_t>& ids) {
  const BlockAccess& bk = shared_.blocks;
  const int32_t b = shared_.geo.block;
  ids.assign(layers_.size(), -1);
  const bool on_host = static_cast<size_t>(j) < layers_[0].host.size();
  TANDEM_CHECK(static_cast<size_t>(j) >= entry_of_.size() || entry_of_[j] == nullptr,
               "a referenced chunk missing from the cache");
  if (!on_host) {  // a window block: copied into a new host block per layer
    shared_.cache->make_room(static_cast<int64_t>(layers_.size()));
    if (bk.host.free_within_limit() < static_cast<int64_t>(layers_.size())) return false;
  }
  std::vector<float> scratch_maw(static_cast<size_t>(bk.layout.maw_floats()));
  for (size_t layer = 0; layer < layers_.size(); ++layer) {
    LayerTable& l = layers_[layer];
    if (on_host) {
      ids[layer] = l.host[static_cast<size_t>(j)];
      continue;
    }
    const size_t w = static_cast<size_t>(j) - l.host.size();
    TANDEM_CHECK(w < l.window.size() && static_cast<int32_t>(w + 1) * b <= l.window_tokens,
                 "chunk ", j, " is not a full window block");
    const int32_t id = bk.host.alloc();
    TANDEM_CHECK(id >= 0, "host pool without the room it reported");
    clear_digest(id);
    const uint8_t *k = nullptr, *v = nullptr;
    shared_.rows.read_block(l.window[w], b, k, v);
    move_rows(id, scratch_maw.data(), k, v, nullptr);  // the MAW values stay with nobody
    ids[layer] = id;
  }
  return true;
}

void HybridKv::publish(std::span<const int32_t> tokens) {
  TANDEM_CHECK(!shared_.runner->in_step(), "prefix cache changes during a step");
  shared_.runner->reap();  // host jobs of the last step finish writing the blocks first
  PrefixCache* cache = shared_.cache;
  if (cache == nullptr) return;
  const int32_t n = cache->chunks_of(std::min<int64_t>(length_, std::ssize(tokens)));
  std::vector<PrefixCache::Entry*> walk;  // referenced while the chain is built
  std::vector<int32_t> ids;
  uint64_t parent = 0;
  for (int32_t j = 0; j < n; ++j) {
    const uint64_t h = cache->chunk_hash(tokens, j, parent);
    PrefixCache::Entry* e = cache->find(h, parent, tokens, j);
    if (e == nullptr) {
      if (cache->find_hash(h)) break;  // a collision with another prefix: cache no further
      if (!chunk_to_host(j, ids)) break;
      e = cache->insert(h, parent, tokens, j, std::move(ids),
                        j == 0 ? sink_rows() : std::vector<uint8_t>());
      // On the host the block is the entry's now and this sequence shares it; in the window
      // the entry holds a copy of the same bytes, which the block becomes when it leaves the
      // window (evict_oldest). Either way the sequence references the entry.
      if (entry_of_.size() <= static_cast<size_t>(j)) entry_of_.resize(j + 1, nullptr);
      entry_of_[static_cast<size_t>(j)] = e;
      cache->ref(e);
    }
    cache->ref(e);
    walk.push_back(e);
    parent = h;
  }
  // Unreferenced tail first, so that the root is the most recently used.
  for (auto it = walk.rbegin(); it != walk.rend(); ++it) cache->unref(*it);
}

void HybridKv::release(std::span<const int32_t> tokens) {
  publish(tokens);  // which reaps the last step's host jobs first
  free_blocks();
}

}  // namespace tandem
