// Host jobs: the host side of a deferred step's stores (kvstore/hybrid_runner.h). In a
// decode-only step on a device backend the host thread queues the whole step without reading
// anything back: per layer the device copies what the host side needs into pinned memory (the
// blocks a device-only pool evicts; under hgca the rows' q, k, v and the device partial's lse)
// and raises the layer's job flag; a job on the host-attention workers then moves the evicted
// blocks into their host blocks and, under hgca, updates the MAW values of the device tokens
// and writes the new rows into the host mirror. The block tables changed when the step stored
// (the plan of the next step sees them); the jobs run in order, each after the one before (a
// block freed by one layer may be reused by the next), and the next step starts after all of
// them (HybridRunner::reap), before anything reads a moved block.
//
// The arithmetic is the one the in-place path runs (HybridKv::update_maw, move_rows), in the
// same order (MAW update, then moves, then new rows), so the results are the same bits.
#include <algorithm>

#include "kernels/cpu/simd.h"
#include "kvstore/hybrid_runner.h"

namespace tandem {

HybridRunner::StagedRows HybridRunner::staged(int32_t layer) const {
  const KvShape& sh = sh_.shape;
  const int64_t qd = int64_t{sh.n_head_q} * sh.head_dim, kvd = sh_.blocks.row_elems();
  float* q = rows_stage_.as<float>() + int64_t{layer} * cap_rows_ * (qd + sh.n_head_q + 2 * kvd);
  float* lse = q + cap_rows_ * qd;
  float* k = lse + cap_rows_ * sh.n_head_q;
  return StagedRows{q, lse, k, k + cap_rows_ * kvd};
}

void HybridRunner::ensure_stage(int64_t evictions) {
  // Only device-only pools stage their evicted blocks (a mirror holds the others' bytes).
  if (sh_.rows.host_side() || evictions <= evict_slots_) return;
  const int64_t cap = std::max(evictions, evict_slots_ * 3 / 2);
  evict_stage_ = Buffer();
  evict_stage_ =
      Buffer::host(sh_.backend, DType::kU8, {cap * 2 * sh_.blocks.layout.dev_kv_bytes()});
  evict_slots_ = cap;
}

void HybridRunner::stage_rows(Backend& be, int32_t layer, const TensorView& q, const TensorView& k,
                              const TensorView& v, const TensorView& lse) {
  const KvShape& sh = sh_.shape;
  const int64_t n = q.dim(0), qd = int64_t{sh.n_head_q} * sh.head_dim;
  const int64_t kvd = int64_t{sh.n_head_kv} * sh.head_dim;
  const MemoryKind mem = rows_stage_.view().memory;
  const StagedRows st = staged(layer);
  be.copy(q.reshape({n, qd}), TensorView(st.q, DType::kF32, {n, qd}, mem));
  be.copy(lse.reshape({n, sh.n_head_q}), TensorView(st.lse, DType::kF32, {n, sh.n_head_q}, mem));
  be.copy(k.reshape({n, kvd}), TensorView(st.k, DType::kF32, {n, kvd}, mem));
  be.copy(v.reshape({n, kvd}), TensorView(st.v, DType::kF32, {n, kvd}, mem));
}

void HybridRunner::stage_moves(Backend& be, LayerJob& job) {
  if (sh_.rows.host_side() || job.moves.empty()) return;  // moved from the mirror
  const BlockLayout& lay = sh_.blocks.layout;
  const int64_t es = dtype_size(lay.dtype);
  const int64_t elems = 2 * lay.dev_kv_bytes() / es;  // a block's K then V
  const int64_t n = static_cast<int64_t>(std::count_if(
      job.moves.begin(), job.moves.end(), [](const LayerJob::Move& m) { return !m.shared; }));
  if (n == 0) return;  // every block's rows are in the prefix cache already
  TANDEM_CHECK(evict_used_ + n <= evict_slots_, "eviction staging of ", evict_slots_,
               " blocks overflows: the plan counted fewer evictions");
  // Every evicted block of the layer in one gather (the pool is one chunk: block id starts
  // id * block_bytes after block 0), into consecutive staging slots.
  gather_offsets_.clear();
  for (LayerJob::Move& m : job.moves) {
    if (m.shared) continue;
    m.staged = evict_used_ + static_cast<int64_t>(gather_offsets_.size());
    gather_offsets_.push_back(m.dev_id * (sh_.blocks.device.block_bytes() / es));
  }
  const TensorView pool(sh_.blocks.device.data(0), lay.dtype,
                        {sh_.blocks.device.capacity() * sh_.blocks.device.block_bytes() / es},
                        sh_.blocks.device.memory());
  const TensorView dst(evict_stage_.as<uint8_t>() + evict_used_ * elems * es, lay.dtype, {n, elems},
                       evict_stage_.view().memory);
  be.gather_rows(pool, gather_offsets_.data(), n, dst);
  evict_used_ += n;
}

void HybridRunner::launch_job(Backend& be, int32_t layer) {
  JobSlot& j = jobs_[static_cast<size_t>(layer)];
  const uint32_t value = ++j.raised;
  const TensorView flag = job_flag(layer);
  be.raise_host_flag(flag, value);
  const HostAttention::Ticket t = sh_.host_attn.submit(
      {}, {}, HostAttnStart{static_cast<const uint32_t*>(flag.data), value, last_job_},
      [this, layer](std::span<HostAttnItem>) { run_job(layer); });
  job_tickets_.push_back(t);
  last_job_ = t.id;
}

void HybridRunner::run_job(int32_t layer) {
  JobSlot& j = jobs_[static_cast<size_t>(layer)];
  const KvShape& sh = sh_.shape;
  const BlockAccess& bk = sh_.blocks;
  const int64_t qd = int64_t{sh.n_head_q} * sh.head_dim, kvd = bk.row_elems();
  // Staged rows exist where the jobs write a mirror (hgca on a device).
  const StagedRows st = rows_stage_.empty() ? StagedRows{} : staged(layer);
  if (sh_.cfg.sparse == SparsePolicy::kHgca) {
    TANDEM_CHECK(st.q != nullptr, "hgca job without staged rows");
    for (size_t i = 0; i < seqs_.size(); ++i) {
      const Seq& s = seqs_[i];
      s.kv->update_maw(plan_.seqs[i].layers[static_cast<size_t>(layer)], st.q + s.row0 * qd,
                       st.lse + s.row0 * sh.n_head_q, st.k + s.row0 * kvd,
                       j.maw.data() + i * static_cast<size_t>(sh.n_head_kv));
    }
  }
  const int64_t kv_bytes = bk.layout.dev_kv_bytes();
  for (const LayerJob::Move& m : j.work.moves) {
    if (m.shared) {
      m.kv->move_maw(m.maw, sh_.rows.host_side() ? bk.dev_maw(m.dev_id) : nullptr);
    } else if (m.staged >= 0) {
      const uint8_t* kb = evict_stage_.as<uint8_t>() + m.staged * 2 * kv_bytes;
      m.kv->move_rows(m.host_id, m.maw, kb, kb + kv_bytes, nullptr);
    } else {
      m.kv->move_rows(m.host_id, m.maw, bk.mirror_k(m.dev_id), bk.mirror_v(m.dev_id),
                      bk.dev_maw(m.dev_id));
    }
  }
  for (const LayerJob::Put& p : j.work.puts) {
    TANDEM_CHECK(st.k != nullptr, "mirror rows without staged rows");
    const int64_t at = int64_t{p.slot} * bk.row_bytes();
    cpu::row_from_f32(st.k + p.row * kvd, bk.mirror_k(p.dev_id) + at, bk.layout.dtype, kvd);
    cpu::row_from_f32(st.v + p.row * kvd, bk.mirror_v(p.dev_id) + at, bk.layout.dtype, kvd);
    std::copy_n(p.maw, sh.n_head_kv, bk.dev_maw(p.dev_id) + int64_t{p.slot} * sh.n_head_kv);
  }
}

void HybridRunner::reap_jobs() {
  // Oldest first; every ticket is waited for even when one failed (the first error is raised).
  std::exception_ptr error;
  for (const HostAttention::Ticket t : job_tickets_) {
    try {
      sh_.host_attn.wait(t);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  job_tickets_.clear();
  if (error) std::rethrow_exception(error);
}

void HybridRunner::cancel_jobs() noexcept {
  for (const HostAttention::Ticket t : job_tickets_) {
    try {
      // A job whose flag the device never raised (the step failed) is finished without running.
      sh_.host_attn.cancel(t);
      sh_.host_attn.wait(t);
    } catch (...) {  // the step failed already
    }
  }
  job_tickets_.clear();
}

}  // namespace tandem
