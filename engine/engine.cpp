// The engine loop: submissions go through an inbox to the scheduler; each step runs one forward
// pass over the scheduled chunks, then samples, detokenises and streams per sequence.
#include "engine/engine.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <exception>

namespace tandem {

namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<spdlog::logger> logger() {
  static std::shared_ptr<spdlog::logger> log = [] {
    auto l = spdlog::get("engine");
    return l ? l : spdlog::stderr_color_mt("engine");
  }();
  return log;
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// CPU time of the calling thread: a step's wall time outside the forward pass minus this is time
// the engine thread waited (for a core, or a lock), not work it did.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

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
      scheduler_(scheduler_options(options), store, model.config().n_layer),
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
  req.max_tokens =
      static_cast<int32_t>(std::min<int64_t>(req.max_tokens, max_model_len_ - n_prompt));
  const int32_t total = static_cast<int32_t>(n_prompt) + req.max_tokens;
  const int64_t need = scheduler_.blocks_needed(nullptr, total);
  TANDEM_REQUIRE(need <= device_blocks_total_, kInvalidArgument, "a sequence of ", total,
                 " tokens needs ", need, " device KV blocks; the pool has ", device_blocks_total_);

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
  // Built outside the lock: priming the decoder with the prompt costs O(prompt).
  auto seq =
      std::make_unique<Sequence>(id, std::move(req), stream, tokenizer_, std::move(stop_ids), seed);
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
      logger()->error("step failed: {}", e.what());
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

void Engine::step() {
  const auto t0 = Clock::now();
  const double c0 = thread_cpu_seconds();
  // Cancelled streams are retired before anything runs for them.
  std::vector<Sequence*> cancelled;
  for (const auto& s : scheduler_.running())
    if (s->stream->cancelled()) cancelled.push_back(s.get());
  for (const auto& s : scheduler_.waiting())
    if (s->stream->cancelled()) cancelled.push_back(s.get());
  for (Sequence* s : cancelled) fail(s, FinishReason::kCancelled);

  Schedule plan = scheduler_.schedule();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_ = static_cast<int32_t>(scheduler_.waiting().size());  // admitted ones no longer count
  }
  for (auto& [s, why] : plan.failed) fail(s, FinishReason::kError, why);
  if (plan.chunks.empty()) {
    publish(0, seconds(t0, Clock::now()), thread_cpu_seconds() - c0, 0, 0, false);
    if (!scheduler_.waiting().empty()) {  // nothing fits now (should not happen): do not spin
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
    return;
  }

  std::vector<StepSequence> batch;
  batch.reserve(plan.chunks.size());
  int64_t prompt_tokens = 0;
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& s = *c.seq;
    const auto tokens = std::span<const int32_t>(s.tokens).subspan(
        static_cast<size_t>(s.computed()), static_cast<size_t>(c.n));
    batch.push_back(StepSequence{s.kv.get(), tokens, false, c.decode, c.observe});
    if (!c.decode) prompt_tokens += c.n;
  }

  const auto t1 = Clock::now();
  const double c1 = thread_cpu_seconds();
  // The step fails as a whole where the forward pass (the KV of every sequence may be half
  // written), the backend's sampling or the read-back of the logits fails.
  auto fail_step = [&](const char* what, const std::exception& e) {
    const auto t2 = Clock::now();
    logger()->error("{} failed for a batch of {}: {}", what, batch.size(), e.what());
    for (const ScheduledChunk& c : plan.chunks)
      fail(c.seq, FinishReason::kError, cat(what, " failed: ", e.what()));
    publish(seconds(t1, t2), seconds(t0, Clock::now()) - seconds(t1, t2), c1 - c0, 0, 0, true);
  };
  TensorView logits;  // backend memory: read back below only where the host samples
  try {
    logits = model_.forward_on_backend(batch);
  } catch (const std::exception& e) {
    return fail_step("the model step", e);
  }

  const size_t n_chunks = plan.chunks.size();
  TANDEM_CHECK(logits.dim(0) == static_cast<int64_t>(n_chunks), "one logit row per chunk");
  std::vector<int32_t> toks(n_chunks, -1);
  std::vector<std::exception_ptr> errors(n_chunks);
  // Where the host cannot read the logits in place, the sequences whose sampling is the plain
  // rule (no penalties, no min-p) and that want no logprobs are sampled by the backend, which
  // sends back one id per row instead of the row; the rest come down to the host. The uniforms
  // come from each sequence's own generator, as on the host, so the tokens are the same.
  std::vector<SampleRow> rows(n_chunks);  // rows not sampled there: greedy, and ignored
  std::vector<uint8_t> on_backend(n_chunks, 0);
  bool any_on_backend = false;
  if (!model_.backend().host_accessible()) {
    for (size_t i = 0; i < n_chunks; ++i) {
      const ScheduledChunk& c = plan.chunks[i];
      if (!c.last() || c.seq->top_logprobs >= 0 || !c.seq->sampler.plain()) continue;
      try {
        rows[i] = c.seq->sampler.backend_row();
        on_backend[i] = 1;
        any_on_backend = true;
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  }
  bool backend_sampled = false;
  if (any_on_backend) {
    try {
      backend_sampled = model_.backend().sample(logits, rows.data(), toks.data());
    } catch (const std::exception& e) {
      return fail_step("sampling on the backend", e);
    }
  }
  // The rows the host samples (all, on a host-accessible backend), read back a run at a time.
  auto on_host = [&](size_t i) {
    return plan.chunks[i].last() && !errors[i] && !(on_backend[i] && backend_sampled);
  };
  std::vector<const float*> host_rows(n_chunks, nullptr);
  try {
    for (size_t i = 0; i < n_chunks;) {
      if (!on_host(i)) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < n_chunks && on_host(j)) ++j;
      const TensorView h = model_.logits_to_host(static_cast<int64_t>(i), static_cast<int64_t>(j));
      for (size_t k = i; k < j; ++k)
        host_rows[k] = h.as<const float>() + static_cast<int64_t>(k - i) * vocab_;
      i = j;
    }
  } catch (const std::exception& e) {
    return fail_step("the model step", e);
  }
  // Forward time ends when the step's results are on the host: on a device backend the pass
  // runs while this thread queues it, and the wait for it is in the read-back (or sampling).
  const auto t2 = Clock::now();
  const double c2 = thread_cpu_seconds();

  int64_t generated = 0;
  // Sampling on the host, one task per sequence: each sequence's sampler has its own generator,
  // so the tokens do not depend on which thread draws them. With top-p over a large vocabulary a
  // draw can take milliseconds; the rest (logprobs, detokenising, streaming) stays on this thread.
  tbb::parallel_for(size_t{0}, n_chunks, [&](size_t i) {
    if (host_rows[i] == nullptr) return;  // sampled by the backend, or nothing to sample
    const ScheduledChunk& c = plan.chunks[i];
    try {
      thread_local std::vector<float> row;
      row.assign(host_rows[i], host_rows[i] + vocab_);  // the sampler modifies its row
      // A row meant for a backend without a sampler: its uniform is drawn already.
      toks[i] = on_backend[i] ? c.seq->sampler.draw(row, rows[i].uniform)
                              : c.seq->sampler.sample(row, c.seq->prompt(), c.seq->output());
    } catch (...) {
      errors[i] = std::current_exception();
    }
  });
  for (size_t i = 0; i < n_chunks; ++i) {
    const ScheduledChunk& c = plan.chunks[i];
    if (!c.last()) continue;
    try {
      ++generated;
      if (errors[i]) std::rethrow_exception(errors[i]);
      const FinishReason r = advance(*c.seq, host_rows[i], toks[i]);
      if (r != FinishReason::kNone) retire(c.seq, r);
    } catch (const std::exception& e) {
      logger()->error("request {} failed: {}", c.seq->id, e.what());
      fail(c.seq, FinishReason::kError, e.what());
    }
  }
  const double fwd = seconds(t1, t2);
  publish(fwd, seconds(t0, Clock::now()) - fwd, (c1 - c0) + (thread_cpu_seconds() - c2),
          prompt_tokens, generated, true);
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
  if (seq.is_stop_token(tok)) {
    // The stop token's own text is not part of the output.
    ev.text = seq.stop.push(seq.decoder.flush());
    ev.text += seq.stop.finish();
    reason = FinishReason::kStop;
  } else {
    ev.text = seq.stop.push(seq.decoder.push(tok));
    if (seq.stop.matched()) {
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
  seq->stream->push(std::move(ev));
  retire(seq, reason);
}

void Engine::retire(Sequence* seq, FinishReason reason) {
  ++finished_[static_cast<size_t>(reason)];
  scheduler_.retire(seq);  // the returned sequence, its KV already freed, goes away here
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
  m.cpu_attention_busy_seconds = ha ? ha->busy_seconds() : 0.0;
  m.cpu_attention_wait_seconds = ha ? ha->wait_seconds() : 0.0;
  m.preemptions = scheduler_.preemptions();
}

}  // namespace tandem
