// Engine::step in its five parts (engine/engine.h): reap cancelled -> schedule -> run ->
// postprocess -> publish. Timing is kept in StepTimes, out of the way of the parts.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <exception>
#include <limits>

#include "engine/engine.h"
#include "kernels/cpu/parallel.h"

namespace tandem {

namespace {

using Clock = std::chrono::steady_clock;

// CPU time of the calling thread: a step's wall time outside the forward pass minus this is time
// the engine thread waited (for a core, or a lock), not work it did.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

// Wall and thread-CPU time of a step, split into the forward pass (from its start until its
// results are on the host) and the rest.
struct Engine::StepTimes {
  Clock::time_point t0 = Clock::now(), t1, t2;
  double c0 = thread_cpu_seconds(), c1 = 0, c2 = 0;
  void forward_starts() { t1 = Clock::now(), c1 = thread_cpu_seconds(); }
  void forward_ends() { t2 = Clock::now(), c2 = thread_cpu_seconds(); }
  double forward() const { return seconds(t1, t2); }
  double other() const { return seconds(t0, Clock::now()) - forward(); }
  double other_cpu() const { return (c1 - c0) + (thread_cpu_seconds() - c2); }
};

// What a run hands to postprocess: per chunk the sampled token, the host logits row (null where
// the backend sampled), and an error of that sequence alone.
struct Engine::StepOutput {
  std::vector<int32_t> toks;
  std::vector<const float*> host_rows;
  std::vector<std::exception_ptr> errors;
  int64_t prompt_tokens = 0;
  int64_t generated = 0;
};

void Engine::step() {
  StepTimes times;
  reap_cancelled();
  const Schedule work = schedule_step();
  if (work.chunks.empty()) {
    times.forward_starts();
    times.forward_ends();
    publish(0, times.other(), times.other_cpu(), 0, 0, false);
    if (!scheduler_.waiting().empty()) {  // nothing fits now (should not happen): do not spin
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
    return;
  }
  StepOutput out;
  if (!run(work, out, times)) return;
  postprocess(work, out);
  publish(times.forward(), times.other(), times.other_cpu(), out.prompt_tokens, out.generated,
          true);
}

void Engine::reap_cancelled() {
  // Cancelled streams are retired before anything runs for them.
  std::vector<Sequence*> cancelled;
  for (const auto& s : scheduler_.running())
    if (s->stream->cancelled()) cancelled.push_back(s.get());
  for (const auto& s : scheduler_.waiting())
    if (s->stream->cancelled()) cancelled.push_back(s.get());
  for (Sequence* s : cancelled) fail(s, FinishReason::kCancelled);
}

Schedule Engine::schedule_step() {
  Schedule work = scheduler_.schedule();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_ = static_cast<int32_t>(scheduler_.waiting().size());  // admitted ones no longer count
  }
  for (auto& [s, why] : work.failed) fail(s, FinishReason::kError, why);
  return work;
}

bool Engine::run(const Schedule& work, StepOutput& out, StepTimes& times) {
  std::vector<StepSequence> batch;
  batch.reserve(work.chunks.size());
  for (const ScheduledChunk& c : work.chunks) {
    Sequence& s = *c.seq;
    const auto tokens = std::span<const int32_t>(s.tokens).subspan(
        static_cast<size_t>(s.computed()), static_cast<size_t>(c.n));
    batch.push_back(StepSequence{s.kv.get(), tokens, false, c.decode, c.observe});
    if (!c.decode) out.prompt_tokens += c.n;
  }
  times.forward_starts();
  // The step fails as a whole where the forward pass (the KV of every sequence may be half
  // written), the backend's sampling or the read-back of the logits fails.
  auto fail_step = [&](const char* what, const std::exception& e) {
    times.forward_ends();
    engine_logger()->error("{} failed for a batch of {}: {}", what, batch.size(), e.what());
    for (const ScheduledChunk& c : work.chunks)
      fail(c.seq, FinishReason::kError, cat(what, " failed: ", e.what()));
    publish(times.forward(), times.other(), times.other_cpu(), 0, 0, true);
    return false;
  };
  TensorView logits;  // backend memory: read back below only where the host samples
  try {
    logits = model_.forward_on_backend(batch);
  } catch (const std::exception& e) {
    return fail_step("the model step", e);
  }

  const size_t n_chunks = work.chunks.size();
  TANDEM_CHECK(logits.dim(0) == static_cast<int64_t>(n_chunks), "one logit row per chunk");
  out.toks.assign(n_chunks, -1);
  out.errors.assign(n_chunks, nullptr);
  out.host_rows.assign(n_chunks, nullptr);
  // Where the host cannot read the logits in place, the sequences whose sampling is the plain
  // rule (no bias, penalties, min-p or masked stop tokens) and that want no logprobs are sampled by
  // the backend, which sends back one id per row instead of the row; the rest come down to the
  // host. The uniforms come from each sequence's own generator, as on the host, so the tokens are
  // the same.
  std::vector<SampleRow> rows(n_chunks);  // rows not sampled there: greedy, and ignored
  std::vector<uint8_t> on_backend(n_chunks, 0);
  bool any_on_backend = false;
  if (!model_.backend().host_accessible()) {
    for (size_t i = 0; i < n_chunks; ++i) {
      const ScheduledChunk& c = work.chunks[i];
      if (!c.last() || c.seq->top_logprobs >= 0 || !c.seq->sampler.plain() ||
          c.seq->stops_masked() || c.seq->matcher)
        continue;
      try {
        rows[i] = c.seq->sampler.backend_row();
        on_backend[i] = 1;
        any_on_backend = true;
      } catch (...) {
        out.errors[i] = std::current_exception();
      }
    }
  }
  bool backend_sampled = false;
  if (any_on_backend) {
    try {
      backend_sampled = model_.backend().sample(logits, rows.data(), out.toks.data());
    } catch (const std::exception& e) {
      return fail_step("sampling on the backend", e);
    }
  }
  // The rows the host samples (all, on a host-accessible backend), read back a run at a time.
  auto on_host = [&](size_t i) {
    return work.chunks[i].last() && !out.errors[i] && !(on_backend[i] && backend_sampled);
  };
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
        out.host_rows[k] = h.as<const float>() + static_cast<int64_t>(k - i) * vocab_;
      i = j;
    }
  } catch (const std::exception& e) {
    return fail_step("the model step", e);
  }
  // Forward time ends when the step's results are on the host: on a device backend the pass
  // runs while this thread queues it, and the wait for it is in the read-back (or sampling).
  times.forward_ends();

  // Sampling on the host, one task per sequence: each sequence's sampler has its own generator,
  // so the tokens do not depend on which thread draws them. With top-p over a large vocabulary a
  // draw can take milliseconds; the rest (logprobs, detokenising, streaming) stays on this thread.
  tandem::parallel_for(size_t{0}, n_chunks, [&](size_t i) {
    if (out.host_rows[i] == nullptr) return;  // sampled by the backend, or nothing to sample
    const ScheduledChunk& c = work.chunks[i];
    try {
      thread_local std::vector<float> row;
      row.assign(out.host_rows[i], out.host_rows[i] + vocab_);  // the sampler modifies its row
      if (c.seq->matcher) c.seq->matcher->mask(row, c.seq->stop_ids());
      c.seq->mask_stops(row);
      // A vocabulary that cannot write a byte the grammar needs (no '{' in it), or min_tokens
      // past the end of the document, leaves nothing to draw.
      if (c.seq->matcher && std::none_of(row.begin(), row.end(), [](float x) {
            return x > -std::numeric_limits<float>::infinity();
          }))
        throw Error(ErrorKind::kInvalidArgument,
                    "the grammar allows no token of this model's vocabulary here (the output so "
                    "far cannot be continued as the schema requires, within min_tokens)");
      // A row meant for a backend without a sampler: its uniform is drawn already.
      out.toks[i] = on_backend[i] ? c.seq->sampler.draw(row, rows[i].uniform)
                                  : c.seq->sampler.sample(row, c.seq->prompt(), c.seq->output());
    } catch (...) {
      out.errors[i] = std::current_exception();
    }
  });
  return true;
}

void Engine::postprocess(const Schedule& work, StepOutput& out) {
  for (size_t i = 0; i < work.chunks.size(); ++i) {
    const ScheduledChunk& c = work.chunks[i];
    if (c.seq->report_progress && !c.decode && c.seq->generated() == 0) {
      // The prompt's prefill (not a recomputation after a preemption) moved on: the last
      // chunk reports the whole prompt, before the event of the first token.
      TokenEvent ev;
      ev.processed = c.last() ? c.seq->prompt_len() : c.seq->computed();
      ev.cached = c.seq->cached();
      c.seq->stream->push(std::move(ev));
    }
    // A prompt's computed chunks become adoptable by sequences that share them (they wait for
    // it: Scheduler::awaits_prefix); a failed step published nothing.
    if (!c.decode && !out.errors[i]) {
      try {
        store_.publish(*c.seq->kv, c.seq->tokens);
      } catch (const std::exception& e) {  // the sequence goes on; only sharing is lost
        engine_logger()->error("prefix cache: request {}: {}", c.seq->id, e.what());
      }
    }
    if (!c.last()) continue;
    try {
      ++out.generated;
      if (out.errors[i]) std::rethrow_exception(out.errors[i]);
      const FinishReason r = advance(*c.seq, out.host_rows[i], out.toks[i]);
      if (r != FinishReason::kNone) retire(c.seq, r);
    } catch (const std::exception& e) {
      engine_logger()->error("request {} failed: {}", c.seq->id, e.what());
      fail(c.seq, FinishReason::kError, e.what());
    }
  }
}

}  // namespace tandem
