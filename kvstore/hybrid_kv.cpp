// HybridKv: a sequence's blocks in both tiers; storing, eviction and the MAW values.
#include "kvstore/hybrid_kv.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/maw.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"
#include "kvstore/hybrid_runner.h"
#include "kvstore/key_quant.h"
#include "kvstore/selection.h"

namespace tandem {

HybridKv::HybridKv(HybridShared& shared, int32_t capacity)
    : shared_(shared), capacity_(capacity), layers_(static_cast<size_t>(shared.shape.n_layer)) {
  row_k_.resize(static_cast<size_t>(shared.blocks.row_elems()));
  row_v_.resize(row_k_.size());
  zero_maw_.assign(static_cast<size_t>(shared.shape.n_head_kv), 0.0f);
  if (shared.cfg.similarity_reuse)
    reuse_.assign(static_cast<size_t>(shared.shape.n_layer),
                  ReuseLayer(shared.shape.n_head_kv, shared.shape.n_head_q, shared.cfg.reuse_eta,
                             shared.cfg.reuse_power));
}

HybridKv::~HybridKv() {
  // Host work of an earlier step may still point at these blocks until it is reaped.
  shared_.runner->reap();
  free_blocks();
}

void HybridKv::free_blocks() {
  free_resident();
  for (LayerTable& l : layers_) {
    if (l.sink >= 0) shared_.blocks.device.free(l.sink);
    for (int32_t id : l.window) shared_.blocks.device.free(id);
    for (size_t j = 0; j < l.host.size(); ++j)
      if (j >= entry_of_.size() || entry_of_[j] == nullptr) shared_.blocks.host.free(l.host[j]);
    l = LayerTable();
  }
  for (ReuseLayer& r : reuse_) r.reset(shared_.cfg.reuse_eta, shared_.cfg.reuse_power);
  // Tail first, so that the root ends the most recently used (evicted last).
  for (auto it = entry_of_.rbegin(); it != entry_of_.rend(); ++it)
    if (*it != nullptr) shared_.cache->unref(*it);
  entry_of_.clear();
  length_ = 0;
}

KvStepRunner* HybridKv::step_runner() const { return shared_.runner; }

HostStats HybridKv::host_stats() const {
  if (!shared_.runner->in_step()) shared_.runner->reap();
  return stats_;
}

int64_t HybridKv::device_blocks() const {
  int64_t n = 0;
  for (const LayerTable& l : layers_) n += (l.sink >= 0) + static_cast<int64_t>(l.window.size());
  for (const ResidentLayer& r : resident_) n += static_cast<int64_t>(r.dev.size());
  return n;
}

int64_t HybridKv::host_blocks() const {
  int64_t n = 0;
  for (const LayerTable& l : layers_) n += static_cast<int64_t>(l.host.size());
  return n;
}

int32_t HybridKv::device_tokens(int32_t layer) const {
  return std::min(length_, shared_.geo.sinks) + layers_[static_cast<size_t>(layer)].window_tokens;
}

float HybridKv::maw_of(int32_t layer, int32_t pos, int32_t g) const {
  const KvShape& sh = shared_.shape;
  TANDEM_CHECK(
      layer >= 0 && layer < sh.n_layer && pos >= 0 && pos < length_ && g >= 0 && g < sh.n_head_kv,
      "maw_of layer ", layer, " pos ", pos, " head ", g);
  TANDEM_CHECK(shared_.rows.host_side(), "MAW values live on the host side of the blocks");
  const LayerTable& l = layers_[static_cast<size_t>(layer)];
  const BlockAccess& bk = shared_.blocks;
  const int32_t b = shared_.geo.block, hkv = sh.n_head_kv, sinks = shared_.geo.sinks;
  if (pos < std::min(length_, sinks)) return bk.dev_maw(l.sink)[pos * hkv + g];
  const int32_t h = pos - sinks;
  if (h < l.host_tokens) return l.maw[static_cast<size_t>(h / b)][g * b + h % b];
  const int32_t w = h - l.host_tokens;
  return bk.dev_maw(l.window[static_cast<size_t>(w / b)])[(w % b) * hkv + g];
}

int32_t HybridKv::new_host_block(LayerTable& l) {
  const BlockAccess& bk = shared_.blocks;
  int32_t id = bk.host.alloc();
  if (id < 0 && shared_.cache != nullptr) {  // room made by evicting unreferenced cached chunks
    shared_.cache->make_room(1);
    id = bk.host.alloc();
  }
  TANDEM_REQUIRE(id >= 0, kOutOfMemory, "host KV pool exhausted (--kv-host-gib)");
  clear_digest(id);
  push_host(l, id);
  return id;
}

void HybridKv::clear_digest(int32_t id) const {
  const BlockAccess& bk = shared_.blocks;
  const int64_t n = bk.row_elems();
  std::fill_n(bk.host_kmin(id), n, std::numeric_limits<float>::infinity());
  std::fill_n(bk.host_kmax(id), n, -std::numeric_limits<float>::infinity());
}

void HybridKv::push_host(LayerTable& l, int32_t id) const {
  l.host.push_back(id);
  l.maw.push_back(
      std::make_unique<float[]>(static_cast<size_t>(shared_.blocks.layout.maw_floats())));
}

void HybridKv::quantize_head_rows(int32_t id, int32_t g, int32_t rows) const {
  const BlockAccess& bk = shared_.blocks;
  const int32_t d = shared_.shape.head_dim, bits = bk.layout.key_bits;
  const int64_t cb = bk.layout.code_row_bytes();
  const float* kmin = bk.host_kmin(id) + int64_t{g} * d;
  const float* kmax = bk.host_kmax(id) + int64_t{g} * d;
  float stored[512];
  TANDEM_CHECK(d <= 512, "head_dim ", d);
  for (int32_t t = 0; t < rows; ++t) {
    bk.read_host_k_row(id, g, t, stored);
    quantize_row(stored, kmin, kmax, d, bits, bk.host_codes(id, g) + t * cb);
  }
}

void HybridKv::write_host_row(int32_t id, float* maw_block, int32_t slot, const float* k_row,
                              const float* v_row, const float* maw, bool codes) {
  const BlockAccess& bk = shared_.blocks;
  const int32_t b = shared_.geo.block, d = shared_.shape.head_dim, hkv = shared_.shape.n_head_kv;
  float stored[512];
  TANDEM_CHECK(d <= 512, "head_dim ", d);
  for (int32_t g = 0; g < hkv; ++g) {
    bk.write_host_k_row(id, g, slot, k_row + int64_t{g} * d);
    bk.write_host_v_row(id, g, slot, v_row + int64_t{g} * d);
    maw_block[int64_t{g} * b + slot] = maw[g];
    bk.read_host_k_row(id, g, slot, stored);  // the digest bounds the keys as stored
    float* kmin = bk.host_kmin(id) + int64_t{g} * d;
    float* kmax = bk.host_kmax(id) + int64_t{g} * d;
    // --value-offload: the codes of a block are relative to its digest, so a row that widens it
    // re-codes the rows before it; one inside it is coded alone.
    bool widens = false;
    if (codes && bk.layout.key_bits != 0)
      for (int32_t c = 0; c < d && !widens; ++c)
        widens = stored[c] < kmin[c] || stored[c] > kmax[c];
    digest_add(kmin, kmax, stored, d);
    if (!codes || bk.layout.key_bits == 0) continue;
    if (widens)
      quantize_head_rows(id, g, slot + 1);
    else
      quantize_row(stored, kmin, kmax, d, bk.layout.key_bits,
                   bk.host_codes(id, g) + slot * bk.layout.code_row_bytes());
  }
}

void HybridKv::append_host_row(LayerTable& l, const float* k_row, const float* v_row,
                               const float* maw) {
  if (l.host_tokens % shared_.geo.block == 0) new_host_block(l);
  write_host_row(l.host.back(), l.maw.back().get(), l.host_tokens % shared_.geo.block, k_row, v_row,
                 maw, true);
  ++l.host_tokens;
}

void HybridKv::move_rows(int32_t host_id, float* maw_block, const uint8_t* k, const uint8_t* v,
                         const float* maw) {
  const BlockAccess& bk = shared_.blocks;
  const int32_t hkv = shared_.shape.n_head_kv;
  const int64_t row_bytes = bk.row_bytes(), row = bk.row_elems();
  for (int32_t t = 0; t < shared_.geo.block; ++t) {
    cpu::row_to_f32(k + t * row_bytes, bk.layout.dtype, row_k_.data(), row);
    cpu::row_to_f32(v + t * row_bytes, bk.layout.dtype, row_v_.data(), row);
    write_host_row(host_id, maw_block, t, row_k_.data(), row_v_.data(),
                   maw != nullptr ? maw + int64_t{t} * hkv : zero_maw_.data(), false);
  }
  // --value-offload: the whole block coded once, over its final digest.
  if (bk.layout.key_bits != 0)
    for (int32_t g = 0; g < hkv; ++g) quantize_head_rows(host_id, g, shared_.geo.block);
}

void HybridKv::move_maw(float* maw_block, const float* maw) const {
  const int32_t b = shared_.geo.block, hkv = shared_.shape.n_head_kv;
  for (int32_t t = 0; t < b; ++t)
    for (int32_t g = 0; g < hkv; ++g)
      maw_block[int64_t{g} * b + t] = maw != nullptr ? maw[int64_t{t} * hkv + g] : 0.0f;
}

void HybridKv::evict_oldest(LayerTable& l, LayerJob* job) {
  const int32_t b = shared_.geo.block;
  TANDEM_CHECK(!l.window.empty() && l.window_tokens >= b, "evict from a short window");
  // With a device window every host block is a whole evicted block.
  TANDEM_CHECK(l.host_tokens % b == 0, "evict after a partial host block");
  const BlockAccess& bk = shared_.blocks;
  const int32_t id = l.window.front();
  // A chunk whose copy this sequence published to (or adopted from) the prefix cache takes the
  // cache's host block, the same bytes: only its MAW values move.
  const size_t chunk = l.host.size();
  PrefixCache::Entry* e = chunk < entry_of_.size() ? entry_of_[chunk] : nullptr;
  int32_t host_id = -1;
  if (e != nullptr) {
    host_id = e->host[static_cast<size_t>(&l - layers_.data())];
    push_host(l, host_id);
  } else {
    host_id = new_host_block(l);
  }
  float* maw_block = l.maw.back().get();
  if (job != nullptr) {
    job->moves.push_back(LayerJob::Move{this, id, host_id, maw_block, -1, e != nullptr});
  } else if (e != nullptr) {
    move_maw(maw_block, shared_.rows.host_side() ? bk.dev_maw(id) : nullptr);
  } else {
    const uint8_t *k = nullptr, *v = nullptr;
    // From the host side of the block where there is one (no device read), else downloaded once.
    shared_.rows.read_block(id, b, k, v);
    move_rows(host_id, maw_block, k, v, shared_.rows.host_side() ? bk.dev_maw(id) : nullptr);
  }
  l.host_tokens += b;
  l.window.pop_front();
  l.window_tokens -= b;
  bk.device.free(id);
}

void HybridKv::store(int32_t layer, const RowSource& src, int64_t i0, int64_t n, const float* maw,
                     LayerJob* job) {
  LayerTable& l = layers_[static_cast<size_t>(layer)];
  const int32_t b = shared_.geo.block;
  const int64_t row = shared_.blocks.row_elems();
  TANDEM_CHECK(job == nullptr || (shared_.scatter != nullptr && shared_.geo.window > 0),
               "deferred stores need a device window and device-side copies");
  DeviceRows& rows = job != nullptr ? *shared_.scatter : shared_.rows;
  // A job records the mirror's rows (hgca's host side of the device blocks) for later.
  const bool mirror = job != nullptr && shared_.rows.host_side();
  TANDEM_CHECK(
      (src.k != nullptr && src.v != nullptr) || (!rows.reads_host_rows() && shared_.geo.window > 0),
      "KV rows needed on the host");
  // Row i's MAW values: maw's i-th Hkv floats, or the zeros.
  const int64_t maw_stride = maw == nullptr ? 0 : shared_.shape.n_head_kv;
  if (maw == nullptr) maw = zero_maw_.data();
  BlockPool& device = shared_.blocks.device;
  auto put = [&](int32_t id, int32_t slot, int64_t i) {
    const float* m = maw + (i - i0) * maw_stride;
    rows.put(id, slot, src, i, m);
    if (mirror) job->puts.push_back(LayerJob::Put{this, id, slot, i, m});
  };
  for (int64_t i = i0; i < i0 + n; ++i) {
    const int32_t pos = length_ + static_cast<int32_t>(i - i0);
    if (pos < shared_.geo.sinks) {
      if (l.sink < 0) {
        l.sink = device.alloc();
        TANDEM_REQUIRE(l.sink >= 0, kOutOfMemory, "device KV pool exhausted");
      }
      put(l.sink, pos, i);
      continue;
    }
    if (shared_.geo.window == 0) {
      append_host_row(l, src.k + i * row, src.v + i * row, maw + (i - i0) * maw_stride);
      continue;
    }
    if (l.window_tokens + 1 > shared_.geo.window) evict_oldest(l, job);  // flushes the rows first
    if (l.window_tokens == static_cast<int32_t>(l.window.size()) * b) {
      const int32_t id = device.alloc();
      TANDEM_REQUIRE(id >= 0, kOutOfMemory, "device KV pool exhausted");
      l.window.push_back(id);
    }
    const int32_t slot = l.window_tokens - (static_cast<int32_t>(l.window.size()) - 1) * b;
    put(l.window.back(), slot, i);
    ++l.window_tokens;
  }
}

void HybridKv::update_maw(const LayerSpans& at, const float* q, const float* lse,
                          const float* k_new, float* new_maw) {
  const KvShape& sh = shared_.shape;
  const int32_t G = sh.n_head_q / sh.n_head_kv, d = sh.head_dim, hkv = sh.n_head_kv;
  const BlockAccess& bk = shared_.blocks;
  const float alpha = shared_.cfg.maw_alpha;
  // The query heads pre-scaled, so a score is one dot product.
  q_scaled_.resize(static_cast<size_t>(sh.n_head_q) * d);
  for (size_t i = 0; i < q_scaled_.size(); ++i) q_scaled_[i] = q[i] * sh.scale;
  auto update_block = [&](int32_t id, int32_t rows) {
    cpu::maw_update_rows(bk.mirror_k(id), bk.layout.dtype, rows, hkv, G, d, q_scaled_.data(), lse,
                         alpha, bk.dev_maw(id));
  };
  if (at.sink_rows > 0) update_block(at.sink, at.sink_rows);
  // The window's blocks are independent (each writes its own MAW values): spread over the
  // cores (on the thread that drives the device, or in a host job).
  const int64_t nw = static_cast<int64_t>(at.window.size());
  tandem::parallel_for(int64_t{0}, nw, [&](int64_t i) {
    update_block(at.window[static_cast<size_t>(i)],
                 i + 1 < nw ? shared_.geo.block
                            : at.window_tokens - static_cast<int32_t>(i) * shared_.geo.block);
  });
  // The new token's first observation is its MAW.
  for (int32_t g = 0; g < hkv; ++g)
    new_maw[g] = cpu::maw_prob(q_scaled_.data(), lse, k_new, g, G, d);
}

void HybridKv::observe_prompt(int32_t layer, const float* q, const float* lse, int64_t n) {
  const LayerTable& l = layers_[static_cast<size_t>(layer)];
  const KvShape& sh = shared_.shape;
  const BlockAccess& bk = shared_.blocks;
  const int64_t m = std::min<int64_t>(shared_.cfg.observe, n);
  const int32_t G = sh.n_head_q / sh.n_head_kv, d = sh.head_dim, hkv = sh.n_head_kv;
  const int32_t b = shared_.geo.block, sinks = shared_.geo.sinks;
  const int32_t total = length_ + static_cast<int32_t>(n);
  // Probabilities are relative to all visible keys; rescaled so that uniform attention lands on
  // the 1 / N_device the HGCA threshold is written against.
  const float rescale =
      static_cast<float>(total) / static_cast<float>(std::max(1, device_tokens(layer)));
  auto seed = [&](const float* key, int32_t g, int32_t pos) {
    return cpu::maw_seed(q, lse, n - m, n, sh.n_head_q, G, d, sh.scale, key, g, pos, length_,
                         rescale);
  };
  std::vector<float> krow(static_cast<size_t>(d));
  for (size_t j = 0; j < l.host.size(); ++j) {
    const int32_t id = l.host[j];
    const int32_t rows = std::min<int32_t>(b, l.host_tokens - static_cast<int32_t>(j) * b);
    for (int32_t g = 0; g < hkv; ++g)
      for (int32_t t = 0; t < rows; ++t) {
        bk.read_host_k_row(id, g, t, krow.data());
        l.maw[j][int64_t{g} * b + t] =
            seed(krow.data(), g, sinks + static_cast<int32_t>(j) * b + t);
      }
  }
  auto seed_device = [&](int32_t id, int32_t rows, int32_t pos0) {
    const uint8_t* k = bk.mirror_k(id);
    for (int32_t t = 0; t < rows; ++t) {
      cpu::row_to_f32(k + t * bk.row_bytes(), bk.layout.dtype, row_k_.data(), bk.row_elems());
      for (int32_t g = 0; g < hkv; ++g)
        bk.dev_maw(id)[t * hkv + g] = seed(row_k_.data() + int64_t{g} * d, g, pos0 + t);
    }
  };
  if (l.sink >= 0) seed_device(l.sink, std::min(total, sinks), 0);
  const int32_t first_window_pos = sinks + l.host_tokens;
  for (size_t i = 0; i < l.window.size(); ++i)
    seed_device(l.window[i],
                i + 1 < l.window.size() ? b : l.window_tokens - static_cast<int32_t>(i) * b,
                first_window_pos + static_cast<int32_t>(i) * b);
}

void HybridKv::observe_importance(int32_t layer, const float* q, const float* lse, int64_t n) {
  const LayerTable& l = layers_[static_cast<size_t>(layer)];
  if (l.host_tokens == 0) return;
  const KvShape& sh = shared_.shape;
  const std::vector<double> share = host_mass_share(
      shared_.blocks, l.host, l.host_tokens, shared_.geo.sinks, q, lse, n, shared_.cfg.observe,
      length_, sh.n_head_q, sh.n_head_q / sh.n_head_kv, sh.scale);
  reuse_[static_cast<size_t>(layer)].set_importance(importance_of(share), shared_.cfg.reuse_eta,
                                                    shared_.cfg.reuse_power);
}

void HybridKv::import_kv(Backend& be, int32_t layer, const float* k, const float* v, int32_t n) {
  TANDEM_REQUIRE(n >= 0 && length_ + n <= capacity_, kInvalidArgument, "importing ", n,
                 " tokens into a sequence of ", length_, " exceeds its KV capacity of ", capacity_);
  TANDEM_CHECK(layer >= 0 && layer < shared_.shape.n_layer, "layer ", layer);
  TANDEM_CHECK(!shared_.runner->in_step(), "import during a step");
  shared_.runner->reap();  // host jobs of the last step may still write this sequence's blocks
  (void)be;                // rows go through the store's row strategy (the store's backend)
  RowSource src;
  src.k = k;
  src.v = v;
  store(layer, src, 0, n, nullptr);
  shared_.rows.flush();
}

void HybridKv::advance(int32_t n) {
  TANDEM_CHECK(length_ + n <= capacity_, "advance past capacity");
  length_ += n;
}

}  // namespace tandem
