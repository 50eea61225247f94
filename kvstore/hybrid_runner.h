// HybridRunner: the hybrid store's step for a whole batch (kvstore/kv_step.h). Per layer:
//   1. one host-attention submission for every decode sequence with host tokens (items over
//      sequences x KV heads), issued before the batch's device attention — in `ahead` mode during
//      the layer before, with the predicted query;
//   2. one device attention over every sequence's sinks, window pages and own new tokens;
//   3. hgca's MAW update, then one wait for the host partials (on a device backend a wait queued
//      on the device, on the flag the workers raise) and one merge over the batch's rows;
//   4. exact prefill chunks attend their host blocks (every policy is exact there);
//   5. the new rows are stored (one flush of the row strategy for the layer).
//
// The host partials and the queries the workers read live in allocate_host memory laid out by
// batch row, [n_layer][rows][...], so a device's merge reads them in place and one copy hands
// the workers a layer's queries; rows without host work hold the empty partial (lse -inf),
// which the merge leaves alone. The flags of kernels/backend.h order the device with the
// workers: the query flag (raised by the device after its copy of the queries) starts the
// batch, the partial flag (raised by the workers) releases the merge.
#pragma once

#include <optional>
#include <vector>

#include "kvstore/hybrid_kv.h"
#include "kvstore/key_quant.h"
#include "kvstore/kv_step.h"
#include "kvstore/step_plan.h"

namespace tandem {

// The plan of a candidate batch under a hybrid store's geometry (KvPlanner::plan).
StepPlan plan_hybrid(const HybridShared& shared, int64_t device_free,
                     std::span<const PlanRequest> batch);

class HybridRunner final : public KvStepRunner {
 public:
  explicit HybridRunner(HybridShared& shared);
  ~HybridRunner() override;

  std::unique_ptr<KvStep> begin(std::span<const StepRows> rows) override;
  // Frees the tickets of host batches merged on a device in earlier steps (done by then: the
  // host read that step's results back after the merges), reporting an error one of them raised.
  void reap();
  bool in_step() const { return active_; }
  // The plan of the step in flight (valid between begin and finish).
  const StepPlan& plan() const { return plan_; }

 private:
  friend class HybridStep;
  struct Seq {
    HybridKv* kv;
    int64_t row0;
    int32_t n;
    bool decode, observe;
  };
  struct Pick {       // what one item's selection reads
    size_t seq;       // index in seqs_ (and plan_.seqs)
    int32_t g;        // KV head
    float threshold;  // hgca's, from the device token count before the step's store
  };
  struct Slot {                                   // one layer's host work
    std::optional<HostAttention::Ticket> ticket;  // submitted this step, merge not queued yet
    // Merged on a backend that did not wait on the host: reaped at the next step.
    std::optional<HostAttention::Ticket> merged;
    uint32_t submitted = 0;       // batches so far: the values its flags reach
    std::vector<Pick> picks;      // per item; cleared once accounted
    std::vector<int64_t> picked;  // per item: rows selected
    std::vector<uint8_t> looked;  // per item: --similarity-reuse 0 off, 1 miss, 2 hit
    std::vector<std::vector<HostBlockRef>> refs;  // per item
    std::vector<std::vector<int32_t>> idx;        // per item: hgca's selected rows
    // --device-budget, per item: topk's selected blocks (resident ones included) and every
    // block's bound, what a recall ranks by.
    std::vector<std::vector<int32_t>> chosen;
    std::vector<std::vector<float>> bounds;
    // --value-offload: per item the approximate scores of its selected rows (HostBlockRef::s)
    // and, for the sampled items, the quantisation error measured (kvstore/key_quant.h).
    std::vector<std::vector<float>> scores;
    std::vector<QuantError> qerr;
    uint64_t scored = 0;  // items scored so far (every kQuantSampleEvery-th is measured)
  };

  void start(std::span<const StepRows> rows);
  void finish();
  void abort() noexcept;  // a step that failed: host work cancelled and waited for
  // Whether the host reads the query to submit a layer (in place, or to select on this thread).
  bool reads_query(const Backend& be) const;
  // Whether the policy's selection reads the query (topk's bounds, tau's scores).
  bool reads_query_to_select() const {
    return sh_.cfg.sparse == SparsePolicy::kTopk || sh_.cfg.sparse == SparsePolicy::kTau ||
           sh_.cfg.value_offload;
  }
  // Whether sequence s has host work in a decode step of this layer.
  bool host_async(const Seq& s, int32_t layer) const;
  void prefetch(Backend& be, int32_t layer, const TensorView& q, int64_t row0);
  void attend(Backend& be, int32_t layer, const TensorView& q, const TensorView& k,
              const TensorView& v, const TensorView& q_pos, const AttnPartial& out);
  // The host part of a decode step of `layer` for every sequence that has one: q holds rows
  // [row0, row0 + q.dim(0)) of the batch (backend memory); qh the same rows on the host, or null
  // to have the backend hand them to the workers.
  void submit(Backend& be, int32_t layer, const TensorView& q, int64_t row0, const float* qh);
  // Each item's selection (its blocks) by the policy, from the plan's snapshot of the layer.
  void pick(int32_t layer, Slot& slot, std::span<HostAttnItem> items);
  // The rows a layer's batch selected, into the sequences' stats and the plan (batch done).
  void account(int32_t layer);
  // topk's part of account (kvstore/hybrid_recall.cpp): each sequence's CPU compute ratio, and
  // the recall of its resident set when due: after the layer's merge (on a device backend, whose
  // merge does not wait for the host, when the batch is reaped before the next step), its copies
  // queued on the backend before the next step's attention of the layer.
  void account_topk(int32_t layer);
  // Every sequence's device partial (sinks, window pages, own tokens) into out.
  void device_partials(Backend& be, int32_t layer, const TensorView& q, const TensorView& k,
                       const TensorView& v, const TensorView& q_pos, const AttnPartial& out);
  // out (rows of one prefill chunk) merged with attention over all its host entries (exact).
  void host_partial_dense(Backend& be, const Seq& s, int32_t layer, const TensorView& q,
                          const TensorView& q_pos, const AttnPartial& out);
  void merge_host(Backend& be, int32_t layer, const AttnPartial& out);

  // ---- host jobs (kvstore/hybrid_jobs.cpp): a deferred step's host-side store work ----
  // Whether this step's host-side store work waits for the device in jobs: a decode-only step
  // on a device backend with a device window.
  bool defers() const { return defer_; }
  // q, the device partial's lse (before the merge), k and v of a layer's rows into pinned
  // memory, for hgca's job (the MAW update and the mirror's rows).
  void stage_rows(Backend& be, int32_t layer, const TensorView& q, const TensorView& k,
                  const TensorView& v, const TensorView& lse);
  // The device copies each block the layer's stores evict from a device-only pool into pinned
  // memory (before the rows scattered into freed blocks overwrite it).
  void stage_moves(Backend& be, LayerJob& job);
  // Raises the layer's job flag behind the device's copies and submits the job after the
  // previous one (jobs run in order: a block freed by one may be reused by the next).
  void launch_job(Backend& be, int32_t layer);
  void run_job(int32_t layer);
  void reap_jobs();
  void cancel_jobs() noexcept;
  void ensure_stage(int64_t evictions);
  // allocate_host views of a layer: queries [rows, Hq, d], partial o [rows, Hq, d], lse [rows, Hq].
  float* layer_q(int32_t layer) const;
  AttnPartial layer_partial(int32_t layer, int64_t rows) const;
  TensorView query_flag(int32_t layer) const;
  TensorView partial_flag(int32_t layer) const;
  TensorView job_flag(int32_t layer) const;
  struct StagedRows {        // a layer's rows staged for its host job (pinned), by batch row
    float *q, *lse, *k, *v;  // [rows, Hq, d], [rows, Hq], [rows, Hkv, d], [rows, Hkv, d]
  };
  StagedRows staged(int32_t layer) const;
  void ensure_rows(int64_t rows);
  AttnPartial scratch(int64_t n);

  HybridShared& sh_;
  std::vector<Slot> slots_;
  bool active_ = false;
  StepPlan plan_;
  std::vector<Seq> seqs_;
  int64_t rows_ = 0;                     // rows of the step
  int64_t ahead_lo_ = 0, ahead_hi_ = 0;  // rows that want a query of the next layer
  bool oracle_ = false;
  int64_t cap_rows_ = 0;       // rows the host buffers hold per layer
  Buffer queries_, partials_;  // allocate_host
  Buffer flags_;               // i32 [3, n_layer]: per layer the query's, the partial's, the job's
  bool defer_ = false;
  struct JobSlot {           // one layer's job
    LayerJob work;           // recorded by this step's stores
    std::vector<float> maw;  // per sequence: the new token's MAW values [Hkv]
    uint32_t raised = 0;     // jobs so far: the value its flag reaches
  };
  std::vector<JobSlot> jobs_;                       // per layer
  std::vector<HostAttention::Ticket> job_tickets_;  // in flight, oldest first
  uint64_t last_job_ = 0;                           // ticket id of the newest job
  Buffer rows_stage_;                               // allocate_host: stage_of, per layer
  Buffer evict_stage_;                              // allocate_host: evicted blocks' K and V
  int64_t evict_slots_ = 0, evict_used_ = 0;
  std::vector<int64_t> gather_offsets_;
  Buffer tmp_o_, tmp_lse_;  // one span's partial (backend memory)
  int64_t tmp_rows_ = 0;
  std::vector<float> q_stage_, k_stage_, v_stage_, lse_stage_, new_maw_;
  std::vector<int64_t> page_offsets_;
  std::vector<AttnSegment> segments_;
};

}  // namespace tandem
