// SampleRow: one logit row's sampling parameters for Backend::sample (kernels/backend.h), in a
// header of its own so the engine's sampler can produce them without the backend interface.
#pragma once

#include <cstdint>

namespace tandem {

// Greedy (the first index of the max) where temperature <= 0 or top_k == 1, else temperature ->
// top-k (0: off) -> softmax -> top-p (1: off) -> the draw that `uniform` in [0, 1) picks in the
// (probability desc, id asc) order: the rule of Sampler::draw (engine/sampler.h) without min-p
// and penalties.
struct SampleRow {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float unused = 0.0f;  // padding: a device reads an array of these as uploaded
  double uniform = 0.0;
};

}  // namespace tandem
