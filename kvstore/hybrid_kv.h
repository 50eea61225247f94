// HybridKv: one sequence's two-tier KV cache. Per layer (a LayerTable): the first `sinks` tokens
// and a ring of recent blocks (`window` tokens) on the device, every older token in host blocks
// with its MAW values and a per-block Quest digest.
//
// This class keeps the blocks: it stores a step's rows (evicting the oldest window block to the
// host tier when the window is full), seeds and updates the MAW values hgca selects by. The
// attention over the blocks runs for a whole batch at a time (kvstore/hybrid_step.h).
#pragma once

#include <algorithm>
#include <vector>

#include "cpu_attn/host_attention.h"
#include "kvstore/block_access.h"
#include "kvstore/block_table.h"
#include "kvstore/device_rows.h"
#include "kvstore/kv_config.h"
#include "kvstore/prefix_cache.h"
#include "kvstore/resident.h"
#include "kvstore/sequence_kv.h"
#include "kvstore/similarity_reuse.h"

namespace tandem {

class HybridRunner;
class HybridKv;
struct LayerSpans;

// The host side of one layer's stores in a step whose host-side byte work waits for the device
// (a decode step on a device backend): store records it, a host job runs it once the device has
// copied what it reads into pinned memory (kvstore/hybrid_jobs.cpp), so no host thread waits
// for the device within the step. The device side (new rows into device blocks) is a scatter
// on the device, as ever.
struct LayerJob {
  struct Move {  // a window block's rows into a new host block
    HybridKv* kv;
    int32_t dev_id, host_id;
    float* maw;           // the host block's MAW values (the sequence's)
    int64_t staged = -1;  // slot of the eviction staging the device copies it into; -1: the
                          // host side of the block (its mirror)
    bool shared = false;  // host_id is a prefix-cache entry's copy of the rows: MAW values only
  };
  struct Put {  // a new row into the host side (mirror) of a device block
    HybridKv* kv;
    int32_t dev_id, slot;
    int64_t row;       // row of the step: the staged k and v
    const float* maw;  // its MAW values (Hkv), written by the job before the puts
  };
  std::vector<Move> moves;
  std::vector<Put> puts;
  void clear() {
    moves.clear();
    puts.clear();
  }
};

// The staging of host blocks for the readers that take K by rows [Hkv, tokens, d], as the device
// blocks hold it, where the host block keeps it by channel: the exact prefill's paged attention
// over a layer's host blocks (kvstore/hybrid_attend.cpp) and --device-budget's copies into device
// blocks (kvstore/resident.cpp). One per store, used by the thread that drives the backend; each
// part grows to the largest use seen and is never shrunk.
struct HostSpanStaging {
  // Backend memory that an exact prefill on a device backend uploads a layer's host blocks into,
  // one after the other, to attend them in one paged call.
  Buffer k, v;
  int64_t elems = 0;  // capacity of each, in KV elements
  // Host memory (the host heap: pageable, never pinned) for host blocks' K transposed back to
  // rows (BlockAccess::host_k_as_rows) and V by tiles put back in rows (host_v_as_rows; on a
  // host-accessible backend the exact prefill's V beside K either way). Before an upload each
  // holds one block's: Backend::upload lets its source be reused once the call returns (a device
  // backend has staged pageable memory by then), so the next block may overwrite it. Read in
  // place, by a host-accessible backend's op, which has finished when the call returns, it holds
  // every page of the call.
  Buffer host_k, host_v;

  // b holding at least `bytes` bytes (its contents are not kept when it grows); returns them.
  static uint8_t* reserve(Buffer& b, int64_t bytes) {
    if (b.empty() || b.view().nbytes() < bytes) {
      const int64_t cap = std::max(bytes, b.empty() ? int64_t{0} : b.view().nbytes() * 3 / 2);
      b = Buffer();  // free the old bytes before taking the new ones
      b = Buffer(DType::kU8, {cap});
    }
    return b.as<uint8_t>();
  }

  // Host block id's V by rows, [Hkv, tokens, d] elements of the store's dtype, as the source of an
  // upload: the block's own bytes where it keeps V by rows, else its tiles put back in rows in
  // host_v (valid until the next call).
  TensorView v_rows(const BlockAccess& bk, int32_t id) {
    const int64_t bytes = bk.layout.dev_kv_bytes(), n = bytes / dtype_size(bk.layout.dtype);
    if (!bk.layout.host_v_tiled())
      return TensorView(bk.host_v(id), bk.layout.dtype, {n}, bk.host.memory());
    uint8_t* rows = reserve(host_v, bytes);
    bk.host_v_as_rows(id, rows);
    return TensorView(rows, bk.layout.dtype, {n}, host_v.view().memory);
  }
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
  // Device-side copies of a step's rows into the device blocks (a decode step on a device
  // backend: the same object as rows for device-only pools); null on a host-accessible backend.
  DeviceRows* scatter = nullptr;
  HostAttention& host_attn;
  HostSpanStaging& staging;
  HybridRunner* runner = nullptr;  // set by the store once built
  PrefixCache* cache = nullptr;    // the store's prefix cache; null: none (--no-prefix-cache)
  // --similarity-reuse over every sequence: lookups and hits (the engine thread counts them).
  int64_t reuse_lookups = 0, reuse_hits = 0;
  // Over every sequence (the engine thread counts them): topk's CPU compute ratios,
  // --device-budget's recalls, the --value-offload quantisation error sampled and the host KV
  // bytes read (the ratio, recall, quant_* and host_bytes_read fields of HostStats).
  HostStats totals{};
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
  // Between steps the host work of the last one is reaped first (on a device backend its
  // selections are counted when it is known done).
  HostStats host_stats() const override;

  // Blocks held per tier (all layers).
  int64_t device_blocks() const;
  // Device blocks (all layers) a sequence of `tokens` tokens holds under cfg (its resident
  // reserve included).
  static int64_t device_blocks_for(const KvConfig& cfg, int32_t n_layer, int32_t tokens) {
    return (TableGeometry(cfg).counts(tokens).device_blocks + resident_reserve(cfg, tokens)) *
           n_layer;
  }
  int64_t host_blocks() const;
  const HostStats& stats() const { return stats_; }
  HostStats& stats() { return stats_; }
  // The MAW value of the token at `pos` (< length()) for one KV head, wherever it lives.
  float maw_of(int32_t layer, int32_t pos, int32_t kv_head) const;
  const LayerTable& table(int32_t layer) const { return layers_[static_cast<size_t>(layer)]; }
  int32_t device_tokens(int32_t layer) const;
  HybridShared& shared() const { return shared_; }

  // ---- --device-budget: the resident set (kvstore/resident.h, resident.cpp) ----
  // Device blocks per layer held for the resident set (resident_reserve of its length, taken
  // by its last prefill chunk and decode steps).
  int32_t reserved() const {
    return resident_.empty() ? 0 : static_cast<int32_t>(resident_[0].dev.size());
  }
  bool has_reserve() const { return reserved() > 0; }
  // Takes `blocks` more device blocks per layer for the resident set, empty (the step's plan
  // counted them).
  void reserve_resident(int32_t blocks);
  ResidentLayer& resident(int32_t layer) { return resident_[static_cast<size_t>(layer)]; }
  const ResidentLayer& resident(int32_t layer) const {
    return resident_[static_cast<size_t>(layer)];
  }
  // Copies the host blocks the given slots of a layer name into their device blocks (be.upload,
  // queued after the ops before it on a device backend); counts blocks and bytes. Returns bytes.
  int64_t place_resident(Backend& be, int32_t layer, std::span<const int32_t> slots);
  // The post-prefill set of a layer (after the prompt's last chunk is stored): the blocks of
  // largest Quest bound for q [Hq, d] (the prompt's last query) summed over KV heads.
  void choose_resident(Backend& be, int32_t layer, const float* q);

  // ---- the prefix cache (kvstore/prefix_cache.h; the engine thread, between steps) ----
  // An empty sequence takes the cached chain's tokens (chunks 0 .. chain.size()-1 of tokens):
  // the host blocks of the chunks that stay on the host are shared (referenced, read-only), the
  // sinks and the chunks of the device window are copied into its own device blocks. Its MAW
  // values start at 0 (the prompt's last chunk seeds them, as after a prefill).
  void adopt(std::span<PrefixCache::Entry* const> chain);
  // Makes the full chunks of the first length() tokens (tokens: at least those) adoptable while
  // the sequence runs: a chunk not cached yet becomes an entry (a private host block is handed
  // over and then shared by this sequence; a window block is copied into a new host block while
  // the host pool has room). A chunk cached by another sequence stays private here.
  void publish(std::span<const int32_t> tokens);
  // publish, then every block is given back: the sequence is empty afterwards. Not for a
  // sequence a failed step may have half written.
  void release(std::span<const int32_t> tokens);
  // Per chunk, the cache entry this sequence references (null: none; kvstore/prefix_cache.h).
  const std::vector<PrefixCache::Entry*>& entries() const { return entry_of_; }

  // ---- one layer of a step (called by the batch step) ----
  // Rows [i0, i0 + n) of src become this sequence's tokens length() .. length()+n-1 of the layer
  // (the window's oldest block moving to the host when full); maw: their MAW values, Hkv floats
  // for every row (null: 0). With a job, the tables change now, the device rows go by the
  // scatter strategy, and the host-side bytes (block moves, mirror rows) are recorded in the job
  // (maw is then read when it runs).
  void store(int32_t layer, const RowSource& src, int64_t i0, int64_t n, const float* maw,
             LayerJob* job = nullptr);
  // The decode query q [Hq, d] (host) with its device partial's lse [Hq] updates the MAW of every
  // device token of a layer as the step found it (at: the plan's spans, so that it may run after
  // the step's store changed the table); new_maw [Hkv] receives the new token's own, from
  // k_new [Hkv, d].
  void update_maw(const LayerSpans& at, const float* q, const float* lse, const float* k_new,
                  float* new_maw);
  // A block's b rows (k, v: device layout [b, Hkv, d] bytes; maw [b, Hkv] or null: 0) into the
  // empty host block host_id: transposed to the host layout, with the digest.
  void move_rows(int32_t host_id, float* maw_block, const uint8_t* k, const uint8_t* v,
                 const float* maw);
  // A block's MAW values (device layout [b, Hkv], or null: 0) into a host block's [Hkv, b].
  void move_maw(float* maw_block, const float* maw) const;
  // The last queries of a prompt chunk (q [n, Hq, d], lse [n, Hq], host) seed the MAW of every
  // token of the layer, the chunk's included (call after store).
  void observe_prompt(int32_t layer, const float* q, const float* lse, int64_t n);
  // --similarity-reuse: a layer's kept selections and thresholds (this sequence's own, never its
  // shared blocks': a sequence that adopts a cached prefix starts with none).
  ReuseLayer& reuse(int32_t layer) { return reuse_[static_cast<size_t>(layer)]; }
  // The last queries of the prompt's last chunk (as observe_prompt, after store) measure the
  // layer's query-head importance: their softmax mass on the host entries (kvstore/
  // similarity_reuse.h). Nothing on the host: importance stays 1 (every threshold eta).
  void observe_importance(int32_t layer, const float* q, const float* lse, int64_t n);

 private:
  void append_host_row(LayerTable& l, const float* k_row_heads, const float* v_row_heads,
                       const float* maw_heads);
  // codes: keep the block's --value-offload key codes current (else the caller codes the block
  // once it is written: quantize_head_rows).
  void write_host_row(int32_t id, float* maw_block, int32_t slot, const float* k_row_heads,
                      const float* v_row_heads, const float* maw_heads, bool codes);
  // --value-offload: rows [0, rows) of head g of a host block coded over its digest.
  void quantize_head_rows(int32_t id, int32_t g, int32_t rows) const;
  int32_t new_host_block(LayerTable& l);
  void clear_digest(int32_t id) const;              // an empty digest for a new host block
  void push_host(LayerTable& l, int32_t id) const;  // a host block at the end, MAW values 0
  void evict_oldest(LayerTable& l, LayerJob* job);
  // Chunk j of the sequence as a cache entry's host blocks (one per layer): its private host
  // blocks, or its window blocks copied into new ones; false when the host pool has no room.
  bool chunk_to_host(int32_t j, std::vector<int32_t>& ids);
  std::vector<uint8_t> sink_rows();  // per layer the sinks' K then V rows (device layout)
  void free_blocks();                // every block this sequence owns; its references dropped
  void free_resident();              // the resident set's device blocks

  HybridShared& shared_;
  int32_t capacity_;
  int32_t length_ = 0;
  std::vector<LayerTable> layers_;
  std::vector<ReuseLayer> reuse_;        // per layer (--similarity-reuse; else empty)
  std::vector<ResidentLayer> resident_;  // per layer once reserved (--device-budget; else empty)
  HostStats stats_;
  std::vector<float> row_k_, row_v_, q_scaled_;  // scratch
  std::vector<float> zero_maw_;                  // Hkv zeros: the MAW of rows stored without one
  // Per host block (chunk) j: the cache entry that owns it (referenced by this sequence), or
  // null for a block of its own. Shared or not, a chunk's blocks are so in every layer.
  std::vector<PrefixCache::Entry*> entry_of_;
};

}  // namespace tandem
