// HybridKv: the two-tier KV cache of one sequence and the hybrid attention over it.
#include "kvstore/hybrid_kv.h"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/simd.h"
#include "kvstore/selection.h"

namespace tandem {

HybridKv::HybridKv(Backend& backend, const KvShape& shape, const KvConfig& cfg,
                   const BlockLayout& layout, int32_t capacity, BlockPool& device, BlockPool& host,
                   HostAttention& host_attn, HostSpanStaging& staging)
    : backend_(backend),
      shape_(shape),
      cfg_(cfg),
      layout_(layout),
      capacity_(capacity),
      device_(device),
      host_(host),
      host_attn_(host_attn),
      layers_(static_cast<size_t>(shape.n_layer)),
      sinks_(cfg.window == 0 ? 0 : std::min(cfg.sinks, cfg.block)),
      staging_(staging) {
  const int64_t qd = int64_t{shape.n_head_q} * shape.head_dim, part = qd + shape.n_head_q;
  partials_ = BackendBuffer::host(backend, DType::kF32, {shape.n_layer, part});
  queries_ = BackendBuffer::host(backend, DType::kF32, {shape.n_layer, qd});
  flags_ = BackendBuffer::host(backend, DType::kI32, {2, shape.n_layer});
  std::fill_n(flags_.as<int32_t>(), 2 * shape.n_layer, 0);
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    l.host_o = partials_.as<float>() + static_cast<int64_t>(i) * part;
    l.host_lse = l.host_o + qd;
    l.host_q = queries_.as<float>() + static_cast<int64_t>(i) * qd;
    l.refs.resize(static_cast<size_t>(shape.n_head_kv));
    l.idx.resize(static_cast<size_t>(shape.n_head_kv));
  }
  new_maw_ = Buffer(DType::kF32, {shape.n_head_kv});
  row_buf_.resize(static_cast<size_t>(shape.n_head_kv) * shape.head_dim);
}

HybridKv::~HybridKv() {
  for (Layer& l : layers_) {
    for (const auto& t : {l.ticket, l.merged}) {
      if (!t) continue;
      try {
        // A batch whose query the device has not delivered yet (a step that failed half way)
        // may never start: finished without running, its flag raised for a device that waits.
        host_attn_.cancel(*t);
        host_attn_.wait(*t);
      } catch (...) {  // the sequence is going away; its partial is not needed
      }
    }
    if (l.sink >= 0) device_.free(l.sink);
    for (int32_t id : l.window) device_.free(id);
    for (int32_t id : l.host) host_.free(id);
  }
}

// ---- block access ---------------------------------------------------------------------------

TensorView HybridKv::dev_k(int32_t id, int32_t rows) const {
  return TensorView(device_.data(id), layout_.dtype, {rows, layout_.n_head_kv, layout_.head_dim},
                    device_.memory());
}
TensorView HybridKv::dev_v(int32_t id, int32_t rows) const {
  return TensorView(static_cast<uint8_t*>(device_.data(id)) + layout_.dev_kv_bytes(), layout_.dtype,
                    {rows, layout_.n_head_kv, layout_.head_dim}, device_.memory());
}
uint8_t* HybridKv::mirror_k(int32_t id) const {
  return static_cast<uint8_t*>(device_.host_data(id));
}
uint8_t* HybridKv::mirror_v(int32_t id) const { return mirror_k(id) + layout_.dev_kv_bytes(); }
float* HybridKv::dev_maw(int32_t id) const {
  return reinterpret_cast<float*>(mirror_k(id) + 2 * layout_.dev_kv_bytes());
}

void HybridKv::upload_rows(int32_t id, int32_t row0, int32_t rows) {
  const int64_t row = int64_t{layout_.n_head_kv} * layout_.head_dim;
  const int64_t at = int64_t{row0} * row * dtype_size(layout_.dtype);
  const MemoryKind mem = device_.memory();
  auto* dev = static_cast<uint8_t*>(device_.data(id));
  backend_.upload(TensorView(mirror_k(id) + at, layout_.dtype, {rows * row}),
                  TensorView(dev + at, layout_.dtype, {rows * row}, mem));
  backend_.upload(TensorView(mirror_v(id) + at, layout_.dtype, {rows * row}),
                  TensorView(dev + layout_.dev_kv_bytes() + at, layout_.dtype, {rows * row}, mem));
}
uint8_t* HybridKv::host_k(int32_t id) const { return static_cast<uint8_t*>(host_.data(id)); }
uint8_t* HybridKv::host_v(int32_t id) const { return host_k(id) + layout_.dev_kv_bytes(); }
float* HybridKv::host_maw(int32_t id) const {
  return reinterpret_cast<float*>(host_k(id) + 2 * layout_.dev_kv_bytes());
}
float* HybridKv::host_kmin(int32_t id) const {
  return host_maw(id) + int64_t{layout_.tokens} * layout_.n_head_kv;
}
float* HybridKv::host_kmax(int32_t id) const {
  return host_kmin(id) + int64_t{layout_.n_head_kv} * layout_.head_dim;
}

float HybridKv::maw_of(int32_t layer, int32_t pos, int32_t g) const {
  TANDEM_CHECK(layer >= 0 && layer < shape_.n_layer && pos >= 0 && pos < length_ && g >= 0 &&
                   g < shape_.n_head_kv,
               "maw_of layer ", layer, " pos ", pos, " head ", g);
  const Layer& l = layers_[static_cast<size_t>(layer)];
  const int32_t b = cfg_.block, hkv = shape_.n_head_kv;
  if (pos < std::min(length_, sinks_)) return dev_maw(l.sink)[pos * hkv + g];
  const int32_t h = pos - sinks_;
  if (h < l.host_tokens) return host_maw(l.host[static_cast<size_t>(h / b)])[g * b + h % b];
  const int32_t w = h - l.host_tokens;
  return dev_maw(l.window[static_cast<size_t>(w / b)])[(w % b) * hkv + g];
}

int32_t HybridKv::device_tokens(const Layer& l) const {
  return std::min(length_, sinks_) + l.window_tokens;
}

// ---- accounting -------------------------------------------------------------------------------

int64_t HybridKv::device_blocks() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += (l.sink >= 0) + static_cast<int64_t>(l.window.size());
  return n;
}

int64_t HybridKv::host_blocks() const {
  int64_t n = 0;
  for (const Layer& l : layers_) n += static_cast<int64_t>(l.host.size());
  return n;
}

int64_t HybridKv::device_blocks_for(const KvConfig& cfg, int32_t n_layer, int32_t tokens) {
  if (tokens <= 0 || cfg.window == 0) return 0;
  const int64_t b = cfg.block, sinks = std::min(cfg.sinks, cfg.block);
  int64_t per_layer = sinks > 0 ? 1 : 0;
  const int64_t u = tokens - sinks;
  if (u > 0) {
    const int64_t evicted = u > cfg.window ? (u - cfg.window + b - 1) / b : 0;
    per_layer += (u - evicted * b + b - 1) / b;
  }
  return per_layer * n_layer;
}

// ---- the step ---------------------------------------------------------------------------------

void HybridKv::begin_step(bool decode, bool observe) {
  // Batches merged on a device in an earlier step: done by now (the host read that step's logits
  // or tokens back after the merges), so this frees their tickets without blocking, and reports
  // an error one of them raised (its partial was NaN, so were that step's logits).
  for (Layer& l : layers_) {
    if (!l.merged) continue;
    const HostAttention::Ticket t = *l.merged;
    l.merged.reset();
    host_attn_.wait(t);
  }
  decode_ = decode;
  observe_ = observe;
}

bool HybridKv::wants_prefetch() const { return decode_ && cfg_.cpu_attn != CpuAttnMode::kParallel; }

bool HybridKv::prefetch_oracle() const { return cfg_.cpu_attn == CpuAttnMode::kAheadOracle; }

void HybridKv::prefetch(Backend& backend, int32_t layer, const TensorView& q_pred) {
  Layer& l = layers_[static_cast<size_t>(layer)];
  TANDEM_CHECK(!l.ticket, "prefetch of layer ", layer, " while one is in flight");
  if (l.host_tokens == 0) return;
  // The host reads the predicted query only where the selection needs it (or reading it costs
  // nothing); otherwise the backend hands it to the workers, and this thread goes on.
  const bool read = selection_reads_query() || backend.host_accessible();
  submit_host(backend, l, layer, q_pred, read ? host_readable(backend, q_pred, q_stage_) : nullptr);
}

TensorView HybridKv::query_flag(int32_t layer) const {
  return TensorView(flags_.as<int32_t>() + layer, DType::kI32, {1}, flags_.view().memory);
}

TensorView HybridKv::partial_flag(int32_t layer) const {
  return TensorView(flags_.as<int32_t>() + shape_.n_layer + layer, DType::kI32, {1},
                    flags_.view().memory);
}

AttnPartial HybridKv::scratch(int64_t n) {
  if (n > tmp_rows_) {
    tmp_o_ = BackendBuffer(backend_, DType::kF32, {n, shape_.n_head_q, shape_.head_dim});
    tmp_lse_ = BackendBuffer(backend_, DType::kF32, {n, shape_.n_head_q});
    tmp_rows_ = n;
  }
  return AttnPartial{tmp_o_.view().slice(0, n), tmp_lse_.view().slice(0, n)};
}

void HybridKv::add_span(Backend& be, const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& q_pos, int64_t k_pos0, const AttnPartial& out,
                        bool& first) {
  if (first) {
    be.attention(q, k, v, q_pos, k_pos0, shape_.scale, out);
    first = false;
    return;
  }
  const AttnPartial tmp = scratch(q.dim(0));
  be.attention(q, k, v, q_pos, k_pos0, shape_.scale, tmp);
  be.merge(out, tmp);
}

void HybridKv::device_partial(Backend& be, Layer& l, const TensorView& q, const TensorView& k,
                              const TensorView& v, const TensorView& q_pos,
                              const AttnPartial& out) {
  bool first = true;
  // Every stored device token precedes every new query, so k_pos0 = 0 leaves them all visible.
  const int32_t n_sink = std::min(length_, sinks_);
  if (n_sink > 0)
    add_span(be, q, dev_k(l.sink, n_sink), dev_v(l.sink, n_sink), q_pos, 0, out, first);
  if (!l.window.empty()) {
    // The window's blocks in one paged call: the device pool is one chunk, so block id starts
    // id * block_bytes after block 0.
    const int64_t es = dtype_size(layout_.dtype);
    TANDEM_CHECK(!device_.growable() && device_.block_bytes() % es == 0,
                 "paged device window needs one fixed chunk of whole elements");
    page_offsets_.clear();
    for (int32_t id : l.window) page_offsets_.push_back(id * (device_.block_bytes() / es));
    const KvPages pages{page_offsets_.data(), static_cast<int64_t>(page_offsets_.size()),
                        cfg_.block};
    AttnPartial part = first ? out : scratch(q.dim(0));
    be.attention_paged(q, dev_k(0, l.window_tokens), dev_v(0, l.window_tokens), pages, q_pos, 0,
                       shape_.scale, part);
    if (!first) be.merge(out, part);
    first = false;
  }
  add_span(be, q, k, v, q_pos, length_, out, first);  // the step's own tokens, causal
}

void HybridKv::host_partial_dense(Backend& be, Layer& l, const TensorView& q,
                                  const TensorView& q_pos, const AttnPartial& out) {
  if (l.host.empty()) return;
  const int64_t b = cfg_.block, d = shape_.head_dim, hkv = shape_.n_head_kv;
  const int64_t es = dtype_size(layout_.dtype), elems = hkv * b * d;  // one block's K (or V)
  const int64_t nb = static_cast<int64_t>(l.host.size());
  // Host blocks are [head][token][channel]: view them as [token, head, channel] by strides, the
  // pages at their own addresses (host-accessible backend) or uploaded one after the other into
  // the staging span (device backend); then all host entries in one paged call.
  TensorView kv(host_k(l.host[0]), layout_.dtype, {l.host_tokens, hkv, d}, host_.memory());
  kv.stride = {d, b * d, 1, 0};
  TensorView vv = kv;
  vv.data = host_v(l.host[0]);
  page_offsets_.resize(static_cast<size_t>(nb));
  if (be.host_accessible()) {
    for (int64_t j = 0; j < nb; ++j) {
      const int64_t bytes = host_k(l.host[static_cast<size_t>(j)]) - host_k(l.host[0]);
      TANDEM_CHECK(bytes % es == 0, "host blocks not element-aligned");
      page_offsets_[static_cast<size_t>(j)] = bytes / es;
    }
  } else {
    if (staging_.elems < nb * elems) {
      const int64_t cap = std::max(nb * elems, staging_.elems * 3 / 2);
      staging_.k = BackendBuffer();  // free the old span before taking the new one
      staging_.v = BackendBuffer();
      staging_.elems = 0;
      staging_.k = BackendBuffer(backend_, layout_.dtype, {cap});
      staging_.v = BackendBuffer(backend_, layout_.dtype, {cap});
      staging_.elems = cap;
    }
    for (int64_t j = 0; j < nb; ++j) {
      const size_t id = static_cast<size_t>(l.host[static_cast<size_t>(j)]);
      be.upload(TensorView(host_k(static_cast<int32_t>(id)), layout_.dtype, {elems}),
                staging_.k.view().slice(j * elems, (j + 1) * elems));
      be.upload(TensorView(host_v(static_cast<int32_t>(id)), layout_.dtype, {elems}),
                staging_.v.view().slice(j * elems, (j + 1) * elems));
      page_offsets_[static_cast<size_t>(j)] = j * elems;
    }
    kv.data = staging_.k.view().data;
    vv.data = staging_.v.view().data;
    kv.memory = vv.memory = staging_.k.view().memory;
  }
  const KvPages pages{page_offsets_.data(), nb, cfg_.block};
  const AttnPartial part = scratch(q.dim(0));  // out already holds the device partial
  be.attention_paged(q, kv, vv, pages, q_pos, 0, shape_.scale, part);
  be.merge(out, part);
}

void HybridKv::submit_host(Backend& be, Layer& l, int32_t layer, const TensorView& q_in,
                           const float* qh) {
  const int32_t G = shape_.n_head_q / shape_.n_head_kv, d = shape_.head_dim, b = cfg_.block;
  TANDEM_CHECK(qh != nullptr || !selection_reads_query(), "topk selection needs the query");
  // Buffers of the layer are reused batch after batch: the query buffer and the partial are
  // written (by the host here, by the backend's copy, by the workers once the query has landed)
  // only after the merge of the layer's previous batch has run, which read the partial after
  // that batch's workers were done with the query. The host path follows host_readable, which
  // on a device backend waited for every op queued before, that merge included; the backend's
  // copy is queued after that merge.
  const uint32_t seq = ++l.submitted;
  const int64_t qn = int64_t{shape_.n_head_q} * d;
  HostAttnStart start;
  if (qh != nullptr) {
    std::copy_n(qh, qn, l.host_q);
  } else {
    be.copy(q_in.reshape({1, shape_.n_head_q, d}),
            TensorView(l.host_q, DType::kF32, {1, shape_.n_head_q, d}, queries_.view().memory));
    const TensorView qf = query_flag(layer);
    be.raise_host_flag(qf, seq);
    start = HostAttnStart{static_cast<const uint32_t*>(qf.data), seq};
  }
  const float* q = l.host_q;
  const int64_t es = dtype_size(layout_.dtype);
  const int32_t nblocks = static_cast<int32_t>(l.host.size());
  auto rows_of = [&](int32_t j) { return std::min(b, l.host_tokens - j * b); };
  const float threshold = cfg_.hgca_beta / static_cast<float>(std::max(1, device_tokens(l)));
  std::vector<HostAttnItem> items;
  std::vector<float> bounds;
  for (int32_t g = 0; g < shape_.n_head_kv; ++g) {
    auto& refs = l.refs[static_cast<size_t>(g)];
    auto& idx = l.idx[static_cast<size_t>(g)];
    refs.clear();
    idx.clear();
    const float* qg = q + int64_t{g} * G * d;
    auto ref = [&](int32_t j) {
      HostBlockRef r;
      r.k = host_k(l.host[static_cast<size_t>(j)]) + int64_t{g} * b * d * es;
      r.v = host_v(l.host[static_cast<size_t>(j)]) + int64_t{g} * b * d * es;
      r.n = rows_of(j);
      return r;
    };
    int64_t rows = 0;
    switch (cfg_.sparse) {
      case SparsePolicy::kFull:
        for (int32_t j = 0; j < nblocks; ++j) refs.push_back(ref(j)), rows += refs.back().n;
        break;
      case SparsePolicy::kTopk: {
        bounds.resize(static_cast<size_t>(nblocks));
        for (int32_t j = 0; j < nblocks; ++j) {
          const int32_t id = l.host[static_cast<size_t>(j)];
          bounds[static_cast<size_t>(j)] =
              quest_bound(qg, G, d, host_kmin(id) + int64_t{g} * d, host_kmax(id) + int64_t{g} * d);
        }
        for (int32_t j : top_k_indices(bounds, cfg_.topk_blocks))
          refs.push_back(ref(j)), rows += refs.back().n;
        break;
      }
      case SparsePolicy::kHgca: {
        std::vector<std::pair<int32_t, int32_t>> spans;  // (start in idx, count) per block
        for (int32_t j = 0; j < nblocks; ++j) {
          const float* maw = host_maw(l.host[static_cast<size_t>(j)]) + int64_t{g} * b;
          const int32_t first = static_cast<int32_t>(idx.size());
          spans.emplace_back(first, select_above(maw, rows_of(j), threshold, idx));
        }
        for (int32_t j = 0; j < nblocks; ++j) {  // idx no longer grows: pointers are stable
          if (spans[static_cast<size_t>(j)].second == 0) continue;
          HostBlockRef r = ref(j);
          r.idx = idx.data() + spans[static_cast<size_t>(j)].first;
          r.n_idx = spans[static_cast<size_t>(j)].second;
          refs.push_back(r);
          rows += r.n_idx;
        }
        break;
      }
    }
    stats_.host_entries += l.host_tokens;
    stats_.attended += rows;
    items.push_back(
        HostAttnItem{qg, G, l.host_o + int64_t{g} * G * d, l.host_lse + int64_t{g} * G, refs});
  }
  ++stats_.decode_layers;
  // The workers raise the partial's flag when they are done (NaN partial if they failed).
  l.ticket = host_attn_.submit(
      std::move(items), [flag = partial_flag(layer), seq] { publish_host_flag(flag, seq); }, start);
}

void HybridKv::update_maw(Layer& l, const float* q, const float* lse_dev, const float* k_new) {
  const int32_t G = shape_.n_head_q / shape_.n_head_kv, d = shape_.head_dim;
  const int32_t hkv = shape_.n_head_kv;
  const float alpha = cfg_.maw_alpha;
  // The query heads pre-scaled, so a score is one dot product.
  q_scaled_.resize(static_cast<size_t>(shape_.n_head_q) * d);
  for (size_t i = 0; i < q_scaled_.size(); ++i) q_scaled_[i] = q[i] * shape_.scale;
  // p of one stored key row (all KV heads) for KV head g: the largest attention weight any of
  // its G query heads gives the row, exp(max_h(score_h - lse_h)) (exp is monotonic: one exp).
  auto prob = [&](const float* krow, int32_t g) {
    float best = -std::numeric_limits<float>::infinity();
    for (int32_t h = g * G; h < (g + 1) * G; ++h)
      best =
          std::max(best, cpu::dot_f32(q_scaled_.data() + int64_t{h} * d, krow + int64_t{g} * d, d) -
                             lse_dev[h]);
    return std::exp(best);
  };
  const int64_t row_bytes = int64_t{hkv} * d * dtype_size(layout_.dtype);
  const int64_t row = int64_t{hkv} * d;
  auto update_block = [&](int32_t id, int32_t rows) {
    thread_local std::vector<float> tile;  // 8 key rows [8, hkv, d] as f32
    tile.resize(static_cast<size_t>(8 * row));
    const uint8_t* k = mirror_k(id);
    float* maw = dev_maw(id);
    if (d % 8 != 0) {  // one row at a time
      for (int32_t t = 0; t < rows; ++t) {
        cpu::row_to_f32(k + t * row_bytes, layout_.dtype, tile.data(), row);
        for (int32_t g = 0; g < hkv; ++g)
          maw[t * hkv + g] = maw_step(maw[t * hkv + g], prob(tile.data(), g), alpha);
      }
      return;
    }
    // 8 rows at a time: 8 dot products per query head reduced together, one exp8 per KV head.
    for (int32_t t0 = 0; t0 < rows; t0 += 8) {
      const int32_t nr = std::min(8, rows - t0);
      for (int32_t r = 0; r < 8; ++r)
        cpu::row_to_f32(k + (t0 + std::min(r, nr - 1)) * row_bytes, layout_.dtype,
                        tile.data() + r * row, row);
      for (int32_t g = 0; g < hkv; ++g) {
        __m256 best = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
        for (int32_t h = g * G; h < (g + 1) * G; ++h) {
          const float* qh = q_scaled_.data() + int64_t{h} * d;
          __m256 acc[8];
          for (__m256& x : acc) x = _mm256_setzero_ps();
          for (int32_t c = 0; c < d; c += 8) {
            const __m256 qv = _mm256_loadu_ps(qh + c);
            for (int32_t r = 0; r < 8; ++r)
              acc[r] = _mm256_fmadd_ps(
                  qv, _mm256_loadu_ps(tile.data() + r * row + int64_t{g} * d + c), acc[r]);
          }
          best = _mm256_max_ps(best, _mm256_sub_ps(cpu::reduce8(acc), _mm256_set1_ps(lse_dev[h])));
        }
        alignas(32) float p[8];
        _mm256_store_ps(p, cpu::exp8(best));
        for (int32_t r = 0; r < nr; ++r) {
          float& m = maw[(t0 + r) * hkv + g];
          m = maw_step(m, p[r], alpha);
        }
      }
    }
  };
  const int32_t n_sink = std::min(length_, sinks_);
  if (n_sink > 0) update_block(l.sink, n_sink);
  // The window's blocks are independent (each writes its own MAW values): spread over the
  // cores, since this runs on the thread that drives the device, between its attention and the
  // merge.
  const int64_t nw = static_cast<int64_t>(l.window.size());
  tbb::parallel_for(int64_t{0}, nw, [&](int64_t i) {
    update_block(l.window[static_cast<size_t>(i)],
                 i + 1 < nw ? cfg_.block : l.window_tokens - static_cast<int32_t>(i) * cfg_.block);
  });
  // The new token's first observation is its MAW.
  for (int32_t g = 0; g < hkv; ++g) new_maw_.as<float>()[g] = prob(k_new, g);
}

void HybridKv::append_host_row(Layer& l, const float* k_row, const float* v_row, const float* maw) {
  const int32_t b = cfg_.block, d = shape_.head_dim, hkv = shape_.n_head_kv;
  const int64_t es = dtype_size(layout_.dtype);
  if (l.host_tokens % b == 0) {
    const int32_t id = host_.alloc();
    TANDEM_REQUIRE(id >= 0, kOutOfMemory, "host KV pool exhausted");
    std::fill_n(host_kmin(id), int64_t{hkv} * d, std::numeric_limits<float>::infinity());
    std::fill_n(host_kmax(id), int64_t{hkv} * d, -std::numeric_limits<float>::infinity());
    l.host.push_back(id);
  }
  const int32_t id = l.host.back(), slot = l.host_tokens % b;
  float stored[512];
  TANDEM_CHECK(d <= 512, "head_dim ", d);
  for (int32_t g = 0; g < hkv; ++g) {
    uint8_t* kd = host_k(id) + (int64_t{g} * b + slot) * d * es;
    cpu::row_from_f32(k_row + int64_t{g} * d, kd, layout_.dtype, d);
    cpu::row_from_f32(v_row + int64_t{g} * d, host_v(id) + (int64_t{g} * b + slot) * d * es,
                      layout_.dtype, d);
    host_maw(id)[int64_t{g} * b + slot] = maw[g];
    cpu::row_to_f32(kd, layout_.dtype, stored, d);  // the digest bounds the keys as stored
    digest_add(host_kmin(id) + int64_t{g} * d, host_kmax(id) + int64_t{g} * d, stored, d);
  }
  ++l.host_tokens;
}

void HybridKv::evict_oldest(Layer& l) {
  TANDEM_CHECK(!l.window.empty() && l.window_tokens >= cfg_.block, "evict from a short window");
  const int32_t id = l.window.front(), b = cfg_.block, d = shape_.head_dim, hkv = shape_.n_head_kv;
  const int64_t row_bytes = int64_t{hkv} * d * dtype_size(layout_.dtype);
  const uint8_t *k = nullptr, *v = nullptr;
  std::vector<float> zero_maw(static_cast<size_t>(hkv), 0.0f);
  if (device_.host_side()) {
    // From the host side of the block: no device read (a mirrored block is already on the host).
    k = mirror_k(id);
    v = mirror_v(id);
  } else {
    // No mirror (no MAW to keep): the block's K and V come back from the device once, here.
    const int64_t elems = int64_t{b} * hkv * d;
    evict_k_.resize(static_cast<size_t>(layout_.dev_kv_bytes()));
    evict_v_.resize(evict_k_.size());
    backend_.download(dev_k(id, b).reshape({elems}),
                      TensorView(evict_k_.data(), layout_.dtype, {elems}));
    backend_.download(dev_v(id, b).reshape({elems}),
                      TensorView(evict_v_.data(), layout_.dtype, {elems}));
    k = evict_k_.data();
    v = evict_v_.data();
  }
  std::vector<float> vrow(row_buf_.size());
  for (int32_t t = 0; t < b; ++t) {
    cpu::row_to_f32(k + t * row_bytes, layout_.dtype, row_buf_.data(), int64_t{hkv} * d);
    cpu::row_to_f32(v + t * row_bytes, layout_.dtype, vrow.data(), int64_t{hkv} * d);
    append_host_row(l, row_buf_.data(), vrow.data(),
                    device_.host_side() ? dev_maw(id) + int64_t{t} * hkv : zero_maw.data());
  }
  l.window.pop_front();
  l.window_tokens -= b;
  device_.free(id);
}

void HybridKv::write_device_rows(int32_t id, int32_t slot, int32_t len, int64_t src, const float* k,
                                 const float* v, const TensorView& k_dev, const TensorView& v_dev) {
  const int32_t hkv = shape_.n_head_kv, d = shape_.head_dim;
  const int64_t row = int64_t{hkv} * d, es = dtype_size(layout_.dtype);
  auto rows_of = [&](const TensorView& block) {
    TensorView t = block;
    t.data = static_cast<uint8_t*>(block.data) + int64_t{slot} * row * es;
    t.shape[0] = len;
    return t;
  };
  const TensorView kd = rows_of(dev_k(id, 1)), vd = rows_of(dev_v(id, 1));
  if (!k_dev.empty()) {  // device to device, converted to the KV dtype on the way
    backend_.copy(k_dev.slice(src, src + len), kd);
    backend_.copy(v_dev.slice(src, src + len), vd);
    return;
  }
  TANDEM_CHECK(k != nullptr && v != nullptr, "KV rows without a source");
  rows_stage_.resize(static_cast<size_t>(2 * len * row * es));
  uint8_t* ks = rows_stage_.data();
  uint8_t* vs = ks + len * row * es;
  cpu::row_from_f32(k + src * row, ks, layout_.dtype, len * row);
  cpu::row_from_f32(v + src * row, vs, layout_.dtype, len * row);
  backend_.upload(TensorView(ks, layout_.dtype, {len, hkv, d}), kd);
  backend_.upload(TensorView(vs, layout_.dtype, {len, hkv, d}), vd);
}

void HybridKv::store(Layer& l, const float* k, const float* v, const TensorView& k_dev,
                     const TensorView& v_dev, int64_t n, bool with_maw) {
  const int32_t hkv = shape_.n_head_kv, d = shape_.head_dim, b = cfg_.block;
  const int64_t row = int64_t{hkv} * d, es = dtype_size(layout_.dtype);
  const bool host_side = device_.host_side();
  TANDEM_CHECK((k != nullptr && v != nullptr) || (!host_side && cfg_.window > 0),
               "KV rows needed on the host");
  std::vector<float> zero(static_cast<size_t>(hkv), 0.0f);
  const float* maw = with_maw ? new_maw_.as<float>() : zero.data();
  // A run of rows written to one device block, sent together: uploaded from the mirror
  // (mirrored pools) or written by write_device_rows (pools without a host side).
  int32_t run_id = -1, run_lo = 0, run_hi = 0;
  int64_t run_src = 0;
  auto flush = [&] {
    if (run_id >= 0) {
      if (host_side)
        upload_rows(run_id, run_lo, run_hi - run_lo);
      else
        write_device_rows(run_id, run_lo, run_hi - run_lo, run_src, k, v, k_dev, v_dev);
    }
    run_id = -1;
  };
  auto wrote = [&](int32_t id, int32_t slot, int64_t src) {
    if (!device_.mirrored() && host_side) return;  // the host wrote the block itself
    if (id == run_id && slot == run_hi) {
      ++run_hi;
      return;
    }
    flush();
    run_id = id;
    run_lo = slot;
    run_hi = slot + 1;
    run_src = src;
  };
  // Row i into rows slot of a device block: through its host side, or by the run.
  auto put = [&](int32_t id, int32_t slot, int64_t i) {
    if (host_side) {
      cpu::row_from_f32(k + i * row, mirror_k(id) + slot * row * es, layout_.dtype, row);
      cpu::row_from_f32(v + i * row, mirror_v(id) + slot * row * es, layout_.dtype, row);
      std::copy_n(maw, hkv, dev_maw(id) + int64_t{slot} * hkv);
    }
    wrote(id, slot, i);
  };
  for (int64_t i = 0; i < n; ++i) {
    const int32_t pos = length_ + static_cast<int32_t>(i);
    if (pos < sinks_) {
      if (l.sink < 0) {
        l.sink = device_.alloc();
        TANDEM_REQUIRE(l.sink >= 0, kOutOfMemory, "device KV pool exhausted");
      }
      put(l.sink, pos, i);
      continue;
    }
    if (cfg_.window == 0) {
      append_host_row(l, k + i * row, v + i * row, maw);
      continue;
    }
    if (l.window_tokens + 1 > cfg_.window) {
      flush();  // the evicted block's id may come back from alloc below
      evict_oldest(l);
    }
    if (l.window_tokens == static_cast<int32_t>(l.window.size()) * b) {
      const int32_t id = device_.alloc();
      TANDEM_REQUIRE(id >= 0, kOutOfMemory, "device KV pool exhausted");
      l.window.push_back(id);
    }
    const int32_t slot = l.window_tokens - (static_cast<int32_t>(l.window.size()) - 1) * b;
    put(l.window.back(), slot, i);
    ++l.window_tokens;
  }
  flush();
}

void HybridKv::observe_prompt(Layer& l, const float* q, const float* lse, int64_t n) {
  const int64_t m = std::min<int64_t>(cfg_.observe, n);
  const int32_t G = shape_.n_head_q / shape_.n_head_kv, d = shape_.head_dim, hkv = shape_.n_head_kv;
  const int32_t b = cfg_.block;
  const int32_t total = length_ + static_cast<int32_t>(n);
  // Probabilities are relative to all visible keys; rescaled so that uniform attention lands on
  // the 1 / N_device the HGCA threshold is written against.
  const float rescale =
      static_cast<float>(total) / static_cast<float>(std::max(1, device_tokens(l)));
  std::vector<float> krow(static_cast<size_t>(d));
  auto seed = [&](const float* key, int32_t g, int32_t pos) {
    double acc = 0;
    for (int64_t i = n - m; i < n; ++i) {
      if (pos > length_ + i) continue;  // a later token of the chunk: not visible to query i
      float p = 0;
      for (int32_t h = g * G; h < (g + 1) * G; ++h)
        p = std::max(
            p, std::exp(shape_.scale * cpu::dot_f32(q + (i * shape_.n_head_q + h) * d, key, d) -
                        lse[i * shape_.n_head_q + h]));
      acc += p;
    }
    return static_cast<float>(acc / static_cast<double>(m)) * rescale;
  };
  const int64_t es = dtype_size(layout_.dtype);
  for (size_t j = 0; j < l.host.size(); ++j) {
    const int32_t id = l.host[j];
    const int32_t rows = std::min<int32_t>(b, l.host_tokens - static_cast<int32_t>(j) * b);
    for (int32_t g = 0; g < hkv; ++g)
      for (int32_t t = 0; t < rows; ++t) {
        cpu::row_to_f32(host_k(id) + (int64_t{g} * b + t) * d * es, layout_.dtype, krow.data(), d);
        host_maw(id)[int64_t{g} * b + t] =
            seed(krow.data(), g, sinks_ + static_cast<int32_t>(j) * b + t);
      }
  }
  const int64_t row_bytes = int64_t{hkv} * d * es;
  auto seed_device = [&](int32_t id, int32_t rows, int32_t pos0) {
    const uint8_t* k = mirror_k(id);
    for (int32_t t = 0; t < rows; ++t) {
      cpu::row_to_f32(k + t * row_bytes, layout_.dtype, row_buf_.data(), int64_t{hkv} * d);
      for (int32_t g = 0; g < hkv; ++g)
        dev_maw(id)[t * hkv + g] = seed(row_buf_.data() + int64_t{g} * d, g, pos0 + t);
    }
  };
  if (l.sink >= 0) seed_device(l.sink, std::min(total, sinks_), 0);
  const int32_t first_window_pos = sinks_ + l.host_tokens;
  for (size_t i = 0; i < l.window.size(); ++i)
    seed_device(l.window[i],
                i + 1 < l.window.size() ? b : l.window_tokens - static_cast<int32_t>(i) * b,
                first_window_pos + static_cast<int32_t>(i) * b);
}

void HybridKv::merge_host(Backend& be, Layer& l, int32_t layer, const AttnPartial& out) {
  const MemoryKind mem = partials_.view().memory;
  const AttnPartial part{
      TensorView(l.host_o, DType::kF32, {1, shape_.n_head_q, shape_.head_dim}, mem),
      TensorView(l.host_lse, DType::kF32, {1, shape_.n_head_q}, mem)};
  const HostAttention::Ticket t = *l.ticket;
  l.ticket.reset();
  if (l.merged) {  // not reaped by a begin_step (a caller that skipped it): reap it now
    const HostAttention::Ticket old = *l.merged;
    l.merged.reset();
    host_attn_.wait(old);
  }
  // A device backend queues the wait for the partial's flag and returns; a backend that runs
  // ops on this thread waits for the batch here, helping its workers.
  bool waited = false;
  be.wait_host_flag(partial_flag(layer), l.submitted, [&] {
    waited = true;
    host_attn_.wait(t);
  });
  if (!waited) l.merged = t;
  // The merge reads the partial in place (allocate_host memory: pinned and mapped on a GPU).
  be.merge(out, part);
}

void HybridKv::attend(Backend& be, int32_t layer, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& q_pos, const AttnPartial& out) {
  Layer& l = layers_[static_cast<size_t>(layer)];
  const int64_t n = q.dim(0);
  TANDEM_REQUIRE(length_ + n <= capacity_, kInvalidArgument, "sequence of ", length_ + n,
                 " tokens exceeds its KV capacity of ", capacity_);
  const bool decode = decode_ && n == 1;
  const bool host_async = decode && l.host_tokens > 0;
  // Only hgca reads MAW values: under full and topk the MAW update of the device tokens (a q.k
  // and an exp per device token and query head, every decode step) and the prompt observation
  // are skipped, and stored tokens get MAW 0.
  const bool maw = cfg_.sparse == SparsePolicy::kHgca;
  // The host reads q (host attention, MAW, observation), the new k and v where they are stored
  // through the host side of the blocks (or go straight to host blocks), and the device lse (MAW):
  // in place on a host-accessible backend, else downloaded here, synchronously (with async
  // copies: a side stream behind an event). Without a host side (a device pool without mirror:
  // full, topk) the new rows are copied on the device and no k or v is downloaded.
  // Parallel mode (and layer 0 of ahead mode) submit the host part now, beside the device part;
  // the query reaches the workers through the host where the host reads it anyway, else through
  // the backend (submit_host).
  const bool submit_now = host_async && !l.ticket;
  const bool need_q = (submit_now && (selection_reads_query() || be.host_accessible())) ||
                      (maw && (decode || observe_));
  const float* qh = need_q ? host_readable(be, q, q_stage_) : nullptr;
  if (submit_now) submit_host(be, l, layer, q, qh);

  device_partial(be, l, q, k, v, q_pos, out);
  const bool rows_on_host = device_.host_side() || cfg_.window == 0;
  const float* kh = rows_on_host ? host_readable(be, k, k_stage_) : nullptr;
  const float* vh = rows_on_host ? host_readable(be, v, v_stage_) : nullptr;
  if (decode && maw) update_maw(l, qh, host_readable(be, out.lse, lse_stage_), kh);
  if (host_async) {
    merge_host(be, l, layer, out);
  } else if (l.host_tokens > 0) {
    host_partial_dense(be, l, q, q_pos, out);  // prefill: exact under every policy
  }
  store(l, kh, vh, k, v, n, decode && maw);
  if (!decode && observe_ && maw) observe_prompt(l, qh, host_readable(be, out.lse, lse_stage_), n);
}

void HybridKv::import_kv(Backend& be, int32_t layer, const float* k, const float* v, int32_t n) {
  TANDEM_REQUIRE(n >= 0 && length_ + n <= capacity_, kInvalidArgument, "importing ", n,
                 " tokens into a sequence of ", length_, " exceeds its KV capacity of ", capacity_);
  TANDEM_CHECK(layer >= 0 && layer < shape_.n_layer, "layer ", layer);
  Layer& l = layers_[static_cast<size_t>(layer)];
  TANDEM_CHECK(!l.ticket, "import with host work in flight");
  (void)be;  // rows go through the host side of the blocks, or are uploaded (backend_)
  store(l, k, v, TensorView(), TensorView(), n, false);
}

void HybridKv::advance(int32_t n) {
  TANDEM_CHECK(length_ + n <= capacity_, "advance past capacity");
  for (const Layer& l : layers_) TANDEM_CHECK(!l.ticket, "host work left in flight");
  length_ += n;
}

}  // namespace tandem
