// Sequence: one request inside the engine: its tokens (prompt, then generated), its KV cache
// while it runs, and the per-request generation state (sampler, incremental detokeniser, stop
// matcher). The scheduler moves it between the waiting queue and the running set; the engine
// feeds its tokens to the model and turns its samples into TokenEvents.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/grammar/token_mask.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"
#include "engine/tokenizer/tokenizer.h"
#include "kvstore/sequence_kv.h"

namespace tandem {

enum class SequenceStatus : uint8_t { kWaiting, kRunning, kFinished };

struct Sequence {
  // max_tokens must already be clamped to the context; stop_ids include the EOS ids.
  Sequence(uint64_t id, GenerationRequest req, std::shared_ptr<TokenStream> stream,
           const Tokenizer& tokenizer, std::vector<int32_t> stop_ids, uint64_t seed);

  int32_t prompt_len() const { return prompt_len_; }
  int32_t size() const { return static_cast<int32_t>(tokens.size()); }  // prompt + generated
  int32_t generated() const { return size() - prompt_len_; }
  int32_t computed() const { return kv ? kv->length() : 0; }  // tokens whose KV is stored
  std::span<const int32_t> prompt() const {
    return {tokens.data(), static_cast<size_t>(prompt_len_)};
  }
  std::span<const int32_t> output() const {
    return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(prompt_len_));
  }
  // Prefilling while computed() < prefill_end: every token before the last one to feed, so the
  // prompt after admission or prompt + generated tokens after a preemption.
  bool prefilling() const { return computed() < prefill_end; }
  // Tokens the KV may ever hold: the last generated token is never fed back.
  int32_t capacity() const { return prompt_len_ + max_tokens; }
  bool is_stop_token(int32_t token) const;
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  // Whether the next token is drawn with the stop tokens masked (min_tokens not reached yet).
  bool stops_masked() const { return generated() < min_tokens && !stop_ids_.empty(); }
  // Sets the logits of the stop tokens to -inf while stops_masked().
  void mask_stops(std::span<float> logits) const;

  const uint64_t id;
  const std::shared_ptr<TokenStream> stream;
  const int32_t max_tokens;
  const int32_t top_logprobs;  // -1: none
  const int32_t min_tokens;
  const bool report_progress;
  // Prompt tokens the store had cached at the first admission (-1: not admitted yet).
  int32_t cached_tokens = -1;
  int32_t cached() const { return std::max(0, cached_tokens); }  // as reported
  SequenceStatus status = SequenceStatus::kWaiting;
  std::vector<int32_t> tokens;
  int32_t prefill_end = 0;         // set on admission
  std::unique_ptr<SequenceKv> kv;  // while running
  Sampler sampler;
  StreamDecoder decoder;  // primed with the prompt: the text continues it
  StopMatcher stop;
  std::unique_ptr<grammar::GrammarMatcher> matcher;  // constrained decoding, or null

 private:
  int32_t prompt_len_;
  std::vector<int32_t> stop_ids_;
};

}  // namespace tandem
