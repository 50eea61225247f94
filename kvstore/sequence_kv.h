// SequenceKv: one sequence's KV cache. The forward pass meets the KV cache a step at a time for
// the whole batch (kvstore/kv_step.h): each layer hands over the new tokens' k/v and their
// queries, the store keeps the k/v and returns the attention partials. DenseKv is the plain
// contiguous cache (the reference); the hybrid two-tier store (kvstore/hybrid_kv.h) implements
// the same interface and attends a batch of its sequences at once.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace tandem {

class KvStepRunner;

// Counters of the host side, summed over steps, layers and KV heads (zero for dense sequences).
struct HostStats {
  int64_t host_entries = 0;   // host tokens x KV heads that decode steps could attend
  int64_t attended = 0;       // of which the policy selected
  int64_t decode_layers = 0;  // (layer, sequence) decode attentions
  // --similarity-reuse: (layer, KV head) decode selections looked up, and those that reused the
  // kept selection.
  int64_t reuse_lookups = 0, reuse_hits = 0;
  // --sparse topk: per (layer, decode step) the CPU compute ratio (host tokens the CPU attends /
  // the top-k budget, topk_blocks blocks or the host tokens if fewer; averaged over KV heads),
  // summed, and how many were summed. Below 1 only with --device-budget (resident blocks are
  // the device's).
  double ratio_sum = 0;
  int64_t ratio_count = 0;
  // --device-budget: recalls of a (layer's) resident set, blocks copied to the device by them
  // (the post-prefill choice included) and their bytes, and the decode steps between each recall
  // and the layer's previous one (or its post-prefill choice), summed.
  int64_t recalls = 0, recall_blocks = 0, recall_bytes = 0, recall_steps = 0;
  // --value-offload: the key quantisation's error on the scaled logits |z~ - z|, measured over
  // every host entry and query head of a sample of the scored (sequence, layer, KV head) items
  // (kvstore/key_quant.h): how many logits, their summed and largest absolute error.
  int64_t quant_logits = 0;
  double quant_err_sum = 0, quant_err_max = 0;
  // Bytes of host KV the host attention read for the selected entries (K and V; V only under
  // --value-offload, whose scores come from the codes).
  int64_t host_bytes_read = 0;
  // The share of the host entries the policy attended (0 without any).
  double attended_fraction() const {
    return host_entries > 0 ? static_cast<double>(attended) / static_cast<double>(host_entries)
                            : 0.0;
  }
  double reuse_hit_ratio() const {
    return reuse_lookups > 0 ? static_cast<double>(reuse_hits) / static_cast<double>(reuse_lookups)
                             : 0.0;
  }
  double cpu_compute_ratio() const {
    return ratio_count > 0 ? ratio_sum / static_cast<double>(ratio_count) : 0.0;
  }
  double mean_recall_interval() const {
    return recalls > 0 ? static_cast<double>(recall_steps) / static_cast<double>(recalls) : 0.0;
  }
  double quant_err_mean() const {
    return quant_logits > 0 ? quant_err_sum / static_cast<double>(quant_logits) : 0.0;
  }
  HostStats& operator+=(const HostStats& o) {
    ratio_sum += o.ratio_sum;
    ratio_count += o.ratio_count;
    recalls += o.recalls;
    recall_blocks += o.recall_blocks;
    recall_bytes += o.recall_bytes;
    recall_steps += o.recall_steps;
    host_entries += o.host_entries;
    attended += o.attended;
    decode_layers += o.decode_layers;
    reuse_lookups += o.reuse_lookups;
    reuse_hits += o.reuse_hits;
    quant_logits += o.quant_logits;
    quant_err_sum += o.quant_err_sum;
    quant_err_max = quant_err_max > o.quant_err_max ? quant_err_max : o.quant_err_max;
    host_bytes_read += o.host_bytes_read;
    return *this;
  }
};

class SequenceKv {
 public:
  virtual ~SequenceKv() = default;
  // Tokens stored for every layer (the positions of the next step start here).
  virtual int32_t length() const = 0;
  // Largest length this sequence may reach.
  virtual int32_t capacity() const = 0;
  // After every layer of a step ran: the n new tokens become part of the sequence.
  virtual void advance(int32_t n) = 0;
  // Stores n tokens' k and v for one layer without attending: KV computed elsewhere, or the
  // synthetic context of a benchmark (`bench-decode --fill import`). k, v are host memory, f32
  // [n, n_head_kv, head_dim], for positions length() .. length()+n-1; every layer imports the
  // same n, then advance(n). Imported tokens carry no attention evidence: a hybrid store gives
  // them MAW 0, so hgca selects none of them once they reach the host (full and topk do not read
  // MAW).
  virtual void import_kv(Backend& backend, int32_t layer, const float* k, const float* v,
                         int32_t n) = 0;
  // The runner that attends this sequence's steps together with others of the same store; null
  // where each sequence attends on its own (attend below).
  virtual KvStepRunner* step_runner() const { return nullptr; }
  // One layer of a step with n new tokens at positions length() .. length()+n-1, for a sequence
  // without a runner: k, v [n, n_head_kv, head_dim] f32 are stored, then q [n, n_head_q,
  // head_dim] f32 attends causally to every stored token including the new ones -> out.o
  // [n, n_head_q, head_dim], out.lse [n, n_head_q]. q_pos i32 [n] holds the positions.
  virtual void attend(Backend& backend, int32_t layer, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& q_pos, const AttnPartial& out);
  virtual HostStats host_stats() const { return {}; }
};

struct KvShape {
  int32_t n_layer = 0;
  int32_t n_head_q = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;  // softmax scale (1/sqrt(head_dim))
};

// Contiguous cache in backend memory: per layer K and V of [capacity, n_head_kv, head_dim], stored
// as `dtype` (f32, or f16/bf16 as --dense --kv-dtype asks: half the bytes, each element rounded
// once when it is stored, as llama.cpp's default f16 cache is). Each KV head's rows lie together
// ([n_head_kv, capacity, head_dim] in memory; attention takes the strided [T, n_head_kv, head_dim]
// view): a head's keys are then one contiguous run that the hardware prefetchers stream, where
// rows of all heads interleaved had each head read head_dim of every n_head_kv * head_dim
// elements (the CPU backend's decode attention at depth 4096 of the 1B model: 1.3-1.6x faster).
class DenseKv final : public SequenceKv {
 public:
  DenseKv(Backend& backend, const KvShape& shape, int32_t capacity, DType dtype = DType::kF32);
  int32_t length() const override { return length_; }
  int32_t capacity() const override { return capacity_; }
  void attend(Backend& backend, int32_t layer, const TensorView& q, const TensorView& k,
              const TensorView& v, const TensorView& q_pos, const AttnPartial& out) override;
  void advance(int32_t n) override;
  void import_kv(Backend& backend, int32_t layer, const float* k, const float* v,
                 int32_t n) override;

 private:
  // Layer l's K or V as the [capacity, n_head_kv, head_dim] view attention() takes.
  TensorView rows(const std::vector<Buffer>& kv, int32_t layer) const;

  KvShape shape_;
  int32_t capacity_;
  DType dtype_;
  int32_t length_ = 0;
  std::vector<Buffer> k_, v_;  // per layer
};

}  // namespace tandem
