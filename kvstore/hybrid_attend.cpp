// One layer of the hybrid store's batch step: the host submission, the device partials, the
// merge and the stores (kvstore/hybrid_runner.h).
#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/cpu/parallel.h"
#include "kvstore/hybrid_runner.h"
#include "kvstore/selection.h"

namespace tandem {

void HybridRunner::submit(Backend& be, int32_t layer, const TensorView& q, int64_t row0,
                          const float* qh) {
  Slot& slot = slots_[static_cast<size_t>(layer)];
  const KvShape& sh = sh_.shape;
  const int32_t G = sh.n_head_q / sh.n_head_kv, d = sh.head_dim, hkv = sh.n_head_kv;
  const int64_t qd = int64_t{sh.n_head_q} * d;
  // The layer's buffers are reused step after step: written (by the host here, by the
  // backend's copy, by the workers once the query has landed) only after the merge of the
  // layer's previous batch ran. On a device backend the host read the previous step's results
  // back after its merges; within a step each layer is submitted once.
  const uint32_t seq = ++slot.submitted;
  float* qbuf = layer_q(layer);
  const AttnPartial part = layer_partial(layer, rows_);
  HostAttnStart start;
  if (qh != nullptr) {
    for (const Seq& s : seqs_)
      if (host_async(s, layer)) std::copy_n(qh + (s.row0 - row0) * qd, qd, qbuf + s.row0 * qd);
  } else {
    // One copy of the rows for every sequence, then the flag that starts the batch.
    const int64_t n = q.dim(0);
    be.copy(q.reshape({n, sh.n_head_q, d}),
            TensorView(qbuf + row0 * qd, DType::kF32, {n, sh.n_head_q, d}, queries_.view().memory));
    const TensorView qf = query_flag(layer);
    be.raise_host_flag(qf, seq);
    start = HostAttnStart{static_cast<const uint32_t*>(qf.data), seq};
  }
  // A backend whose memory is the host's runs the layer's device part on these same cores: in
  // parallel mode nothing overlaps the host part, which then runs inside the wait on the threads
  // that have just run the device part, instead of on a worker handed the batch now (measured:
  // docs/decode-cpu.md, "The hybrid layer's host batch in the wait").
  start.in_wait =
      qh != nullptr && be.host_accessible() && sh_.cfg.cpu_attn == CpuAttnMode::kParallel;
  float* lse = part.lse.as<float>();
  float* o = part.o.as<float>();
  std::vector<HostAttnItem> items;
  slot.picks.clear();
  for (size_t i = 0; i < seqs_.size(); ++i) {
    const Seq& s = seqs_[i];
    if (!host_async(s, layer)) {
      // Rows without host work hold the empty partial: the merge leaves them alone.
      std::fill_n(lse + s.row0 * sh.n_head_q, int64_t{s.n} * sh.n_head_q, kNegInf);
      continue;
    }
    const float threshold =
        sh_.cfg.hgca_beta / static_cast<float>(std::max(1, s.kv->device_tokens(layer)));
    HostStats& st = s.kv->stats();
    st.host_entries += int64_t{s.kv->table(layer).host_tokens} * hkv;
    ++st.decode_layers;
    for (int32_t g = 0; g < hkv; ++g) {
      slot.picks.push_back(Pick{i, g, threshold});
      items.push_back(HostAttnItem{qbuf + s.row0 * qd + int64_t{g} * G * d,
                                   G,
                                   o + s.row0 * qd + int64_t{g} * G * d,
                                   lse + s.row0 * sh.n_head_q + int64_t{g} * G,
                                   {},
                                   static_cast<int64_t>(i)});
    }
  }
  // Rows of the batch no sequence covers (none today) stay empty too.
  // The policies select from the step's snapshot of the block table. topk and tau read the queries:
  // where the device hands them over (qh null), it selects on a worker once they are there (the
  // batch's prepare), so that this thread never waits for the device. Otherwise it selects here,
  // before the device part of the layer (full and hgca read no query; on a CPU with few cores
  // this thread has the slack, the workers do not).
  const size_t n_items = items.size();
  slot.refs.resize(std::max(slot.refs.size(), n_items));
  slot.idx.resize(std::max(slot.idx.size(), n_items));
  if (sh_.cfg.value_offload) {
    slot.scores.resize(std::max(slot.scores.size(), n_items));
    slot.qerr.assign(n_items, QuantError{});
  }
  slot.picked.assign(n_items, 0);
  slot.looked.assign(n_items, 0);
  if (sh_.cfg.device_budget > 0) {  // what a recall ranks by (kvstore/hybrid_recall.cpp)
    slot.chosen.resize(std::max(slot.chosen.size(), n_items));
    slot.bounds.resize(std::max(slot.bounds.size(), n_items));
  }
  // Value offload scores every host entry from its codes, as much work as the attention itself:
  // on the workers too (items in parallel), overlapped with the device part. Only with a device
  // window: then every host block of the snapshot is a whole evicted one that no later store
  // of the step rewrites (without one, a store appends to the last host block and may re-code
  // all its rows, which a batch started a layer ahead would be reading).
  HostAttnPrepare prepare;
  if ((qh == nullptr && reads_query_to_select()) || (sh_.cfg.value_offload && sh_.geo.window > 0))
    prepare = [this, layer, &slot](std::span<HostAttnItem> its) { pick(layer, slot, its); };
  else
    pick(layer, slot, items);
  // The workers raise the partial's flag when they are done (NaN partial if they failed).
  slot.ticket = sh_.host_attn.submit(
      std::move(items), [flag = partial_flag(layer), seq] { publish_host_flag(flag, seq); }, start,
      std::move(prepare));
}

void HybridRunner::pick(int32_t layer, Slot& slot, std::span<HostAttnItem> items) {
  const KvShape& sh = sh_.shape;
  const int32_t G = sh.n_head_q / sh.n_head_kv;
  if (sh_.cfg.value_offload) {
    // Scores from the key codes, the selection by them; the workers then read values only. One
    // item in kQuantSampleEvery also measures the scores against the stored keys. Items are
    // independent (each writes its own slot entries): in parallel, inside the batch's prepare.
    const uint64_t first = slot.scored;
    slot.scored += items.size();
    tandem::parallel_for(size_t{0}, items.size(), [&](size_t item) {
      const Pick& p = slot.picks[item];
      const LayerSpans& spans = plan_.seqs[p.seq].layers[static_cast<size_t>(layer)];
      auto& refs = slot.refs[item];
      auto& idx = slot.idx[item];
      auto& scores = slot.scores[item];
      refs.clear();
      idx.clear();
      scores.clear();
      const HostHead head{spans.host, spans.host_tokens, sh_.blocks, p.g, spans.maw};
      QuantError* err = (first + item) % kQuantSampleEvery == 0 ? &slot.qerr[item] : nullptr;
      slot.picked[item] =
          select_quantized(head, items[item].q, G, sh.scale, sh_.cfg.tau,
                           sh_.cfg.sparse == SparsePolicy::kFull, refs, idx, scores, err);
      items[item].blocks = refs;
    });
    return;
  }
  for (size_t item = 0; item < items.size(); ++item) {
    const Pick& p = slot.picks[item];
    const LayerSpans& spans = plan_.seqs[p.seq].layers[static_cast<size_t>(layer)];
    auto& refs = slot.refs[item];
    auto& idx = slot.idx[item];
    refs.clear();
    idx.clear();
    const HostHead head{spans.host, spans.host_tokens, sh_.blocks, p.g, spans.maw};
    auto select = [&]() -> int64_t {
      switch (sh_.cfg.sparse) {
        case SparsePolicy::kFull:
          return select_full(head, refs);
        case SparsePolicy::kTopk:
          // With a resident set the CPU leaves its blocks to the device part.
          if (sh_.cfg.device_budget > 0)
            return select_topk(head, items[item].q, G, sh_.cfg.topk_blocks, refs, spans.on_device,
                               &slot.chosen[item], &slot.bounds[item]);
          return select_topk(head, items[item].q, G, sh_.cfg.topk_blocks, refs);
        case SparsePolicy::kHgca:
          return select_hgca(head, p.threshold, refs, idx);
        case SparsePolicy::kTau:
          return select_tau(head, items[item].q, G, sh.scale, sh_.cfg.tau, refs, idx);
      }
      return 0;
    };
    if (sh_.cfg.similarity_reuse) {
      // The kept selection while the query stays close to its label (and no entry reached the
      // host since), else a fresh one that replaces it.
      const bool hit = seqs_[p.seq].kv->reuse(layer).pick(head, items[item].q, G, refs, idx,
                                                          slot.picked[item], select);
      slot.looked[item] = hit ? 2 : 1;
    } else {
      slot.picked[item] = select();
    }
    items[item].blocks = refs;
  }
}

void HybridRunner::account(int32_t layer) {
  Slot& slot = slots_[static_cast<size_t>(layer)];
  if (sh_.cfg.sparse == SparsePolicy::kTopk) account_topk(layer);
  for (size_t item = 0; item < slot.picks.size(); ++item) {
    const Pick& p = slot.picks[item];
    HostStats& st = seqs_[p.seq].kv->stats();
    st.attended += slot.picked[item];
    HostStats read;  // what the item adds to the sequence's and the store's totals
    read.host_bytes_read =
        host_kv_bytes(slot.refs[item], sh_.shape.head_dim, sh_.blocks.layout.dtype);
    if (sh_.cfg.value_offload) {
      const QuantError& e = slot.qerr[item];
      read.quant_logits = e.n;
      read.quant_err_sum = e.sum;
      read.quant_err_max = e.max;
    }
    st += read;
    sh_.totals += read;
    if (slot.looked[item] != 0) {
      ++st.reuse_lookups;
      ++sh_.reuse_lookups;
      st.reuse_hits += slot.looked[item] == 2;
      sh_.reuse_hits += slot.looked[item] == 2;
    }
    plan_.seqs[p.seq].layers[static_cast<size_t>(layer)].selected[static_cast<size_t>(p.g)] =
        slot.picked[item];
  }
  slot.picks.clear();
}

void HybridRunner::device_partials(Backend& be, int32_t layer, const TensorView& q,
                                   const TensorView& k, const TensorView& v,
                                   const TensorView& q_pos, const AttnPartial& out) {
  const BlockAccess& bk = sh_.blocks;
  const int64_t es = dtype_size(bk.layout.dtype);
  TANDEM_CHECK(!bk.device.growable() && bk.device.block_bytes() % es == 0,
               "paged device window needs one fixed chunk of whole elements");
  // Every sequence's segments, in one call: its sinks, its window's pages (the device pool is
  // one chunk, so block id starts id * block_bytes after block 0), its own new tokens (causal).
  // A sequence's segments form a group merged in that order.
  segments_.clear();
  page_offsets_.clear();
  // A decode row also attends its resident blocks (--device-budget), all of whose entries the
  // host part skips; a prefill chunk attends every host entry on the host side (exact).
  for (size_t i = 0; i < seqs_.size(); ++i) {
    const LayerSpans& ls = plan_.seqs[i].layers[static_cast<size_t>(layer)];
    for (int32_t id : ls.window) page_offsets_.push_back(id * (bk.device.block_bytes() / es));
    if (seqs_[i].decode)
      for (int32_t id : ls.resident) page_offsets_.push_back(id * (bk.device.block_bytes() / es));
  }
  size_t page0 = 0;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    const Seq& s = seqs_[i];
    const LayerSpans& ls = plan_.seqs[i].layers[static_cast<size_t>(layer)];
    // Every stored device token precedes every new query, so k_pos0 = 0 leaves them all visible.
    if (ls.sink_rows > 0)
      segments_.push_back(AttnSegment{s.row0, s.n, bk.dev_k(ls.sink, ls.sink_rows),
                                      bk.dev_v(ls.sink, ls.sink_rows), KvPages{}, 0});
    if (!ls.window.empty()) {
      const KvPages pages{page_offsets_.data() + page0, static_cast<int64_t>(ls.window.size()),
                          sh_.geo.block};
      page0 += ls.window.size();
      segments_.push_back(AttnSegment{s.row0, s.n, bk.dev_k(0, ls.window_tokens),
                                      bk.dev_v(0, ls.window_tokens), pages, 0});
    }
    if (s.decode && !ls.resident.empty()) {
      // Resident copies are [Hkv, block, d] K then V (kvstore/resident.cpp): [token, head,
      // channel] by strides.
      const int64_t n = static_cast<int64_t>(ls.resident.size()), b = sh_.geo.block;
      const int64_t d = sh_.shape.head_dim;
      const KvPages pages{page_offsets_.data() + page0, n, sh_.geo.block};
      page0 += ls.resident.size();
      TensorView rk = bk.dev_k(0, static_cast<int32_t>(n * b));
      rk.stride = {d, b * d, 1, 0};
      TensorView rv = rk;  // V follows K in the block, as on the host
      rv.data = static_cast<uint8_t*>(rk.data) + bk.layout.dev_kv_bytes();
      segments_.push_back(AttnSegment{s.row0, s.n, rk, rv, pages, 0});
    }
    const int64_t r = s.row0, e = s.row0 + s.n;
    segments_.push_back(
        AttnSegment{s.row0, s.n, k.slice(r, e), v.slice(r, e), KvPages{}, s.kv->length()});
  }
  be.attention_batch(q, q_pos, segments_.data(), static_cast<int64_t>(segments_.size()),
                     sh_.shape.scale, out);
}

void HybridRunner::host_partial_dense(Backend& be, const Seq& s, int32_t layer, const TensorView& q,
                                      const TensorView& q_pos, const AttnPartial& out) {
  const LayerTable& l = s.kv->table(layer);
  const BlockAccess& bk = sh_.blocks;
  const int64_t b = sh_.geo.block, d = sh_.shape.head_dim, hkv = sh_.shape.n_head_kv;
  const DType dt = bk.layout.dtype;
  const int64_t bytes = bk.layout.dev_kv_bytes(), elems = bytes / dtype_size(dt);  // a block's K
  const int64_t nb = static_cast<int64_t>(l.host.size());
  // The paged attention takes K and V by rows: each host block's K is transposed back from its
  // columns to [head][token][channel] (BlockAccess::host_k_as_rows), V from its tiles
  // (host_v_as_rows; a V by rows is already so). The blocks
  // lie page after page (page j at element j * elems, for K and V alike) in host staging read in
  // place (host-accessible backend; V is copied beside K there, as the pages of K and V share
  // their offsets), or in the staging span, uploaded block by block (device backend); viewed as
  // [token, head, channel] by strides, all host entries go in one paged call.
  HostSpanStaging& st = sh_.staging;
  TensorView kv(nullptr, dt, {l.host_tokens, hkv, d});
  kv.stride = {d, b * d, 1, 0};
  TensorView vv = kv;
  page_offsets_.resize(static_cast<size_t>(nb));
  for (int64_t j = 0; j < nb; ++j) page_offsets_[static_cast<size_t>(j)] = j * elems;
  if (be.host_accessible()) {
    // Read in place by the attention below, which has finished when it returns.
    uint8_t* k_rows = HostSpanStaging::reserve(st.host_k, nb * bytes);
    uint8_t* v_rows = HostSpanStaging::reserve(st.host_v, nb * bytes);
    for (int64_t j = 0; j < nb; ++j) {
      const int32_t id = l.host[static_cast<size_t>(j)];
      bk.host_k_as_rows(id, k_rows + j * bytes);
      bk.host_v_as_rows(id, v_rows + j * bytes);
    }
    kv.data = k_rows;
    vv.data = v_rows;
    kv.memory = vv.memory = st.host_k.view().memory;
  } else {
    if (st.elems < nb * elems) {
      const int64_t cap = std::max(nb * elems, st.elems * 3 / 2);
      st.k = Buffer();  // free the old span before taking the new one
      st.v = Buffer();
      st.elems = 0;
      st.k = Buffer(sh_.backend, dt, {cap});
      st.v = Buffer(sh_.backend, dt, {cap});
      st.elems = cap;
    }
    // One block's K (and tiled V) rows at a time: upload lets its source be reused once it
    // returns.
    uint8_t* k_rows = HostSpanStaging::reserve(st.host_k, bytes);
    for (int64_t j = 0; j < nb; ++j) {
      const int32_t id = l.host[static_cast<size_t>(j)];
      bk.host_k_as_rows(id, k_rows);
      be.upload(TensorView(k_rows, dt, {elems}, st.host_k.view().memory),
                st.k.view().slice(j * elems, (j + 1) * elems));
      be.upload(st.v_rows(bk, id), st.v.view().slice(j * elems, (j + 1) * elems));
    }
    kv.data = st.k.view().data;
    vv.data = st.v.view().data;
    kv.memory = vv.memory = st.k.view().memory;
  }
  const KvPages pages{page_offsets_.data(), nb, sh_.geo.block};
  const AttnPartial part = scratch(q.dim(0));  // out already holds the device partial
  be.attention_paged(q, kv, vv, pages, q_pos, 0, sh_.shape.scale, part);
  be.merge(out, part);
}

void HybridRunner::merge_host(Backend& be, int32_t layer, const AttnPartial& out) {
  Slot& slot = slots_[static_cast<size_t>(layer)];
  const HostAttention::Ticket t = *slot.ticket;
  slot.ticket.reset();
  // A device backend queues the wait for the partial's flag and returns; a backend that runs
  // ops on this thread waits for the batch here, helping its workers.
  bool waited = false;
  be.wait_host_flag(partial_flag(layer), slot.submitted, [&] {
    waited = true;
    sh_.host_attn.wait(t);
  });
  if (waited)
    account(layer);
  else
    slot.merged = t;
  // One merge for the batch, reading the partials in place (allocate_host memory: pinned and
  // mapped on a GPU); rows without host work are empty partials.
  be.merge(out, layer_partial(layer, rows_));
}

void HybridRunner::attend(Backend& be, int32_t layer, const TensorView& q, const TensorView& k,
                          const TensorView& v, const TensorView& q_pos, const AttnPartial& out) {
  TANDEM_CHECK(active_ && layer >= 0 && layer < sh_.shape.n_layer && q.dim(0) == rows_,
               "attend of layer ", layer, " outside a step of ", rows_, " rows");
  Slot& slot = slots_[static_cast<size_t>(layer)];
  // ahead-oracle: the ahead path (a prefetch, the query handed over before the layer) fed the
  // true query, so that it must equal parallel bit for bit.
  if (oracle_ && !slot.ticket) prefetch(be, layer, q, 0);
  const KvShape& sh = sh_.shape;
  const int64_t qd = int64_t{sh.n_head_q} * sh.head_dim, row = sh_.blocks.row_elems();
  // Only hgca reads MAW values: under full and topk the MAW update of the device tokens (a q.k
  // and an exp per device token and query head, every decode step) and the prompt observation
  // are skipped, and stored tokens get MAW 0.
  const bool maw = sh_.cfg.sparse == SparsePolicy::kHgca;
  const bool reuse = sh_.cfg.similarity_reuse;  // the prompt's last chunk measures importance
  bool any_async = false, any_decode = false, any_observe = false;
  for (const Seq& s : seqs_) {
    any_async |= host_async(s, layer);
    any_decode |= s.decode;
    any_observe |= !s.decode && s.observe;
  }
  // The host reads q (host attention, MAW, observation), the new k and v where the row strategy
  // writes through the host (or rows go straight to host blocks), and the device lse (MAW): in
  // place on a host-accessible backend, else downloaded, once for the batch; in a deferred step
  // (decode only, device backend) none of them: the device copies them for the layer's host job.
  // Parallel mode (and layer 0 of ahead mode) submit the host part now, before the device part.
  const bool submit_now = any_async && !slot.ticket;
  // --device-budget: the prompt's last query chooses the resident set after its last chunk.
  const bool budget = sh_.cfg.device_budget > 0;
  const bool need_q = (submit_now && reads_query(be)) ||
                      (!defer_ && maw && (any_decode || any_observe)) ||
                      (!defer_ && (reuse || budget) && any_observe);
  const float* qh = need_q ? host_readable(be, q, q_stage_) : nullptr;
  if (submit_now) submit(be, layer, q, 0, qh);

  device_partials(be, layer, q, k, v, q_pos, out);
  const bool rows_on_host = !defer_ && (sh_.rows.reads_host_rows() || sh_.geo.window == 0);
  const float* kh = rows_on_host ? host_readable(be, k, k_stage_) : nullptr;
  const float* vh = rows_on_host ? host_readable(be, v, v_stage_) : nullptr;
  JobSlot& job = jobs_[static_cast<size_t>(layer)];
  float* new_maw = nullptr;  // per sequence: its new token's MAW values
  const size_t n_maw = seqs_.size() * static_cast<size_t>(sh.n_head_kv);
  if (defer_) {
    job.work.clear();
    job.maw.assign(n_maw, 0.0f);
    new_maw = job.maw.data();
    if (maw) stage_rows(be, layer, q, k, v, out.lse);  // the device lse, before the merge
  } else {
    new_maw_.assign(n_maw, 0.0f);
    new_maw = new_maw_.data();
    if (maw && any_decode) {
      // The device partial's lse, before the host part is merged in.
      const float* lse = host_readable(be, out.lse, lse_stage_);
      for (size_t i = 0; i < seqs_.size(); ++i) {
        const Seq& s = seqs_[i];
        if (!s.decode) continue;
        s.kv->update_maw(plan_.seqs[i].layers[static_cast<size_t>(layer)], qh + s.row0 * qd,
                         lse + s.row0 * sh.n_head_q, kh + s.row0 * row,
                         new_maw + i * static_cast<size_t>(sh.n_head_kv));
      }
    }
  }
  if (slot.ticket) merge_host(be, layer, out);
  for (const Seq& s : seqs_)  // prefill: exact under every policy
    if (!s.decode && s.kv->table(layer).host_tokens > 0) {
      const int64_t r = s.row0, e = s.row0 + s.n;
      host_partial_dense(be, s, layer, q.slice(r, e), q_pos.slice(r, e),
                         AttnPartial{out.o.slice(r, e), out.lse.slice(r, e)});
    }
  const RowSource src{kh, vh, k, v};
  for (size_t i = 0; i < seqs_.size(); ++i) {
    const Seq& s = seqs_[i];
    s.kv->store(layer, src, s.row0, s.n,
                s.decode && maw ? new_maw + i * static_cast<size_t>(sh.n_head_kv) : nullptr,
                defer_ ? &job.work : nullptr);
  }
  if (defer_) {
    stage_moves(be, job.work);  // before the scatter may overwrite a freed block
    sh_.scatter->flush();
    if (maw || !job.work.moves.empty()) launch_job(be, layer);
    return;
  }
  sh_.rows.flush();
  if (budget && any_observe)
    for (const Seq& s : seqs_)
      if (!s.decode && s.observe && s.kv->has_reserve())
        s.kv->choose_resident(be, layer, qh + (s.row0 + s.n - 1) * qd);
  if ((maw || reuse) && any_observe) {
    const float* lse = host_readable(be, out.lse, lse_stage_);
    for (const Seq& s : seqs_) {
      if (s.decode || !s.observe) continue;
      if (maw) s.kv->observe_prompt(layer, qh + s.row0 * qd, lse + s.row0 * sh.n_head_q, s.n);
      if (reuse) s.kv->observe_importance(layer, qh + s.row0 * qd, lse + s.row0 * sh.n_head_q, s.n);
    }
  }
}

}  // namespace tandem
