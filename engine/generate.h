// Single-sequence generation: chunked prefill, then one token per step until EOS or max_tokens.
// Used by `tandem run` and the benchmarks; the server's scheduler batches many sequences instead.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "models/model.h"

namespace tandem {

struct GenerateOptions {
  int32_t max_tokens = 128;
  int32_t prefill_chunk = 512;  // prompt tokens per forward step
  SamplingParams sampling;
  uint64_t seed = 0;              // used when sampling.seed is unset
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these (not streamed)
};

struct GenerateStats {
  int32_t prompt_tokens = 0;
  int32_t generated = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;  // from the first sampled token to the last
  bool stopped = false;       // ended on a stop id (else max_tokens or context)
};

// on_token is called with each generated token (stop ids excluded); returning false ends early.
GenerateStats generate(Model& model, SequenceKv& kv, std::span<const int32_t> prompt,
                       const GenerateOptions& opt, const std::function<bool(int32_t)>& on_token);

}  // namespace tandem
