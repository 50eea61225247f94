// HybridKv: one sequence's two-tier KV cache. Per layer: the first `sinks` tokens and a ring of
// recent blocks (`window` tokens) on the device, every older token in host blocks with its MAW
// values and a per-block Quest digest. Each step's attention is the LSE merge of the device
// partial (sinks + window + the step's own tokens) and the host partial over the entries the
// sparse policy selects, computed by HostAttention on CPU cores, in parallel or one layer ahead.
//
// Device attention and the merge run on the backend. The host side reads the step's q, k, v and
// the device lse, and keeps the MAW values; where the backend's memory is not host-accessible
// those are downloaded (synchronously for now), device blocks are written through a host mirror
// and uploaded, MAW lives in the mirror only, eviction copies from the mirror, and the host
// partial (and, for an exact prefill, each host block) is uploaded before the backend reads it.
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
    std::optional<HostAttention::Ticket> ticket;
    float* host_o = nullptr;    // [n_head_q, head_dim] in partials_
    float* host_lse = nullptr;  // [n_head_q] in partials_
    // The query the work reads: a copy, since the caller's (e.g. the model's predicted-query
    // buffer in ahead mode) is overwritten by the next layer before this one is merged.
    std::vector<float> host_q;                    // [n_head_q, head_dim]
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
  void submit_host(Layer& l, const float* q);  // one decode query [n_head_q, head_dim]
  // out <- attention over every host entry (exact), for any number of queries.
  void host_partial_dense(Backend& be, Layer& l, const TensorView& q, const TensorView& q_pos,
                          const AttnPartial& out);
  // out <- attention over sinks + window + the step's own k/v (causal).
  void device_partial(Backend& be, Layer& l, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& q_pos, const AttnPartial& out);
  // out <- out merged with attention over one span.
  void add_span(Backend& be, const TensorView& q, const TensorView& k, const TensorView& v,
                const TensorView& q_pos, int64_t k_pos0, const AttnPartial& out, bool& first);
  // The host partial of a decode step merged into out (uploaded first where needed).
  void merge_host(Backend& be, Layer& l, const AttnPartial& out);
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
  // Where the host cannot read backend memory: the host partial and one host block (K, V) as
  // uploaded for the backend, and the step's activations as downloaded for the host.
  BackendBuffer part_o_, part_lse_;
  HostSpanStaging& staging_;
  std::vector<float> q_stage_, lse_stage_, k_stage_, v_stage_;
  std::vector<float> row_buf_;         // converted K/V rows
  std::vector<float> q_scaled_;        // update_maw's scale * q
  std::vector<int64_t> page_offsets_;  // pages of an attention_paged call
  // The host partials of every layer, [n_layer, n_head_q * (head_dim + 1)]: host memory the
  // backend's merge reads in place (pinned and mapped on a GPU: no upload).
  BackendBuffer partials_;
  std::vector<uint8_t> evict_k_, evict_v_, rows_stage_;  // device rows passing through the host
  HostStats stats_;
};

}  // namespace tandem
