// KvStep: the KV side of one forward step for the whole batch. The model opens one per step
// (begin_kv_step), hands it each layer's q, k, v for every row of the batch and gets the
// attention partials back, then finishes it (the new tokens become part of their sequences).
// A store whose sequences attend together (the hybrid store) runs a layer for the whole batch at
// once: one host-attention submission and one device attention call per layer. Sequences
// without a runner (dense) attend one after the other.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "kernels/backend.h"
#include "kvstore/sequence_kv.h"

namespace tandem {

// One sequence's rows of a step: rows [row0, row0 + n) of the batch, its tokens length() ...
struct StepRows {
  SequenceKv* kv = nullptr;
  int64_t row0 = 0;
  int32_t n = 0;
  bool decode = false;   // one generated token: sparse host attention allowed
  bool observe = false;  // the last prefill chunk of a prompt (seeds selection metadata)
};

class KvStep {
 public:
  virtual ~KvStep() = default;
  // Layer-ahead host attention: rows [lo, hi) of the batch cover every sequence that wants a
  // predicted query of layer i + 1 before that layer runs (lo >= hi: none).
  virtual int64_t ahead_lo() const { return 0; }
  virtual int64_t ahead_hi() const { return 0; }
  // The queries of rows [row0, row0 + q.dim(0)) of the batch for `layer` (backend memory, f32
  // [rows, Hq, d]), before that layer's attend.
  virtual void prefetch(Backend& backend, int32_t layer, const TensorView& q, int64_t row0) {}
  // One layer for every row of the batch: k, v [n, Hkv, d] stored, q [n, Hq, d] attends causally
  // -> out.o [n, Hq, d], out.lse [n, Hq]; q_pos i32 [n].
  virtual void attend(Backend& backend, int32_t layer, const TensorView& q, const TensorView& k,
                      const TensorView& v, const TensorView& q_pos, const AttnPartial& out) = 0;
  // After the last layer: every sequence advances by its rows.
  virtual void finish() = 0;
};

class KvStepRunner {
 public:
  virtual ~KvStepRunner() = default;
  // Commits the step's plan (every check that can fail runs before anything changes) and
  // returns the step. The rows' sequences are this runner's and distinct.
  virtual std::unique_ptr<KvStep> begin(std::span<const StepRows> rows) = 0;
};

// The step of a batch: the sequences' common runner, or one sequence after the other where they
// have none. Throws kInvalidArgument where sequences of different runners share a batch.
std::unique_ptr<KvStep> begin_kv_step(std::span<const StepRows> rows);

}  // namespace tandem
