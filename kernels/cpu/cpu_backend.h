// CpuBackend: the reference implementation of every Backend op, vectorised with AVX2/FMA/F16C
// where it matters and parallel over rows with oneTBB. The op bodies live in one file per family
// (gemm.cpp, norm.cpp, rope.cpp, elementwise.cpp, attention.cpp).
#pragma once

#include <mutex>

#include "kernels/backend.h"

namespace tandem {

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  void matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
              const TensorView& y) override;
  void embedding(const TensorView& ids, const TensorView& table, const TensorView& out) override;
  void rms_norm(const TensorView& x, const TensorView& w, float eps,
                const TensorView& out) override;
  void layer_norm(const TensorView& x, const TensorView& w, const TensorView& b, float eps,
                  const TensorView& out) override;
  void rope(const TensorView& x, const TensorView& pos, const RopeTable& rope) override;
  void silu_mul(const TensorView& gate, const TensorView& up, const TensorView& out) override;
  void relu(const TensorView& x) override;
  void add(const TensorView& a, const TensorView& b, const TensorView& out) override;
  void softmax(const TensorView& x) override;
  void attention(const TensorView& q, const TensorView& k, const TensorView& v,
                 const TensorView& q_pos, int64_t k_pos0, float scale,
                 const AttnPartial& out) override;
  void attention_paged(const TensorView& q, const TensorView& k, const TensorView& v,
                       const KvPages& pages, const TensorView& q_pos, int64_t k_pos0, float scale,
                       const AttnPartial& out) override;
  void merge(const AttnPartial& a, const AttnPartial& b) override;
  // The default loop (attention_batch_loop), with scratch kept between calls.
  void attention_batch(const TensorView& q, const TensorView& q_pos, const AttnSegment* segs,
                       int64_t count, float scale, const AttnPartial& out) override;
  void copy(const TensorView& src, const TensorView& dst) override;

 private:
  // attention_batch's scratch. Kept here, not in Backend: a base-class member would be freed
  // after the derived backend (and its allocator) is gone. The lock keeps the ops callable from
  // several threads at once, as the stateless ones are.
  std::mutex batch_mutex_;
  PartialScratch batch_scratch_;
};

}  // namespace tandem
