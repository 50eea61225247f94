// HybridKv: one sequence's two-tier KV cache. Per layer (a LayerTable): the first `sinks` tokens
// and a ring of recent blocks (`window` tokens) on the device, every older token in host blocks
// with its MAW values and a per-block Quest digest.
//
// This class keeps the blocks: it stores a step's rows (evicting the oldest window block to the
// host tier when the window is full), seeds and updates the MAW values hgca selects by. The
// attention over the blocks runs for a whole batch at a time (kvstore/hybrid_step.h).
#pragma once

#include <vector>

#include "cpu_attn/host_attention.h"
#include "kvstore/block_access.h"
#include "kvstore/block_table.h"
#include "kvstore/device_rows.h"
#include "kvstore/kv_config.h"
#include "kvstore/sequence_kv.h"

namespace tandem {

class HybridRunner;

// Backend memory that an exact prefill on a device backend uploads a layer's host blocks into,
// one after the other, to attend them in one paged call; grows to the largest host part seen.
struct HostSpanStaging {
  Buffer k, v;
  int64_t elems = 0;  // capacity of each, in KV elements
};

// What the sequences of one store share: the configuration, the pools, the row strategy, the
// host attention workers and the batch state of the step in flight.
struct HybridShared {
  Backend& backend;
  KvShape shape;
  KvConfig cfg;
  TableGeometry geo;
  BlockAccess blocks;
  DeviceRows& rows;
  HostAttention& host_attn;
  HostSpanStaging& staging;
  HybridRunner* runner = nullptr;  // set by the store once built
};

class HybridKv final : public SequenceKv {
 public:
  HybridKv(HybridShared& shared, int32_t capacity);
  ~HybridKv() override;

  int32_t length() const override { return length_; }
  int32_t capacity() const override { return capacity_; }
  void advance(int32_t n) override;
  void import_kv(Backend& backend, int32_t layer, const float* k, const float* v,
                 int32_t n) override;
  KvStepRunner* step_runner() const override;
  HostStats host_stats() const override { return stats_; }

  // Blocks held per tier (all layers).
  int64_t device_blocks() const;
  // Device blocks (all layers) a sequence of `tokens` tokens holds under cfg.
  static int64_t device_blocks_for(const KvConfig& cfg, int32_t n_layer, int32_t tokens) {
    return TableGeometry(cfg).counts(tokens).device_blocks * n_layer;
  }
  int64_t host_blocks() const;
  const HostStats& stats() const { return stats_; }
  HostStats& stats() { return stats_; }
  // The MAW value of the token at `pos` (< length()) for one KV head, wherever it lives.
  float maw_of(int32_t layer, int32_t pos, int32_t kv_head) const;
  const LayerTable& table(int32_t layer) const { return layers_[static_cast<size_t>(layer)]; }
  int32_t device_tokens(int32_t layer) const;
  HybridShared& shared() const { return shared_; }

  // ---- one layer of a step (called by the batch step) ----
  // Rows [i0, i0 + n) of src become this sequence's tokens length() .. length()+n-1 of the layer
  // (the window's oldest block moving to the host when full); maw: their MAW values, Hkv floats
  // for every row (null: 0).
  void store(int32_t layer, const RowSource& src, int64_t i0, int64_t n, const float* maw);
  // The decode query q [Hq, d] (host) with its device partial's lse [Hq] updates the MAW of every
  // device token of the layer; new_maw [Hkv] receives the new token's own, from k_new [Hkv, d].
  void update_maw(int32_t layer, const float* q, const float* lse, const float* k_new,
                  float* new_maw);
  // The last queries of a prompt chunk (q [n, Hq, d], lse [n, Hq], host) seed the MAW of every
  // token of the layer, the chunk's included (call after store).
  void observe_prompt(int32_t layer, const float* q, const float* lse, int64_t n);

 private:
  void append_host_row(LayerTable& l, const float* k_row_heads, const float* v_row_heads,
                       const float* maw_heads);
  void evict_oldest(LayerTable& l);

  HybridShared& shared_;
  int32_t capacity_;
  int32_t length_ = 0;
  std::vector<LayerTable> layers_;
  HostStats stats_;
  std::vector<float> row_k_, row_v_, q_scaled_;  // scratch
  std::vector<float> zero_maw_;                  // Hkv zeros: the MAW of rows stored without one
};

}  // namespace tandem
