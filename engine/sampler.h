// Token sampling: logit bias, penalties (repetition, presence, frequency), temperature, top-k,
// top-p, min-p, greedy at temperature 0, and a seeded generator so a fixed seed gives the same
// text.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "kernels/sample_row.h"

namespace tandem {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy
  int32_t top_k = 0;                // 0 = off
  float top_p = 1.0f;               // 1 = off
  float min_p = 0.0f;               // 0 = off
  float repetition_penalty = 1.0f;  // HF style, over prompt and output tokens; 1 = off
  float presence_penalty = 0.0f;    // OpenAI style, over output tokens
  float frequency_penalty = 0.0f;
  std::optional<uint64_t> seed;
  // Added to the logits of these tokens before everything else (OpenAI logit_bias); -100 in
  // practice bans a token, +100 forces it.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

class Sampler {
 public:
  // Without a seed in params, default_seed is used (the caller draws it at random).
  Sampler(const SamplingParams& params, uint64_t default_seed);

  // Picks the next token from logits f32 [vocab] (modified in place by the penalties and
  // temperature). prompt and output are the tokens so far.
  int32_t sample(std::span<float> logits, std::span<const int32_t> prompt,
                 std::span<const int32_t> output);

  // The rule after the penalties (greedy, or temperature -> top-k -> softmax -> min-p -> top-p
  // -> draw) with a given uniform number u in [0, 1) instead of the generator: what sample()
  // does with its next draw (for tests and for parity with the GPU sampler).
  int32_t draw(std::span<float> logits, double u);

  // Whether sample() is draw() with its next uniform (no bias, penalties or min-p): the rule a
  // backend's sampler implements (Backend::sample).
  bool plain() const;
  // For a plain sampler: the Backend::sample row that picks what sample() would pick next, the
  // uniform drawn from this sampler's generator as sample() would draw it (not at all when the
  // rule is greedy). One difference: over logits that are all -inf, sample() is greedy without a
  // draw while the row has taken one.
  SampleRow backend_row();

  const SamplingParams& params() const { return params_; }

 private:
  double uniform();  // [0, 1), portable (no std::uniform_real_distribution differences)
  template <typename Uniform>
  int32_t draw_impl(std::span<float> logits, Uniform&& next_uniform);

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // scratch
  std::vector<float> group_max_;                 // scratch of the top-k floor
  std::vector<double> bucket_mass_;              // scratch of the ordered walk
  std::vector<int32_t> bucket_count_;
  std::vector<std::pair<float, int32_t>> group_, cut_group_;
  std::vector<int32_t> counts_;  // scratch: output token counts
};

// Natural-log softmax of logits into out (same size); returns the log of the normaliser.
void log_softmax(std::span<const float> logits, std::span<float> out);
// The k most likely tokens of logits as (logprob, id), most likely first.
std::vector<std::pair<float, int32_t>> top_logprobs(std::span<const float> logits, int32_t k);
int32_t argmax(std::span<const float> logits);

}  // namespace tandem
