// The engine loop: submissions go through an inbox to the scheduler; each step runs one forward
// pass over the scheduled chunks, then samples, detokenises and streams per sequence.
#include "engine/engine.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <exception>

namespace tandem {

std::shared_ptr<spdlog::logger> engine_logger() {
  static std::shared_ptr<spdlog::logger> log = [] {
    auto l = spdlog::get("engine");
    return l ? l : spdlog::stderr_color_mt("engine");
  }();
  return log;
}

namespace {

SchedulerOptions scheduler_options(const EngineOptions& o) {
  return SchedulerOptions{o.max_batch, o.prefill_chunk, o.step_token_budget};
}

}  // namespace

Engine::Engine(Model& model, const Tokenizer& tokenizer, KvStore& store,
               const EngineOptions& options)
    : model_(model),
      tokenizer_(tokenizer),
      store_(store),
      opt_(options),
      scheduler_(scheduler_options(options), store),
      seeds_(options.seed) {
  const ModelConfig& c = model.config();
  max_model_len_ = opt_.max_model_len == 0 ? c.max_context : opt_.max_model_len;
  TANDEM_REQUIRE(max_model_len_ >= 2 && max_model_len_ <= c.max_context, kInvalidArgument,
                 "max_model_len must be in [2, ", c.max_context, "] (the model's context), got ",
                 max_model_len_);
  TANDEM_REQUIRE(opt_.max_batch >= 1, kInvalidArgument, "max_batch must be at least 1");
  TANDEM_REQUIRE(opt_.max_waiting >= 1, kInvalidArgument, "max_waiting must be at least 1");
  TANDEM_REQUIRE(opt_.prefill_chunk >= 1, kInvalidArgument, "prefill_chunk must be at least 1");
  TANDEM_REQUIRE(opt_.step_token_budget >= 1, kInvalidArgument,
                 "step_token_budget must be at least 1");
  vocab_ = c.vocab_size;
  eos_ids_ = c.eos_ids;
  if (auto e = tokenizer.eos_id()) eos_ids_.push_back(*e);
  device_blocks_total_ = scheduler_.blocks_total();
  // Pieces are decoded after a primer token, so that a decoder that strips the leading space of
  // a text's first token does not strip it from the piece.
  const std::vector<int32_t> primer = tokenizer.encode("a", false, false);
  if (!primer.empty()) piece_primer_ = primer.back();
  logprobs_.resize(static_cast<size_t>(vocab_));
  publish(0, 0, 0, 0, 0, false);
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() { shutdown(true); }

std::shared_ptr<TokenStream> Engine::submit(GenerationRequest req) {
  const int64_t n_prompt = static_cast<int64_t>(req.prompt.size());
  TANDEM_REQUIRE(n_prompt > 0, kInvalidArgument, "the prompt is empty");
  TANDEM_REQUIRE(n_prompt + 1 <= max_model_len_, kInvalidArgument, "the prompt has ", n_prompt,
                 " tokens; with at least one generated token it exceeds the maximum context of ",
                 max_model_len_, " tokens");
  TANDEM_REQUIRE(req.max_tokens >= 1, kInvalidArgument, "max_tokens must be at least 1, got ",
                 req.max_tokens);
  for (int32_t t : req.prompt)
    TANDEM_REQUIRE(t >= 0 && t < vocab_, kInvalidArgument, "prompt token id ", t,
                   " is outside the vocabulary [0, ", vocab_, ")");
  for (int32_t t : req.stop_ids)
    TANDEM_REQUIRE(t >= 0 && t < vocab_, kInvalidArgument, "stop token id ", t,
                   " is outside the vocabulary [0, ", vocab_, ")");
  TANDEM_REQUIRE(req.top_logprobs >= -1 && req.top_logprobs <= vocab_, kInvalidArgument,
                 "top_logprobs must be in [0, ", vocab_, "], got ", req.top_logprobs);
  const SamplingParams& sp = req.sampling;
  TANDEM_REQUIRE(sp.temperature >= 0, kInvalidArgument, "temperature must not be negative");
  TANDEM_REQUIRE(sp.top_p > 0 && sp.top_p <= 1, kInvalidArgument, "top_p must be in (0, 1]");
  TANDEM_REQUIRE(sp.top_k >= 0, kInvalidArgument, "top_k must not be negative");
  TANDEM_REQUIRE(sp.min_p >= 0 && sp.min_p <= 1, kInvalidArgument, "min_p must be in [0, 1]");
  TANDEM_REQUIRE(sp.repetition_penalty > 0, kInvalidArgument,
                 "repetition_penalty must be positive");
  for (const auto& [t, bias] : sp.logit_bias) {
    TANDEM_REQUIRE(t >= 0 && t < vocab_, kInvalidArgument, "logit_bias token id ", t,
                   " is outside the vocabulary [0, ", vocab_, ")");
    TANDEM_REQUIRE(std::isfinite(bias), kInvalidArgument, "logit_bias of token ", t,
                   " is not finite");
  }
  TANDEM_REQUIRE(req.min_tokens >= 0 && req.min_tokens <= req.max_tokens, kInvalidArgument,
                 "min_tokens must be in [0, max_tokens = ", req.max_tokens, "], got ",
                 req.min_tokens);
  req.max_tokens =
      static_cast<int32_t>(std::min<int64_t>(req.max_tokens, max_model_len_ - n_prompt));
  req.min_tokens = std::min(req.min_tokens, req.max_tokens);
  const int32_t total = static_cast<int32_t>(n_prompt) + req.max_tokens;
  // Not the scheduler's blocks_needed(): that plans against the pool, which the engine thread
  // changes while this caller's thread runs (a data race the thread sanitizer found).
  const int64_t need = store_.device_blocks_for(total);
  TANDEM_REQUIRE(need <= device_blocks_total_, kInvalidArgument, "a sequence of ", total,
                 " tokens needs ", need, " device KV blocks; the pool has ", device_blocks_total_,
                 " (--kv-device-gib)");
  const int64_t host_need = store_.host_blocks_for(total), host_limit = store_.host_blocks_limit();
  TANDEM_REQUIRE(host_limit == 0 || host_need <= host_limit, kInvalidArgument, "a sequence of ",
                 total, " tokens needs ", host_need, " host KV blocks (",
                 host_need * store_.host_block_bytes() >> 20, " MiB); the host tier holds ",
                 host_limit, " (--kv-host-gib)");

  std::vector<int32_t> stop_ids = req.stop_ids;
  if (!req.ignore_eos) stop_ids.insert(stop_ids.end(), eos_ids_.begin(), eos_ids_.end());
  uint64_t id = 0, seed = 0;
  auto admit_check = [&] {
    TANDEM_REQUIRE(!stopping_, kOutOfMemory, "the engine is shutting down");
    TANDEM_REQUIRE(static_cast<int64_t>(inbox_.size()) + queued_ < opt_.max_waiting, kOutOfMemory,
                   "too many requests waiting (", opt_.max_waiting, "); try again later");
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    admit_check();
    id = next_id_++;
    seed = seeds_();
  }
  auto stream = std::make_shared<TokenStream>();
  std::shared_ptr<const grammar::Grammar> g = std::move(req.grammar);
  // Built outside the lock: priming the decoder with the prompt costs O(prompt).
  auto seq =
      std::make_unique<Sequence>(id, std::move(req), stream, tokenizer_, std::move(stop_ids), seed);
  if (g) {
    std::call_once(vocab_once_, [&] { grammar_vocab_ = grammar::TokenVocab::build(tokenizer_); });
    seq->matcher = std::make_unique<grammar::GrammarMatcher>(std::move(g), grammar_vocab_);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    admit_check();
    inbox_.push_back(std::move(seq));
  }
  cv_.notify_one();
  return stream;
}

void Engine::shutdown(bool cancel_running) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cancel_all_ = cancel_all_ || cancel_running;
  }
  cv_.notify_all();
  std::lock_guard<std::mutex> lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

EngineMetrics Engine::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

void Engine::loop() {
  for (;;) {
    bool idle_wait = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !scheduler_.running().empty() ||
               !scheduler_.waiting().empty();
      });
      while (!inbox_.empty()) {
        scheduler_.add(std::move(inbox_.front()));
        inbox_.pop_front();
      }
      queued_ = static_cast<int32_t>(scheduler_.waiting().size());
      if (cancel_all_) {
        lock.unlock();
        cancel_everything();
        return;
      }
      if (stopping_ && scheduler_.running().empty() && scheduler_.waiting().empty()) return;
    }
    try {
      step();
    } catch (const std::exception& e) {
      // A bug outside the guarded parts of the step: fail what is running and go on.
      engine_logger()->error("step failed: {}", e.what());
      std::vector<Sequence*> running;
      for (const auto& s : scheduler_.running()) running.push_back(s.get());
      for (Sequence* s : running) fail(s, FinishReason::kError, e.what());
      idle_wait = true;
    }
    if (idle_wait) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }
}

void Engine::cancel_everything() {
  std::vector<Sequence*> all;
  for (const auto& s : scheduler_.running()) all.push_back(s.get());
  for (const auto& s : scheduler_.waiting()) all.push_back(s.get());
  for (Sequence* s : all) fail(s, FinishReason::kCancelled);
  publish(0, 0, 0, 0, 0, false);
}

FinishReason Engine::advance(Sequence& seq, const float* logits, int32_t tok) {
  TokenEvent ev;
  ev.tokens.push_back(tok);
  if (seq.top_logprobs >= 0) {
    TANDEM_CHECK(logits != nullptr, "logprobs without the logits on the host");
    const std::span<const float> raw(logits, static_cast<size_t>(vocab_));
    // From the model's distribution, before penalties and temperature.
    log_softmax(raw, logprobs_);
    ev.logprobs.push_back({tok, piece(tok), logprobs_[static_cast<size_t>(tok)]});
    std::vector<TokenLogprob> top;
    for (const auto& [lp, id] : top_logprobs(raw, seq.top_logprobs))
      top.push_back({id, piece(id), lp});
    ev.top.push_back(std::move(top));
  }
  seq.tokens.push_back(tok);

  FinishReason reason = FinishReason::kNone;
  // A grammar-constrained output ends once the grammar is complete and nothing can follow: the
  // document is whole, and the model would only be asked for the EOS the mask forces.
  bool grammar_done = false;
  if (seq.matcher && !seq.is_stop_token(tok)) {
    if (!seq.matcher->accept(tok))
      throw Error(ErrorKind::kInternal, cat("token ", tok,
                                            " was drawn but the grammar does not "
                                            "allow it"));
    grammar_done = seq.matcher->finished();
  }
  if (seq.is_stop_token(tok)) {
    // The stop token's own text is not part of the output.
    ev.text = seq.stop.push(seq.decoder.flush());
    ev.text += seq.stop.finish();
    reason = FinishReason::kStop;
  } else {
    ev.text = seq.stop.push(seq.decoder.push(tok));
    if (seq.stop.matched()) {
      reason = FinishReason::kStop;
    } else if (grammar_done) {
      ev.text += seq.stop.push(seq.decoder.flush());
      ev.text += seq.stop.finish();
      reason = FinishReason::kStop;
    } else if (seq.generated() >= seq.max_tokens) {
      ev.text += seq.stop.push(seq.decoder.flush());
      reason = seq.stop.matched() ? FinishReason::kStop : FinishReason::kLength;
      ev.text += seq.stop.finish();
    }
  }
  if (reason != FinishReason::kNone) {
    ev.finish = reason;
    ev.prompt_tokens = seq.prompt_len();
    ev.completion_tokens = seq.generated();
    ev.cached = seq.cached();
  }
  seq.stream->push(std::move(ev));
  return reason;
}

void Engine::fail(Sequence* seq, FinishReason reason, const std::string& error) {
  TokenEvent ev;
  ev.finish = reason;
  ev.error = error;
  ev.prompt_tokens = seq->prompt_len();
  ev.completion_tokens = seq->generated();
  ev.cached = seq->cached();
  seq->stream->push(std::move(ev));
  retire(seq, reason);
}

void Engine::retire(Sequence* seq, FinishReason reason) {
  ++finished_[static_cast<size_t>(reason)];
  // The returned sequence, its KV given back, goes away here. A failed one may have been half
  // written by its step: none of its blocks is cached.
  scheduler_.retire(seq, reason != FinishReason::kError);
}

const std::string& Engine::piece(int32_t token) {
  auto it = pieces_.find(token);
  if (it != pieces_.end()) return it->second;
  StreamDecoder d(tokenizer_, /*skip_special=*/false);
  if (piece_primer_ >= 0) d.push(piece_primer_);
  std::string s = d.push(token);
  s += d.flush();
  return pieces_.emplace(token, std::move(s)).first->second;
}

void Engine::publish(double forward_s, double other_s, double other_cpu_s, int64_t prompt_tokens,
                     int64_t gen_tokens, bool stepped) {
  HostAttention* ha = store_.host_attention();
  std::lock_guard<std::mutex> lock(mu_);
  EngineMetrics& m = metrics_;
  queued_ = static_cast<int32_t>(scheduler_.waiting().size());
  m.running = static_cast<int32_t>(scheduler_.running().size());
  m.waiting = queued_ + static_cast<int32_t>(inbox_.size());
  m.steps += stepped ? 1 : 0;
  m.prompt_tokens += prompt_tokens;
  m.generation_tokens += gen_tokens;
  m.finished_stop = finished_[static_cast<size_t>(FinishReason::kStop)];
  m.finished_length = finished_[static_cast<size_t>(FinishReason::kLength)];
  m.finished_cancelled = finished_[static_cast<size_t>(FinishReason::kCancelled)];
  m.finished_error = finished_[static_cast<size_t>(FinishReason::kError)];
  m.forward_seconds += forward_s;
  m.step_other_seconds += other_s;
  m.step_other_cpu_seconds += other_cpu_s;
  m.kv_device_blocks_used = store_.device_blocks_used();
  m.kv_device_blocks_total = store_.device_blocks_total();
  m.kv_host_blocks_used = store_.host_blocks_used();
  m.kv_host_blocks_total = store_.host_blocks_total();
  m.kv_host_bytes_used = store_.host_blocks_used() * store_.host_block_bytes();
  m.kv_host_bytes_budget = store_.host_blocks_limit() * store_.host_block_bytes();
  if (const PrefixCache* pc = store_.prefix_cache()) {
    m.prefix_queried_tokens = pc->stats().queried_tokens;
    m.prefix_hit_tokens = pc->stats().hit_tokens;
    m.prefix_cached_blocks = pc->cached_blocks();
    m.prefix_evicted_blocks = pc->stats().evicted_blocks;
  }
  m.similarity_reuse_lookups = store_.reuse_lookups();
  m.similarity_reuse_hits = store_.reuse_hits();
  const HostStats totals = store_.host_totals();
  m.cpu_compute_ratio = totals.cpu_compute_ratio();
  m.recalls = totals.recalls;
  m.recall_blocks = totals.recall_blocks;
  m.recall_bytes = totals.recall_bytes;
  m.mean_recall_interval = totals.mean_recall_interval();
  m.value_offload_logits = totals.quant_logits;
  m.value_offload_err_sum = totals.quant_err_sum;
  m.value_offload_err_max = totals.quant_err_max;
  m.host_kv_bytes_read = totals.host_bytes_read;
  m.cpu_attention_busy_seconds = ha ? ha->busy_seconds() : 0.0;
  m.cpu_attention_wait_seconds = ha ? ha->wait_seconds() : 0.0;
  m.preemptions = scheduler_.preemptions();
}

}  // namespace tandem
