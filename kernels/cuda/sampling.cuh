// Token sampling on the device: greedy, or temperature -> top-k -> softmax -> top-p -> draw with
// a given uniform number per row (so a CPU reference can reproduce every draw).
#pragma once

#include "kernels/cuda/cuda_common.cuh"
#include "kernels/sample_row.h"

namespace tandem::cuda {

// logits f32 [n, vocab] (last dim contiguous, device memory); rows: n SampleRow
// (kernels/sample_row.h) in device memory; ids i32 [n] out, device memory. Per row, the rule of
// engine/sampler.cpp without penalties and min-p: temperature <= 0 or top_k == 1 is greedy
// (first index of the max); else the candidates are the logits != -inf divided by the
// temperature, ordered by (value desc, id asc); top_k > 0 keeps the first top_k; softmax over
// them; top_p < 1 keeps the shortest prefix whose mass reaches top_p; then the first token whose
// cumulative mass exceeds uniform * (kept mass) is drawn (the last one if rounding leaves none).
void sample(const TensorView& logits, const SampleRow* rows, const TensorView& ids,
            cudaStream_t stream);

}  // namespace tandem::cuda
