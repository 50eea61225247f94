// Sequence construction: the decoder is primed with the prompt so that the generated text is a
// continuation of it (a SentencePiece tokenizer strips the leading space of a text's first token
// only; the first generated token is not the first token of the text).
#include "engine/sequence.h"

#include <algorithm>
#include <limits>

namespace tandem {

Sequence::Sequence(uint64_t seq_id, GenerationRequest req, std::shared_ptr<TokenStream> s,
                   const Tokenizer& tokenizer, std::vector<int32_t> stop_ids, uint64_t seed)
    : id(seq_id),
      stream(std::move(s)),
      max_tokens(req.max_tokens),
      top_logprobs(req.top_logprobs),
      min_tokens(req.min_tokens),
      report_progress(req.report_progress),
      tokens(std::move(req.prompt)),
      sampler(req.sampling, seed),
      decoder(tokenizer),
      stop(std::move(req.stop)),
      prompt_len_(static_cast<int32_t>(tokens.size())),
      stop_ids_(std::move(stop_ids)) {
  for (int32_t t : tokens) decoder.push(t);
  std::sort(stop_ids_.begin(), stop_ids_.end());
}

void Sequence::mask_stops(std::span<float> logits) const {
  if (!stops_masked()) return;
  for (int32_t t : stop_ids_)
    if (t >= 0 && static_cast<size_t>(t) < logits.size())
      logits[static_cast<size_t>(t)] = -std::numeric_limits<float>::infinity();
}

bool Sequence::is_stop_token(int32_t token) const {
  return std::binary_search(stop_ids_.begin(), stop_ids_.end(), token);
}

}  // namespace tandem
