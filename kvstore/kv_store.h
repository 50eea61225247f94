// KvStore: the facade the engine talks to. It owns the block pools of both tiers, the row
// strategy and the host attention workers, creates each sequence's KV (hybrid, or dense with
// --dense) and plans steps for the scheduler (KvPlanner). A batch of its hybrid sequences runs
// its steps through one runner (kvstore/hybrid_runner.h).
#pragma once

#include <memory>

#include "cpu_attn/host_attention.h"
#include "kvstore/block_pool.h"
#include "kvstore/hybrid_kv.h"
#include "kvstore/kv_config.h"
#include "kvstore/sequence_kv.h"
#include "kvstore/step_plan.h"

namespace tandem {

class HybridRunner;

class KvStore final : public KvPlanner {
 public:
  // max_sequences x max_context sizes the device pool when cfg.device_blocks is 0. The device
  // pool and dense caches are `backend` memory (the model's backend, which must outlive this).
  KvStore(Backend& backend, const KvShape& shape, const KvConfig& cfg, int32_t max_sequences,
          int32_t max_context);
  ~KvStore() override;

  // A hybrid sequence adopts the longest cached prefix of `tokens` (all but the last token at
  // most): it starts with length() tokens already stored.
  std::unique_ptr<SequenceKv> new_sequence(int32_t capacity,
                                           std::span<const int32_t> tokens = {}) override;
  // Leaves a hybrid sequence's full chunks of `tokens` in the prefix cache, then frees it.
  void release(std::unique_ptr<SequenceKv> kv, std::span<const int32_t> tokens) override;
  // Makes a running sequence's full chunks of `tokens` adoptable by others (a prompt whose
  // prefill finished: the other choices of an n > 1 request, concurrent requests with the same
  // prefix). Engine thread, between steps.
  void publish(SequenceKv& kv, std::span<const int32_t> tokens);
  int32_t prefix_unit() const override;
  StepPlan plan(std::span<const PlanRequest> batch) const override;
  // Host blocks a sequence of `tokens` tokens holds at its longest (thread-safe as above).
  int64_t host_blocks_for(int32_t tokens) const;
  // The host tier's bound in blocks (0: none) and bytes.
  int64_t host_blocks_limit() const { return host_ ? host_->limit() : 0; }
  int64_t host_budget_bytes() const { return host_budget_bytes_; }
  int64_t host_block_bytes() const { return host_ ? host_->block_bytes() : 0; }
  int64_t device_block_bytes() const { return device_ ? device_->block_bytes() : 0; }
  // Host blocks a step can still take: free within the bound, or held by evictable cache
  // entries.
  int64_t host_free() const;
  const PrefixCache* prefix_cache() const { return cache_.get(); }
  PrefixCache* prefix_cache() { return cache_.get(); }
  // Device blocks a new sequence of `tokens` tokens needs at its longest: a function of the
  // configuration only, so any thread may ask (Engine::submit does while the engine thread
  // allocates and frees; plan() also reads the pool's free count, which only that thread may).
  int64_t device_blocks_for(int32_t tokens) const;
  int64_t device_blocks_total() const override { return device_ ? device_->capacity() : 0; }

  const KvConfig& config() const { return cfg_; }
  int64_t device_blocks_used() const { return device_ ? device_->used() : 0; }
  int64_t host_blocks_used() const { return host_ ? host_->used() : 0; }
  int64_t host_blocks_total() const { return host_ ? host_->capacity() : 0; }
  HostAttention* host_attention() { return host_attn_.get(); }
  // --similarity-reuse lookups and hits over every sequence so far (engine thread; 0 without).
  int64_t reuse_lookups() const { return shared_ ? shared_->reuse_lookups : 0; }
  int64_t reuse_hits() const { return shared_ ? shared_->reuse_hits : 0; }
  // The host stats counted over every sequence so far (engine thread; zero without a host tier):
  // topk's CPU compute ratios, --device-budget's recalls, the --value-offload quantisation error
  // and the host KV bytes read.
  HostStats host_totals() const { return shared_ ? shared_->totals : HostStats{}; }
  // Host counters of a sequence (zero for dense ones).
  static HostStats stats_of(const SequenceKv& seq) { return seq.host_stats(); }

 private:
  Backend& backend_;
  KvShape shape_;
  KvConfig cfg_;
  std::unique_ptr<BlockPool> device_, host_;
  std::unique_ptr<HostAttention> host_attn_;
  std::unique_ptr<DeviceRows> rows_, scatter_;
  HostSpanStaging staging_;
  std::unique_ptr<HybridShared> shared_;
  std::unique_ptr<HybridRunner> runner_;
  std::unique_ptr<PrefixCache> cache_;
  int64_t host_budget_bytes_ = 0;
};

}  // namespace tandem
