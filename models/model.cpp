// Model loading and the shared forward pass (Llama / Qwen2 / Qwen3 / OPT).
#include "models/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <utility>

#include "kernels/cpu/parallel.h"

namespace tandem {
namespace {

// A contiguous [rows, cols] view at the start of a flat scratch buffer.
TensorView rows_view(const Buffer& b, int64_t rows, int64_t cols) {
  TANDEM_CHECK(rows * cols <= b.view().numel(), "scratch too small");
  return TensorView(b.view().data, DType::kF32, {rows, cols}, b.view().memory);
}

}  // namespace

TensorView ModelWeights::small_f32(const TensorStore& store, const std::string& name, int64_t n) {
  const TensorView src = store.get(name, {n});
  Buffer& b = owned.emplace_back(DType::kF32, std::initializer_list<int64_t>{n});
  float* dst = b.as<float>();
  for (int64_t i = 0; i < n; ++i) {
    switch (src.dtype) {
      case DType::kF32:
        dst[i] = src.as<const float>()[i];
        break;
      case DType::kF16:
        dst[i] = f16_to_f32(src.as<const uint16_t>()[i]);
        break;
      case DType::kBF16:
        dst[i] = bf16_to_f32(src.as<const uint16_t>()[i]);
        break;
      default:
        TANDEM_CHECK(false, "dtype");
    }
  }
  return b.view();
}

TensorView ModelWeights::optional_small_f32(const TensorStore& store, const std::string& name,
                                            int64_t n) {
  return store.has(name) ? small_f32(store, name, n) : TensorView();
}

Model::Model(const std::filesystem::path& dir, Backend& backend, ModelConfig config,
             TensorStore store)
    : dir_(dir), backend_(backend), config_(std::move(config)), store_(std::move(store)) {}

std::unique_ptr<Model> Model::load(const std::filesystem::path& dir, Backend& backend,
                                   WeightMemory memory) {
  ModelConfig config = load_config(dir);
  TensorStore store = TensorStore::open(dir);
  std::unique_ptr<Model> m(new Model(dir, backend, std::move(config), std::move(store)));
  switch (m->config_.arch) {
    case Arch::kLlama:
      map_llama_weights(m->config_, m->store_, m->w_);
      break;
    case Arch::kQwen2:
    case Arch::kQwen3:
      map_qwen_weights(m->config_, m->store_, m->w_);
      break;
    case Arch::kOpt:
      map_opt_weights(m->config_, m->store_, m->w_);
      break;
  }
  if (!backend.host_accessible())
    m->upload_weights();
  else
    m->place_host_weights(memory);
  return m;
}

std::vector<std::pair<TensorView, std::vector<TensorView*>>> Model::unique_weights() {
  std::vector<TensorView*> all = {&w_.embed,      &w_.pos_embed,    &w_.project_in, &w_.project_out,
                                  &w_.final_norm, &w_.final_norm_b, &w_.lm_head};
  for (LayerWeights& l : w_.layers)
    for (TensorView* t :
         {&l.attn_norm, &l.attn_norm_b, &l.wq,     &l.wk,     &l.wv,     &l.wo,       &l.bq,
          &l.bk,        &l.bv,          &l.bo,     &l.q_norm, &l.k_norm, &l.ffn_norm, &l.ffn_norm_b,
          &l.w_gate,    &l.w_up,        &l.w_down, &l.b_gate, &l.b_up,   &l.b_down})
      all.push_back(t);
  std::vector<std::pair<TensorView, std::vector<TensorView*>>> out;
  std::map<std::pair<const void*, int64_t>, size_t> at;
  for (TensorView* t : all) {
    if (t->empty()) continue;
    const auto key = std::make_pair(static_cast<const void*>(t->data), t->nbytes());
    auto [it, fresh] = at.emplace(key, out.size());
    if (fresh) out.emplace_back(*t, std::vector<TensorView*>{});
    const TensorView& first = out[it->second].first;
    TANDEM_CHECK(first.dtype == t->dtype && first.numel() == t->numel(),
                 "weight views of one tensor disagree: ", t->describe());
    out[it->second].second.push_back(t);
  }
  return out;
}

void Model::upload_weights() {
  for (auto& [src, views] : unique_weights()) {
    const TensorView& dev = device_weights_.emplace_back(Buffer::upload(backend_, src)).view();
    for (TensorView* t : views) *t = dev;
  }
  // Nothing reads the maps any more (upload copies before it returns).
  store_.unmap();
  weight_memory_ = "device";
  weight_memory_note_ = "uploaded";
}

void Model::copy_weights_huge() {
  constexpr int64_t kAlign = 4096;
  auto tensors = unique_weights();
  std::vector<int64_t> offset;
  int64_t total = 0;
  for (const auto& [src, views] : tensors) {
    offset.push_back(total);
    total += (src.nbytes() + kAlign - 1) / kAlign * kAlign;
  }
  Buffer& copy = device_weights_.emplace_back(host_heap_huge(), DType::kU8,
                                              std::initializer_list<int64_t>{total});
  char* base = copy.as<char>();
  // Pieces of at most 8 MiB, copied by every thread: the copy is read-bound (the page cache) and
  // first-touch-bound (2 MiB pages zeroed by the kernel), not one thread's work.
  constexpr int64_t kPiece = int64_t{8} << 20;
  struct Piece {
    const char* src;
    char* dst;
    int64_t bytes;
  };
  std::vector<Piece> pieces;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const char* src = static_cast<const char*>(tensors[i].first.data);
    const int64_t n = tensors[i].first.nbytes();
    for (int64_t at = 0; at < n; at += kPiece)
      pieces.push_back({src + at, base + offset[i] + at, std::min(kPiece, n - at)});
  }
  tandem::parallel_for(size_t{0}, pieces.size(), [&](size_t i) {
    std::memcpy(pieces[i].dst, pieces[i].src, static_cast<size_t>(pieces[i].bytes));
  });
  for (size_t i = 0; i < tensors.size(); ++i)
    for (TensorView* t : tensors[i].second) t->data = base + offset[i];
  store_.unmap();
}

void Model::place_host_weights(WeightMemory memory) {
  if (memory == WeightMemory::kAuto) {
    const std::string thp = transparent_huge_pages();
    if (thp.empty() || thp == "never") {
      weight_memory_note_ = cat("memory-mapped: transparent huge pages are ",
                                thp.empty() ? std::string("not available") : thp);
      return;
    }
    const int64_t need = weight_bytes() + std::max(kWeightCopySlack, weight_bytes() / 8);
    const int64_t avail = host_memory_info().free_bytes;
    if (avail < need) {
      weight_memory_note_ = cat("memory-mapped: MemAvailable ", avail >> 20, " MiB is below the ",
                                need >> 20, " MiB a copy in 2 MiB pages needs");
      return;
    }
    memory = WeightMemory::kHuge;
  }
  if (memory != WeightMemory::kHuge) return;
  const auto t0 = std::chrono::steady_clock::now();
  copy_weights_huge();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  weight_memory_ = "huge";
  weight_memory_note_ = cat("copied into 2 MiB pages in ", std::round(s * 100) / 100, " s");
}

int64_t Model::matmul_weight_bytes() const {
  int64_t n = w_.lm_head.nbytes() + (w_.project_in.empty() ? 0 : w_.project_in.nbytes()) +
              (w_.project_out.empty() ? 0 : w_.project_out.nbytes());
  for (const LayerWeights& l : w_.layers)
    for (const TensorView* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
      if (!t->empty()) n += t->nbytes();
  return n;
}

KvShape Model::kv_shape() const {
  KvShape s;
  s.n_layer = config_.n_layer;
  s.n_head_q = config_.n_head_q;
  s.n_head_kv = config_.n_head_kv;
  s.head_dim = config_.head_dim;
  s.scale = 1.0f / std::sqrt(static_cast<float>(config_.head_dim));
  return s;
}

std::unique_ptr<SequenceKv> Model::new_dense_kv(int32_t capacity) const {
  return std::make_unique<DenseKv>(backend_, kv_shape(), capacity);
}

void Model::ensure_workspace(int64_t n, int64_t rows) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  if (n > ws_tokens_) {
    const int64_t wide = std::max<int64_t>(c.hidden, c.embed_dim);
    ids_ = Buffer(be, DType::kI32, {n});
    pos_ = Buffer(be, DType::kI32, {n});
    pos_rows_ = Buffer(be, DType::kI32, {n});
    x_ = Buffer(be, DType::kF32, {n, c.hidden});
    h_ = Buffer(be, DType::kF32, {n, c.hidden});
    q_ = Buffer(be, DType::kF32, {n, c.n_head_q, c.head_dim});
    k_ = Buffer(be, DType::kF32, {n, c.n_head_kv, c.head_dim});
    v_ = Buffer(be, DType::kF32, {n, c.n_head_kv, c.head_dim});
    o_ = Buffer(be, DType::kF32, {n, c.n_head_q, c.head_dim});
    lse_ = Buffer(be, DType::kF32, {n, c.n_head_q});
    attn_out_ = Buffer(be, DType::kF32, {n, c.hidden});
    gate_ = Buffer(be, DType::kF32, {n, c.ffn});
    up_ = Buffer(be, DType::kF32, {n, c.ffn});
    emb_ = Buffer(be, DType::kF32, {n * wide});
    pred_h_ = Buffer(be, DType::kF32, {n, c.hidden});
    pred_q_ = Buffer(be, DType::kF32, {n, c.n_head_q, c.head_dim});
    ws_tokens_ = n;
  }
  if (rows > ws_logit_rows_) {
    logit_in_ = Buffer(be, DType::kF32, {rows * std::max<int64_t>(c.hidden, c.embed_dim)});
    logits_ = Buffer(be, DType::kF32, {rows, c.vocab_size});
    // Pinned on a device (allocate_host): the read-back is one copy in stream order and one
    // wait for the stream, where pageable memory makes the copy itself wait too.
    if (!be.host_accessible()) {
      host_logits_ = Buffer();
      host_logits_ = Buffer::host(be, DType::kF32, {rows, c.vocab_size});
    }
    ws_logit_rows_ = rows;
  }
}

void Model::norm(const TensorView& in, const TensorView& w, const TensorView& b,
                 const TensorView& out) {
  if (config_.arch == Arch::kOpt)
    backend_.layer_norm(in, w, b, config_.norm_eps, out);
  else
    backend_.rms_norm(in, w, config_.norm_eps, out);
}

void Model::query(int32_t li, const TensorView& in, const TensorView& pos, const TensorView& q) {
  const ModelConfig& c = config_;
  const LayerWeights& l = w_.layers[static_cast<size_t>(li)];
  const int64_t n = in.dim(0);
  backend_.matmul(in, l.wq, l.bq, q.reshape({n, int64_t{c.n_head_q} * c.head_dim}));
  if (!l.q_norm.empty())
    backend_.rms_norm(q.reshape({n * c.n_head_q, c.head_dim}), l.q_norm, c.norm_eps,
                      q.reshape({n * c.n_head_q, c.head_dim}));
  if (!c.rope.inv_freq.empty()) backend_.rope(q, pos, c.rope);
}

TensorView Model::forward(std::span<const StepSequence> batch) {
  const TensorView logits = forward_on_backend(batch);
  return logits_to_host(0, logits.dim(0));
}

TensorView Model::logits_to_host(int64_t r0, int64_t r1) {
  TANDEM_CHECK(0 <= r0 && r0 <= r1 && r1 <= last_rows_, "logit rows [", r0, ", ", r1, ") of ",
               last_rows_);
  const TensorView logits = logits_.view().slice(r0, r1);
  if (backend_.host_accessible()) {
    backend_.synchronize();
    return logits;
  }
  const TensorView host = host_logits_.view().slice(r0, r1);
  backend_.download(logits, host);
  return host;
}

TensorView Model::forward_on_backend(std::span<const StepSequence> batch) {
  const ModelConfig& c = config_;
  Backend& be = backend_;
  int64_t n = 0, rows = 0;
  for (const StepSequence& s : batch) {
    TANDEM_CHECK(s.kv != nullptr && !s.tokens.empty(), "empty sequence in a step");
    TANDEM_REQUIRE(s.kv->length() + static_cast<int64_t>(s.tokens.size()) <= c.max_context,
                   kInvalidArgument, "sequence of ", s.kv->length() + s.tokens.size(),
                   " tokens exceeds the model context of ", c.max_context);
    n += static_cast<int64_t>(s.tokens.size());
    rows += s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1;
  }
  TANDEM_CHECK(n > 0, "empty step");
  ensure_workspace(n, rows);

  // Token ids and positions of every row, built on the host and uploaded.
  {
    host_ids_.resize(static_cast<size_t>(n));
    host_pos_.resize(static_cast<size_t>(n));
    int32_t* ids = host_ids_.data();
    int32_t* pos = host_pos_.data();
    int64_t r = 0;
    for (const StepSequence& s : batch)
      for (size_t i = 0; i < s.tokens.size(); ++i, ++r) {
        TANDEM_REQUIRE(s.tokens[i] >= 0 && s.tokens[i] < c.vocab_size, kInvalidArgument,
                       "token id ", s.tokens[i], " outside the vocabulary of ", c.vocab_size);
        ids[r] = s.tokens[i];
        pos[r] = s.kv->length() + static_cast<int32_t>(i);
      }
  }
  const TensorView ids = ids_.view().slice(0, n), pos = pos_.view().slice(0, n);
  be.upload(TensorView(host_ids_.data(), DType::kI32, {n}), ids);
  be.upload(TensorView(host_pos_.data(), DType::kI32, {n}), pos);
  const TensorView x = x_.view().slice(0, n), h = h_.view().slice(0, n);
  const TensorView q = q_.view().slice(0, n), k = k_.view().slice(0, n), v = v_.view().slice(0, n);
  const TensorView o = o_.view().slice(0, n), lse = lse_.view().slice(0, n);
  const TensorView attn_out = attn_out_.view().slice(0, n);
  const TensorView gate = gate_.view().slice(0, n), up = up_.view().slice(0, n);
  const int64_t qd = int64_t{c.n_head_q} * c.head_dim, kvd = int64_t{c.n_head_kv} * c.head_dim;
  const TensorView none;

  // Embeddings (+ OPT's projection and learned positions).
  if (w_.project_in.empty()) {
    be.embedding(ids, w_.embed, x);
  } else {
    const TensorView e = rows_view(emb_, n, c.embed_dim);
    be.embedding(ids, w_.embed, e);
    be.matmul(e, w_.project_in, none, x);
  }
  if (!w_.pos_embed.empty()) {
    // OPT's learned positions sit pos_offset rows into the table.
    std::vector<int32_t> rows_idx(host_pos_);
    for (int32_t& p : rows_idx) p += c.pos_offset;
    const TensorView pos_rows = pos_rows_.view().slice(0, n);
    be.upload(TensorView(rows_idx.data(), DType::kI32, {n}), pos_rows);
    be.embedding(pos_rows, w_.pos_embed, h);
    be.add(x, h, x);
  }

  // The KV side of the step for the whole batch: plans it, then takes each layer's rows.
  std::vector<StepRows> step_rows;
  {
    int64_t r = 0;
    for (const StepSequence& s : batch) {
      step_rows.push_back(
          StepRows{s.kv, r, static_cast<int32_t>(s.tokens.size()), s.decode, s.observe});
      r += static_cast<int64_t>(s.tokens.size());
    }
  }
  const std::unique_ptr<KvStep> kv = begin_kv_step(step_rows);
  // Rows [ahead_lo, ahead_hi) cover every decode sequence that wants a predicted query.
  const int64_t ahead_lo = kv->ahead_lo(), ahead_hi = kv->ahead_hi();

  for (int32_t li = 0; li < c.n_layer; ++li) {
    const LayerWeights& l = w_.layers[static_cast<size_t>(li)];
    // Layer-ahead host attention: layer li+1's query predicted from this layer's input,
    // rope(W_q[li+1] . norm[li+1](x_li)), so the CPU has all of layer li to work on it.
    if (ahead_lo < ahead_hi && li + 1 < c.n_layer) {
      const TensorView xs = x.slice(ahead_lo, ahead_hi), ps = pos.slice(ahead_lo, ahead_hi);
      const TensorView ph = pred_h_.view().slice(0, ahead_hi - ahead_lo);
      const TensorView pq = pred_q_.view().slice(0, ahead_hi - ahead_lo);
      const LayerWeights& next = w_.layers[static_cast<size_t>(li + 1)];
      if (c.pre_norm) norm(xs, next.attn_norm, next.attn_norm_b, ph);
      query(li + 1, c.pre_norm ? ph : xs, ps, pq);
      kv->prefetch(be, li + 1, pq, ahead_lo);
    }
    // Attention block.
    const TensorView& attn_in = c.pre_norm ? h : x;
    if (c.pre_norm) norm(x, l.attn_norm, l.attn_norm_b, h);
    query(li, attn_in, pos, q);
    be.matmul(attn_in, l.wk, l.bk, k.reshape({n, kvd}));
    be.matmul(attn_in, l.wv, l.bv, v.reshape({n, kvd}));
    if (!l.k_norm.empty())
      be.rms_norm(k.reshape({n * c.n_head_kv, c.head_dim}), l.k_norm, c.norm_eps,
                  k.reshape({n * c.n_head_kv, c.head_dim}));
    if (!c.rope.inv_freq.empty()) be.rope(k, pos, c.rope);
    // The attention call site: the KV store takes every row of the batch.
    kv->attend(be, li, q, k, v, pos, AttnPartial{o, lse});
    be.matmul(o.reshape({n, qd}), l.wo, l.bo, attn_out);
    be.add(x, attn_out, x);
    if (!c.pre_norm) norm(x, l.attn_norm, l.attn_norm_b, x);

    // MLP block.
    const TensorView& mlp_in = c.pre_norm ? h : x;
    if (c.pre_norm) norm(x, l.ffn_norm, l.ffn_norm_b, h);
    if (l.w_gate.empty()) {  // OPT: fc2(relu(fc1(x)))
      be.matmul(mlp_in, l.w_up, l.b_up, up);
      be.relu(up);
    } else {  // SwiGLU: down(silu(gate(x)) * up(x))
      be.matmul(mlp_in, l.w_gate, l.b_gate, gate);
      be.matmul(mlp_in, l.w_up, l.b_up, up);
      be.silu_mul(gate, up, up);
    }
    be.matmul(up, l.w_down, l.b_down, attn_out);
    be.add(x, attn_out, x);
    if (!c.pre_norm) norm(x, l.ffn_norm, l.ffn_norm_b, x);
  }

  kv->finish();

  // Rows that need logits: gather, final norm, projection, lm_head.
  const TensorView sel = rows_view(logit_in_, rows, c.hidden);
  {
    int64_t r = 0, out = 0;
    for (const StepSequence& s : batch) {
      const int64_t len = static_cast<int64_t>(s.tokens.size());
      const int64_t first = s.all_logits ? r : r + len - 1;
      const int64_t count = s.all_logits ? len : 1;
      be.copy(x.slice(first, first + count), sel.slice(out, out + count));
      out += count;
      r += len;
    }
  }
  if (!w_.final_norm.empty()) norm(sel, w_.final_norm, w_.final_norm_b, sel);
  TensorView head_in = sel;
  if (!w_.project_out.empty()) {
    TANDEM_CHECK(rows <= ws_tokens_, "projection rows");
    head_in = rows_view(emb_, rows, c.embed_dim);
    be.matmul(sel, w_.project_out, none, head_in);
  }
  const TensorView logits = logits_.view().slice(0, rows);
  be.matmul(head_in, w_.lm_head, none, logits);
  last_rows_ = rows;
  return logits;
}

}  // namespace tandem
