// SequenceKv: the one place the forward pass meets the KV cache. Each layer of a step hands it
// the new tokens' k/v and their queries; it stores the k/v and returns the attention partial.
// DenseKv is the plain contiguous cache (the reference); the hybrid two-tier store implements
// the same interface.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace tandem {

class SequenceKv {
 public:
  virtual ~SequenceKv() = default;
  // Tokens stored for every layer (the positions of the next step start here).
  virtual int32_t length() const = 0;
  // Largest length this sequence may reach.
  virtual int32_t capacity() const = 0;
  // One layer of a step with n new tokens at positions length() .. length()+n-1:
  //   k, v [n, n_head_kv, head_dim] f32 are stored, then q [n, n_head_q, head_dim] f32 attends
  //   causally to every stored token including the new ones -> out.o [n, n_head_q, head_dim],
  //   out.lse [n, n_head_q]. q_pos i32 [n] holds the positions.
  virtual void attend(Backend& backend, int32_t layer, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& q_pos, const AttnPartial& out) = 0;
  // After every layer of the step ran: the n new tokens become part of the sequence.
  virtual void advance(int32_t n) = 0;
  // Stores n tokens' k and v for one layer without attending: KV computed elsewhere, or the
  // synthetic context of a benchmark (`bench-decode --fill import`). k, v are host memory, f32
  // [n, n_head_kv, head_dim], for positions length() .. length()+n-1; every layer imports the
  // same n, then advance(n). Imported tokens carry no attention evidence: a hybrid store gives
  // them MAW 0, so hgca selects none of them once they reach the host (full and topk do not read
  // MAW).
  virtual void import_kv(Backend& backend, int32_t layer, const float* k, const float* v,
                         int32_t n) = 0;

  // What the next step is: prefill chunks are exact under every policy; `observe` marks the last
  // chunk of a prompt, whose queries seed the selection metadata of the prompt tokens.
  virtual void begin_step(bool decode, bool observe) {}
  // Layer-ahead host attention: true when the store wants a predicted query for each layer of a
  // decode step before that layer runs, handed over with prefetch (q_pred [1, n_head_q, d]).
  virtual bool wants_prefetch() const { return false; }
  virtual bool prefetch_oracle() const { return false; }  // prefetch with the true q instead
  virtual void prefetch(Backend& backend, int32_t layer, const TensorView& q_pred) {}
};

struct KvShape {
  int32_t n_layer = 0;
  int32_t n_head_q = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;
  float scale = 1.0f;  // softmax scale (1/sqrt(head_dim))
};

// Contiguous f32 cache in backend memory: per layer K and V of [capacity, n_head_kv, head_dim].
class DenseKv final : public SequenceKv {
 public:
  DenseKv(Backend& backend, const KvShape& shape, int32_t capacity);
  int32_t length() const override { return length_; }
  int32_t capacity() const override { return capacity_; }
  void attend(Backend& backend, int32_t layer, const TensorView& q, const TensorView& k,
              const TensorView& v, const TensorView& q_pos, const AttnPartial& out) override;
  void advance(int32_t n) override;
  void import_kv(Backend& backend, int32_t layer, const float* k, const float* v,
                 int32_t n) override;

 private:
  KvShape shape_;
  int32_t capacity_;
  int32_t length_ = 0;
  std::vector<BackendBuffer> k_, v_;  // per layer
};

}  // namespace tandem
