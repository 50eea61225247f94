// HybridRunner: plan, commit and the per-layer batch of the hybrid store (kvstore/hybrid_runner.h).
#include "kvstore/hybrid_runner.h"

#include <algorithm>
#include <limits>

namespace tandem {

// The KvStep handle of a runner's step; a step dropped before finish (an error) is aborted.
class HybridStep final : public KvStep {
 public:
  explicit HybridStep(HybridRunner& r) : r_(r) {}
  ~HybridStep() override {
    if (r_.in_step()) r_.abort();
  }
  int64_t ahead_lo() const override { return r_.ahead_lo_; }
  int64_t ahead_hi() const override { return r_.ahead_hi_; }
  void prefetch(Backend& be, int32_t layer, const TensorView& q, int64_t row0) override {
    r_.prefetch(be, layer, q, row0);
  }
  void attend(Backend& be, int32_t layer, const TensorView& q, const TensorView& k,
              const TensorView& v, const TensorView& q_pos, const AttnPartial& out) override {
    r_.attend(be, layer, q, k, v, q_pos, out);
  }
  void finish() override { r_.finish(); }

 private:
  HybridRunner& r_;
};

StepPlan plan_hybrid(const HybridShared& shared, int64_t device_free,
                     std::span<const PlanRequest> batch) {
  StepPlan p;
  p.device_free = device_free;
  const int64_t layers = shared.shape.n_layer;
  for (const PlanRequest& r : batch) {
    SequencePlan s;
    s.request = r;
    TierDelta dev, host;
    shared.geo.growth(r.kv != nullptr ? r.kv->length() : 0, r.tokens, dev, host, s.evictions);
    // --device-budget: the resident set's blocks, reserved by the prompt's last prefill chunk and
    // grown by decode steps as host blocks arrive (kvstore/resident.h). This store's sequences
    // are all HybridKv.
    const auto* kv = static_cast<const HybridKv*>(r.kv);
    if (r.observe || r.decode) {
      const int64_t length = (kv != nullptr ? kv->length() : 0) + int64_t{r.tokens};
      s.reserve =
          std::max(0, resident_reserve(shared.cfg, length) - (kv != nullptr ? kv->reserved() : 0));
    }
    dev.alloc += s.reserve;
    s.device = {dev.alloc * layers, dev.freed * layers};
    s.host = {host.alloc * layers, host.freed * layers};
    p.device.alloc += s.device.alloc;
    p.device.freed += s.device.freed;
    p.host.alloc += s.host.alloc;
    p.seqs.push_back(std::move(s));
  }
  return p;
}

HybridRunner::HybridRunner(HybridShared& shared)
    : sh_(shared),
      slots_(static_cast<size_t>(shared.shape.n_layer)),
      jobs_(static_cast<size_t>(shared.shape.n_layer)) {
  flags_ = Buffer::host(sh_.backend, DType::kI32, {3, sh_.shape.n_layer});
  std::fill_n(flags_.as<int32_t>(), 3 * sh_.shape.n_layer, 0);
}

HybridRunner::~HybridRunner() {
  cancel_jobs();
  for (Slot& s : slots_)
    for (const auto& t : {s.ticket, s.merged}) {
      if (!t) continue;
      try {
        sh_.host_attn.cancel(*t);
        sh_.host_attn.wait(*t);
      } catch (...) {  // going away; the partial is not needed
      }
    }
}

void HybridRunner::reap() {
  for (size_t l = 0; l < slots_.size(); ++l) {
    Slot& s = slots_[l];
    if (!s.merged) continue;
    const HostAttention::Ticket t = *s.merged;
    s.merged.reset();
    sh_.host_attn.wait(t);
    account(static_cast<int32_t>(l));
  }
  reap_jobs();
}

std::unique_ptr<KvStep> HybridRunner::begin(std::span<const StepRows> rows) {
  TANDEM_CHECK(!active_, "a step of this KV store is already running");
  reap();
  start(rows);
  return std::make_unique<HybridStep>(*this);
}

void HybridRunner::start(std::span<const StepRows> rows) {
  // Plan and check everything before the first change.
  std::vector<PlanRequest> req;
  seqs_.clear();
  rows_ = 0;
  for (const StepRows& r : rows) {
    TANDEM_CHECK(r.kv->step_runner() == this, "a sequence of another store");
    auto* kv = static_cast<HybridKv*>(r.kv);  // this runner's sequences are all HybridKv
    TANDEM_REQUIRE(kv->length() + r.n <= kv->capacity(), kInvalidArgument, "sequence of ",
                   kv->length() + r.n, " tokens exceeds its KV capacity of ", kv->capacity());
    for (const Seq& s : seqs_) TANDEM_CHECK(s.kv != kv, "a sequence twice in one step");
    seqs_.push_back(Seq{kv, r.row0, r.n, r.decode && r.n == 1, r.observe});
    req.push_back(PlanRequest{kv, r.n, r.decode, r.observe});
    rows_ = std::max(rows_, r.row0 + r.n);
  }
  plan_ = plan_hybrid(sh_, sh_.blocks.device.free_blocks(), req);
  int64_t reserved = 0;
  for (const SequencePlan& sp : plan_.seqs) reserved += int64_t{sp.reserve} * sh_.shape.n_layer;
  TANDEM_REQUIRE(plan_.fits(), kOutOfMemory, "device KV pool exhausted: the step needs ",
                 plan_.device.net(), " blocks (", reserved, " of them --device-budget's), ",
                 plan_.device_free, " are free");
  for (size_t i = 0; i < seqs_.size(); ++i)
    if (plan_.seqs[i].reserve > 0) seqs_[i].kv->reserve_resident(plan_.seqs[i].reserve);
  // What each (sequence, layer) attends, as of the start of the step.
  for (size_t i = 0; i < seqs_.size(); ++i) {
    SequencePlan& sp = plan_.seqs[i];
    const HybridKv& kv = *seqs_[i].kv;
    sp.layers.resize(static_cast<size_t>(sh_.shape.n_layer));
    for (int32_t l = 0; l < sh_.shape.n_layer; ++l) {
      const LayerTable& t = kv.table(l);
      LayerSpans& ls = sp.layers[static_cast<size_t>(l)];
      ls.sink = t.sink;
      ls.sink_rows = std::min(kv.length(), sh_.geo.sinks);
      ls.window.assign(t.window.begin(), t.window.end());
      ls.window_tokens = t.window_tokens;
      ls.host = t.host;
      ls.maw.resize(t.maw.size());
      for (size_t j = 0; j < t.maw.size(); ++j) ls.maw[j] = t.maw[j].get();
      ls.host_tokens = t.host_tokens;
      ls.selected.assign(static_cast<size_t>(sh_.shape.n_head_kv), 0);
      if (kv.has_reserve() && seqs_[i].decode) {
        const ResidentLayer& r = kv.resident(l);
        ls.on_device.assign(t.host.size(), 0);
        for (size_t s = 0; s < r.dev.size(); ++s)
          if (r.host[s] >= 0) {
            ls.resident.push_back(r.dev[s]);
            ls.on_device[static_cast<size_t>(r.host[s])] = 1;
          }
      }
    }
  }
  ensure_rows(rows_);
  // A decode-only step on a device backend leaves the host side of its stores (block moves to
  // the host tier, hgca's MAW update and mirror rows) to host jobs behind the device's copies:
  // no host thread waits for the device within the step. Other steps do it in place.
  defer_ = sh_.scatter != nullptr && sh_.geo.window > 0 && !seqs_.empty();
  int64_t evictions = 0;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    defer_ = defer_ && seqs_[i].decode;
    evictions += int64_t{plan_.seqs[i].evictions} * sh_.shape.n_layer;
  }
  if (defer_) ensure_stage(evictions);
  evict_used_ = 0;
  ahead_lo_ = rows_;
  ahead_hi_ = 0;
  oracle_ = sh_.cfg.cpu_attn == CpuAttnMode::kAheadOracle;
  if (sh_.cfg.cpu_attn != CpuAttnMode::kParallel)
    for (const Seq& s : seqs_)
      if (s.decode) {
        ahead_lo_ = std::min(ahead_lo_, s.row0);
        ahead_hi_ = std::max(ahead_hi_, s.row0 + s.n);
      }
  if (oracle_) ahead_lo_ = rows_, ahead_hi_ = 0;  // the oracle prefetches the true query itself
  active_ = true;
}

void HybridRunner::finish() {
  TANDEM_CHECK(active_, "finish without a step");
  for (const Slot& s : slots_) TANDEM_CHECK(!s.ticket, "host work left in flight");
  for (const Seq& s : seqs_) s.kv->advance(s.n);
  active_ = false;
}

void HybridRunner::abort() noexcept {
  cancel_jobs();
  for (Slot& s : slots_) {
    if (!s.ticket) continue;
    const HostAttention::Ticket t = *s.ticket;
    s.ticket.reset();
    try {
      // A batch whose query the device has not delivered (the step failed half way) may never
      // start: finished without running, its flag raised for a device that waits.
      sh_.host_attn.cancel(t);
      sh_.host_attn.wait(t);
    } catch (...) {  // the step failed already; its partials are not needed
    }
  }
  active_ = false;
}

bool HybridRunner::reads_query(const Backend& be) const {
  return be.host_accessible() || (sh_.geo.window == 0 && reads_query_to_select());
}

bool HybridRunner::host_async(const Seq& s, int32_t layer) const {
  return s.decode && s.kv->table(layer).host_tokens > 0;
}

void HybridRunner::ensure_rows(int64_t rows) {
  if (rows <= cap_rows_) return;
  // Only between steps, with every host batch reaped: nothing reads the old buffers.
  const int64_t cap = std::max(rows, cap_rows_ * 3 / 2);
  const int64_t qd = int64_t{sh_.shape.n_head_q} * sh_.shape.head_dim;
  const int64_t part = qd + sh_.shape.n_head_q;
  const int64_t kvd = int64_t{sh_.shape.n_head_kv} * sh_.shape.head_dim;
  queries_ = Buffer();
  partials_ = Buffer();
  queries_ = Buffer::host(sh_.backend, DType::kF32, {sh_.shape.n_layer, cap * qd});
  partials_ = Buffer::host(sh_.backend, DType::kF32, {sh_.shape.n_layer, cap * part});
  if (sh_.scatter != nullptr && sh_.rows.host_side()) {  // hgca's jobs read the rows
    rows_stage_ = Buffer();
    rows_stage_ =
        Buffer::host(sh_.backend, DType::kF32, {sh_.shape.n_layer, cap * (part + 2 * kvd)});
  }
  cap_rows_ = cap;
}

float* HybridRunner::layer_q(int32_t layer) const {
  return queries_.as<float>() +
         int64_t{layer} * cap_rows_ * int64_t{sh_.shape.n_head_q} * sh_.shape.head_dim;
}

AttnPartial HybridRunner::layer_partial(int32_t layer, int64_t rows) const {
  const int64_t hq = sh_.shape.n_head_q, d = sh_.shape.head_dim;
  float* o = partials_.as<float>() + int64_t{layer} * cap_rows_ * hq * (d + 1);
  float* lse = o + cap_rows_ * hq * d;
  const MemoryKind mem = partials_.view().memory;
  return AttnPartial{TensorView(o, DType::kF32, {rows, hq, d}, mem),
                     TensorView(lse, DType::kF32, {rows, hq}, mem)};
}

TensorView HybridRunner::query_flag(int32_t layer) const {
  return TensorView(flags_.as<int32_t>() + layer, DType::kI32, {1}, flags_.view().memory);
}

TensorView HybridRunner::job_flag(int32_t layer) const {
  return TensorView(flags_.as<int32_t>() + 2 * sh_.shape.n_layer + layer, DType::kI32, {1},
                    flags_.view().memory);
}

TensorView HybridRunner::partial_flag(int32_t layer) const {
  return TensorView(flags_.as<int32_t>() + sh_.shape.n_layer + layer, DType::kI32, {1},
                    flags_.view().memory);
}

AttnPartial HybridRunner::scratch(int64_t n) {
  if (n > tmp_rows_) {
    tmp_o_ = Buffer(sh_.backend, DType::kF32, {n, sh_.shape.n_head_q, sh_.shape.head_dim});
    tmp_lse_ = Buffer(sh_.backend, DType::kF32, {n, sh_.shape.n_head_q});
    tmp_rows_ = n;
  }
  return AttnPartial{tmp_o_.view().slice(0, n), tmp_lse_.view().slice(0, n)};
}

void HybridRunner::prefetch(Backend& be, int32_t layer, const TensorView& q, int64_t row0) {
  TANDEM_CHECK(active_ && layer >= 0 && layer < sh_.shape.n_layer, "prefetch of layer ", layer);
  TANDEM_CHECK(!slots_[static_cast<size_t>(layer)].ticket, "prefetch of layer ", layer,
               " while one is in flight");
  bool any = false;
  for (const Seq& s : seqs_) any |= host_async(s, layer);
  if (!any) return;
  // The host reads the query only where reading it costs nothing or the selection runs here;
  // otherwise the backend hands it to the workers, and this thread goes on.
  submit(be, layer, q, row0, reads_query(be) ? host_readable(be, q, q_stage_) : nullptr);
}

}  // namespace tandem
