// Continuous-batching scheduler: admission by device KV blocks and a token budget, chunked
// prefill sharing steps with decodes, preemption from the back with recomputation.
#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

namespace tandem {

namespace {

// Blocks of each tier promised to the pieces planned before in a step.
struct Reserved {
  int64_t device = 0, host = 0;
  void add(const StepPlan& p) {
    device += p.device.net();
    host += p.host.net();
  }
};

// Whether a plan fits in both tiers once `r` is taken.
bool fits(const StepPlan& p, const Reserved& r) {
  return p.device.net() <= p.device_free - r.device && p.host.net() <= p.host_free - r.host;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& opt, KvPlanner& store) : opt_(opt), store_(store) {}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(std::move(seq));
}

StepPlan Scheduler::plan_one(const SequenceKv* kv, int32_t n, bool decode, bool last) const {
  const PlanRequest r{kv, n, decode, last};
  return store_.plan(std::span<const PlanRequest>(&r, 1));
}

int64_t Scheduler::blocks_needed(const SequenceKv* kv, int32_t tokens) const {
  const int32_t held = kv != nullptr ? kv->length() : 0;
  if (tokens <= held) return 0;
  return std::max<int64_t>(0, plan_one(kv, tokens - held, false, true).device.net());
}

void Scheduler::preempt_last() {
  std::unique_ptr<Sequence> s = std::move(running_.back());
  running_.pop_back();
  // Its full blocks stay in the prefix cache (where the store has one), the rest is freed now;
  // on readmission it adopts what is still cached and recomputes the rest.
  store_.release(std::move(s->kv), s->tokens);
  s->status = SequenceStatus::kWaiting;
  waiting_.push_front(std::move(s));
  ++preemptions_;
}

Schedule Scheduler::schedule() {
  Schedule out;
  // Decodes are never refused: the budget left after them goes to prefill chunks.
  int32_t budget = opt_.step_token_budget;
  for (const auto& s : running_) budget -= s->prefilling() ? 0 : 1;
  Reserved reserved;  // blocks this step will allocate, not yet taken from the pools

  // Running sequences, oldest first; victims come from the back, so never an already planned one.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = *running_[i];
    const bool decode = !s.prefilling();
    const int32_t n =
        decode ? 1 : std::min({s.prefill_end - s.computed(), opt_.prefill_chunk, budget});
    if (n <= 0) continue;  // a prefill with no budget left waits for the next step
    const bool last = !decode && s.computed() + n == s.prefill_end;
    // The plan of s's piece: its net device blocks against what is free after the pieces
    // planned before it. Preempting frees blocks, so the plan is asked again after each victim.
    StepPlan p = plan_one(s.kv.get(), n, decode, last);
    while (!fits(p, reserved) && running_.size() > i) {
      preempt_last();  // possibly s itself, when it is the last one
      p = plan_one(s.kv.get(), n, decode, last);
    }
    if (running_.size() <= i) break;  // s was preempted
    reserved.add(p);
    if (!decode) budget -= n;
    out.chunks.push_back({&s, n, decode, last});
  }

  // Admission, first come first served: stop at the first sequence that does not fit. One that
  // waits for a running prefill of the same prefix (its blocks are cached as they are computed)
  // is passed over, keeping its place.
  for (size_t w = 0; w < waiting_.size() &&
                     static_cast<int32_t>(running_.size()) < opt_.max_batch && budget > 0;) {
    Sequence& s = *waiting_[w];
    if (awaits_prefix(s)) {
      ++w;
      continue;
    }
    // The whole sequence must fit (not only its first chunk), so that admitting it does not
    // preempt it again on its next chunk.
    if (!fits(plan_one(nullptr, s.size(), false, true), reserved)) break;
    running_.push_back(std::move(waiting_[w]));
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    s.status = SequenceStatus::kRunning;
    s.prefill_end = s.size();
    try {
      // The store may hand it a cached prefix: its prefill starts after it.
      s.kv = store_.new_sequence(s.capacity(), s.tokens);
    } catch (const std::exception& e) {
      out.failed.emplace_back(&s, e.what());
      continue;
    }
    if (s.cached_tokens < 0) s.cached_tokens = s.computed();  // the first admission's
    const int32_t n = std::min({s.size() - s.computed(), opt_.prefill_chunk, budget});
    const bool last = s.computed() + n == s.prefill_end;
    reserved.add(plan_one(s.kv.get(), n, false, last));
    budget -= n;
    out.chunks.push_back({&s, n, false, last});
  }
  return out;
}

bool Scheduler::awaits_prefix(const Sequence& s) const {
  const int32_t unit = store_.prefix_unit();
  if (unit == 0 || s.size() <= unit) return false;
  for (const auto& r : running_) {
    if (!r->prefilling() || r->prefill_end <= unit) continue;
    // The prefix both share, as far as r's prefill goes and s could adopt it (not its last).
    const int32_t n = std::min(r->prefill_end, s.size() - 1);
    const auto [a, b] = std::mismatch(s.tokens.begin(), s.tokens.begin() + n, r->tokens.begin());
    const int32_t common = static_cast<int32_t>(a - s.tokens.begin());
    if (common >= unit && r->computed() < common) return true;
  }
  return false;
}

std::unique_ptr<Sequence> Scheduler::retire(Sequence* seq, bool keep_prefix) {
  std::unique_ptr<Sequence> out;
  auto take = [&](auto& list) {
    auto it = std::find_if(list.begin(), list.end(), [&](const auto& p) { return p.get() == seq; });
    if (it == list.end()) return false;
    out = std::move(*it);
    list.erase(it);
    return true;
  };
  if (!take(running_)) take(waiting_);
  if (out) {
    store_.release(std::move(out->kv), keep_prefix ? std::span<const int32_t>(out->tokens)
                                                   : std::span<const int32_t>());
    out->status = SequenceStatus::kFinished;
  }
  return out;
}

}  // namespace tandem
