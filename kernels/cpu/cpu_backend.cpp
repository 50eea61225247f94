// make_cpu_backend(): the factory for the CPU reference backend, and attention_batch (the
// default loop with a kept scratch). The op bodies live in gemm.cpp, norm.cpp, rope.cpp,
// elementwise.cpp and attention.cpp; shared helpers in simd.h.
#include "kernels/cpu/cpu_backend.h"

namespace tandem {

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

void CpuBackend::attention_batch(const TensorView& q, const TensorView& q_pos,
                                 const AttnSegment* segs, int64_t count, float scale,
                                 const AttnPartial& out) {
  const std::lock_guard<std::mutex> lock(batch_mutex_);
  attention_batch_loop(*this, q, q_pos, segs, count, scale, out, batch_scratch_);
}

}  // namespace tandem
