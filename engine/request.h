// The boundary between the server and the engine: a GenerationRequest goes in, a TokenStream of
// TokenEvents comes out, one per request, with a cancel flag the server sets when its client goes
// away. Everything here is plain data plus one thread-safe queue; no sockets, no model.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/sampler.h"

namespace tandem {

enum class FinishReason : uint8_t {
  kNone,       // more events follow
  kStop,       // EOS or a stop string / stop token
  kLength,     // max_tokens or the context limit
  kCancelled,  // the client cancelled (or the server is shutting down)
  kError,      // the engine failed on this request; TokenEvent::error says why
};

struct GenerationRequest {
  std::vector<int32_t> prompt;  // token ids, after chat template and tokenizer
  SamplingParams sampling;
  int32_t max_tokens = 16;        // generated tokens at most
  std::vector<std::string> stop;  // stop strings: the text ends before the first match, which
                                  // is not emitted (matches across token boundaries count)
  std::vector<int32_t> stop_ids;  // extra stop tokens (EOS ids are added unless ignore_eos)
  bool ignore_eos = false;
  int32_t min_tokens = 0;  // stop tokens (EOS, stop_ids) cannot be drawn before this many
                           // generated tokens (stop strings still apply)
  // Constrained decoding: every token is drawn from those the grammar allows (EOS only once the
  // grammar is complete); the output ends with stop when the grammar is complete and nothing can
  // follow. Null: unconstrained.
  std::shared_ptr<const grammar::Grammar> grammar;
  int32_t top_logprobs = -1;     // -1: no logprobs; k >= 0: the chosen token's logprob and the
                                 // k most likely alternatives, per generated token
  bool report_progress = false;  // a progress event after each prefill chunk of the prompt
};

// One alternative of a logprobs entry.
struct TokenLogprob {
  int32_t token = 0;
  std::string piece;  // the token's own bytes, decoded alone (may be a partial UTF-8 sequence)
  float logprob = 0;  // natural log, of the model's distribution before sampling transforms
};

struct TokenEvent {
  std::string text;                    // newly released text: complete UTF-8, never any part of
                                       // a stop string match; may be empty while text is held back
  std::vector<int32_t> tokens;         // tokens generated since the previous event
  std::vector<TokenLogprob> logprobs;  // per token in `tokens` when requested: the chosen one
  std::vector<std::vector<TokenLogprob>> top;  // per token: the top_logprobs alternatives
  FinishReason finish = FinishReason::kNone;   // set on the last event of the stream only
  std::string error;                           // with kError
  int32_t prompt_tokens = 0;                   // usage, on the last event
  int32_t completion_tokens = 0;
  // A progress event (GenerationRequest::report_progress): prompt tokens whose KV is stored; no
  // tokens, no text, kNone. -1: not one.
  int32_t processed = -1;
  // On progress events and the last one: prompt tokens found in the prefix cache at admission.
  int32_t cached = 0;
};

// Single producer (engine thread), single consumer (one HTTP handler). Events are never dropped.
class TokenStream {
 public:
  // Consumer: waits up to timeout for the next event; false on timeout.
  bool next(TokenEvent& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
  }
  // Consumer: the client is gone; the engine retires the sequence within one step and sends a
  // final kCancelled event (which nobody may read).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }

  // Producer.
  void push(TokenEvent ev) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(ev));
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace tandem
