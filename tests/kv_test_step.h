// Test adapter: one sequence's step through the batch interface of kvstore/kv_step.h, for tests
// that drive a KV store without a model (the model does the same for a whole batch).
#pragma once

#include <functional>

#include "kvstore/kv_step.h"

namespace tandem::test {

// Opens a step of n rows for kv, runs `layers(step)` (which calls prefetch/attend per layer),
// and finishes it (kv advances by n).
inline void run_kv_step(SequenceKv& kv, int32_t n, bool decode, bool observe,
                        const std::function<void(KvStep&)>& layers) {
  const StepRows rows{&kv, 0, n, decode, observe};
  const std::unique_ptr<KvStep> step = begin_kv_step(std::span<const StepRows>(&rows, 1));
  layers(*step);
  step->finish();
}

}  // namespace tandem::test
