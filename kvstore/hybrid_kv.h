// HybridKv: one sequence's two-tier KV cache. Per layer: the first `sinks` tokens and a ring of
// recent blocks (`window` tokens) on the device, every older token in host blocks with its MAW
// values and a per-block Quest digest. Each step's attention is the LSE merge of the device
// partial (sinks + window + the step's own tokens) and the host partial over the entries the
// sparse policy selects, computed by HostAttention on CPU cores, in parallel or one layer ahead.
//
// Device attention and the merge run on the backend. The host side reads the step's q, k, v and
// the device lse, and keeps the MAW values; where the backend's memory is not host-accessible
// those are downloaded (synchronously for now), device blocks are written through a host mirror
// and uploaded, MAW lives in the mirror only, eviction copies from the mirror, and for an exact
// prefill each host block is uploaded before the backend reads it.
//
// A decode step's host partial is handed over through host flags (kernels/backend.h), per layer:
// the query the CPU workers read is written into allocate_host memory, by the host where it has
// the query anyway, else by the backend's queue, which then raises the layer's query flag (the
// batch starts when it sees it); the workers write the partial into allocate_host memory and
// raise the layer's partial flag; the backend's merge waits for that flag and reads the partial
// in place. On a device backend the thread that drives it thus never waits for the CPU workers
// (nor, where the host does not need the query itself, for the device); on the CPU backend the
// wait lends the thread to the workers, as before.
#pragma once

#include <deque>
#include <optional>
#include <vector>

#include "cpu_attn/host_attention.h"
#include "kvstore/block_pool.h"
#include "kvstore/kv_config.h"
#include "kvstore/sequence_kv.h"

namespace tandem {

// Byte layout of the blocks of one layer (shared by every sequence of a KvStore).
struct BlockLayout {
  int32_t tokens = 0, n_head_kv = 0, head_dim = 0;
  DType dtype = DType::kF32;
  // Device block: K [tokens, n_head_kv, head_dim], V likewise, MAW f32 [tokens, n_head_kv].
  int64_t dev_kv_bytes() const {
    return int64_t{tokens} * n_head_kv * head_dim * dtype_size(dtype);
  }
  int64_t dev_bytes() const { return 2 * dev_kv_bytes() + int64_t{tokens} * n_head_kv * 4; }
  // Host block: K [n_head_kv, tokens, head_dim], V likewise, MAW f32 [n_head_kv, tokens],
  // digest min and max f32 [n_head_kv, head_dim] each.
  int64_t host_bytes() const {
    return 2 * dev_kv_bytes() + int64_t{tokens} * n_head_kv * 4 +
           2 * int64_t{n_head_kv} * head_dim * 4;
  }
};

// Backend memory that an exact prefill on a device backend uploads a layer's host blocks into,
// one after the other, to attend them in one paged call. Shared by the sequences of a KvStore
// (they run one at a time on one stream, so the next upload is ordered after the last read);
// grows to the largest host part seen.
struct HostSpanStaging {
  BackendBuffer k, v;
  int64_t elems = 0;  // capacity of each, in KV elements
};

// Counters of the host side, summed over steps, layers and KV heads.
struct HostStats {
  int64_t host_entries = 0;   // host tokens x KV heads that decode steps could attend
  int64_t attended = 0;       // of which the policy selected
  int64_t decode_layers = 0;  // (layer, sequence) decode attentions
};

class HybridKv final : public SequenceKv {
 public:
  HybridKv(Backend& backend, const KvShape& shape, const KvConfig& cfg, const BlockLayout& layout,
           int32_t capacity, BlockPool& device, BlockPool& host, HostAttention& host_attn,
           HostSpanStaging& staging);
  ~HybridKv() override;

  int32_t length() const override { return length_; }
  int32_t capacity() const override { return capacity_; }
  void attend(Backend& backend, int32_t layer, const TensorView& q, const TensorView& k,
              const TensorView& v, const TensorView& q_pos, const AttnPartial& out) override;
  void advance(int32_t n) override;
  void import_kv(Backend& backend, int32_t layer, const float* k, const float* v,
                 int32_t n) override;
  void begin_step(bool decode, bool observe) override;
  bool wants_prefetch() const override;
  bool prefetch_oracle() const override;
  void prefetch(Backend& backend, int32_t layer, const TensorView& q_pred) override;

  // Blocks held per tier (all layers), and what growing by n tokens would add on the device.
  int64_t device_blocks() const;
  int64_t host_blocks() const;
  // Device blocks (all layers) a sequence of `tokens` tokens holds under cfg.
  static int64_t device_blocks_for(const KvConfig& cfg, int32_t n_layer, int32_t tokens);
  const HostStats& stats() const { return stats_; }
  // The MAW value of the token at `pos` (< length()) for one KV head, wherever it lives.
  float maw_of(int32_t layer, int32_t pos, int32_t kv_head) const;

 private:
  struct Layer {
    int32_t sink = -1;           // device block holding the sink tokens
    std::deque<int32_t> window;  // device blocks, oldest first; the last may be partial
    int32_t window_tokens = 0;
    std::vector<int32_t> host;  // host blocks, oldest first; all full except with window 0
    int32_t host_tokens = 0;
    // Host partial of a decode step in flight (parallel or ahead), and what its work points to.
    std::optional<HostAttention::Ticket> ticket;  // submitted, merge not queued yet
    // Merge queued on a backend that did not wait on the host: the batch is waited on (its
    // ticket freed, an error reported) at the next begin_step, when it is long done.
    std::optional<HostAttention::Ticket> merged;
    uint32_t submitted = 0;     // batches of this layer so far: the values its flags reach
    float* host_o = nullptr;    // [n_head_q, head_dim] in partials_
    float* host_lse = nullptr;  // [n_head_q] in partials_
    // The query the work reads: a copy, since the caller's (e.g. the model's predicted-query
    // buffer in ahead mode) is overwritten by the next layer before this one is merged.
    float* host_q = nullptr;                      // [n_head_q, head_dim] in queries_
    std::vector<std::vector<HostBlockRef>> refs;  // per KV head
    std::vector<std::vector<int32_t>> idx;        // per KV head: selected rows, all blocks
  };

  // Device-side views of a block (backend memory).
  TensorView dev_k(int32_t id, int32_t rows) const;
  TensorView dev_v(int32_t id, int32_t rows) const;
  // The host's side of a device block (the block itself, or its mirror): K, V and the MAW.
  uint8_t* mirror_k(int32_t id) const;
  uint8_t* mirror_v(int32_t id) const;
  float* dev_maw(int32_t id) const;
  // Rows [row0, row0 + rows) of a block's K and V, mirror -> device (mirrored pools only).
  void upload_rows(int32_t id, int32_t row0, int32_t rows);
  // Host-side pointers of a block.
  uint8_t* host_k(int32_t id) const;
  uint8_t* host_v(int32_t id) const;
  float* host_maw(int32_t id) const;
  float* host_kmin(int32_t id) const;
  float* host_kmax(int32_t id) const;

  int32_t device_tokens(const Layer& l) const;
  // Whether submit_host reads the query on the host (topk selects blocks with it).
  bool selection_reads_query() const { return cfg_.sparse == SparsePolicy::kTopk; }
  // The host part of a decode step for one query q [1, n_head_q, head_dim] (backend memory):
  // qh is the same query on the host, or null to have the backend hand it to the workers.
  void submit_host(Backend& be, Layer& l, int32_t layer, const TensorView& q, const float* qh);
  // The i32 [1] host flags of a layer: what its query and its partial have reached.
  TensorView query_flag(int32_t layer) const;
  TensorView partial_flag(int32_t layer) const;
  // out <- attention over every host entry (exact), for any number of queries.
  void host_partial_dense(Backend& be, Layer& l, const TensorView& q, const TensorView& q_pos,
                          const AttnPartial& out);
  // out <- attention over sinks + window + the step's own k/v (causal).
  void device_partial(Backend& be, Layer& l, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& q_pos, const AttnPartial& out);
  // out <- out merged with attention over one span.
  void add_span(Backend& be, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& q_pos, int64_t k_pos0, const AttnPartial& out, bool& first);
  // The host partial of a decode step merged into out, after the backend waited for it.
  void merge_host(Backend& be, Layer& l, int32_t layer, const AttnPartial& out);
  void update_maw(Layer& l, const float* q, const float* lse_dev, const float* k_new);
  // n rows of k and v ([n, n_head_kv, head_dim] f32) stored at length_...: k, v in host memory
  // (may be null where the device pool has no host side, the window is not 0 and k_dev, v_dev,
  // the same rows in backend memory, are given); without a host side, device rows are written
  // by backend copies from k_dev/v_dev, or converted and uploaded from k/v.
  void store(Layer& l, const float* k, const float* v, const TensorView& k_dev,
             const TensorView& v_dev, int64_t n, bool with_maw);
  // Rows [slot, slot + len) of device block id <- rows [src, src + len) of the step's k and v
  // (device pools without a host side).
  void write_device_rows(int32_t id, int32_t slot, int32_t len, int64_t src, const float* k,
                         const float* v, const TensorView& k_dev, const TensorView& v_dev);
  void append_host_row(Layer& l, const float* k_row_heads, const float* v_row_heads,
                       const float* maw_heads);
  void evict_oldest(Layer& l);
  // q [n, n_head_q, head_dim] and lse [n, n_head_q] of the prompt chunk, host memory.
  void observe_prompt(Layer& l, const float* q, const float* lse, int64_t n);
  AttnPartial scratch(int64_t n);

  Backend& backend_;
  KvShape shape_;
  KvConfig cfg_;
  BlockLayout layout_;
  int32_t capacity_;
  int32_t length_ = 0;
  BlockPool& device_;
  BlockPool& host_;
  HostAttention& host_attn_;
  std::vector<Layer> layers_;
  bool decode_ = false, observe_ = false;
  int32_t sinks_ = 0;              // effective sinks (0 when everything lives on the host)
  BackendBuffer tmp_o_, tmp_lse_;  // partial of one span (backend memory)
  int64_t tmp_rows_ = 0;
  Buffer new_maw_;
  // Where the host cannot read backend memory: the host blocks as uploaded for the backend, and
  // the step's activations as downloaded for the host.
  HostSpanStaging& staging_;
  std::vector<float> q_stage_, lse_stage_, k_stage_, v_stage_;
  std::vector<float> row_buf_;         // converted K/V rows
  std::vector<float> q_scaled_;        // update_maw's scale * q
  std::vector<int64_t> page_offsets_;  // pages of an attention_paged call
  // The host partials of every layer, [n_layer, n_head_q * (head_dim + 1)]: host memory the
  // backend's merge reads in place (pinned and mapped on a GPU: no upload). The queries the host
  // work reads, [n_layer, n_head_q * head_dim], which the backend may write in place. The flags,
  // i32 [2, n_layer]: per layer the query's, then the partial's. All from allocate_host.
  BackendBuffer partials_, queries_, flags_;
  std::vector<uint8_t> evict_k_, evict_v_, rows_stage_;  // device rows passing through the host
  HostStats stats_;
};

}  // namespace tandem
