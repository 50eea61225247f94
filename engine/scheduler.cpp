// Continuous-batching scheduler: admission by device KV blocks and a token budget, chunked
// prefill sharing steps with decodes, preemption from the back with recomputation.
#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

namespace tandem {

namespace {

// Whether a plan fits once `reserved` blocks of the pool are promised to pieces planned before.
bool fits(const StepPlan& p, int64_t reserved) {
  return p.device.net() <= p.device_free - reserved;
}

}  // namespace

Scheduler::Scheduler(const SchedulerOptions& opt, KvPlanner& store) : opt_(opt), store_(store) {}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(std::move(seq));
}

StepPlan Scheduler::plan_one(const SequenceKv* kv, int32_t n, bool decode) const {
  const PlanRequest r{kv, n, decode, false};
  return store_.plan(std::span<const PlanRequest>(&r, 1));
}

int64_t Scheduler::blocks_needed(const SequenceKv* kv, int32_t tokens) const {
  const int32_t held = kv != nullptr ? kv->length() : 0;
  if (tokens <= held) return 0;
  return std::max<int64_t>(0, plan_one(kv, tokens - held, false).device.net());
}

void Scheduler::preempt_last() {
  std::unique_ptr<Sequence> s = std::move(running_.back());
  running_.pop_back();
  s->kv.reset();  // frees every block now; the sequence is recomputed on readmission
  s->status = SequenceStatus::kWaiting;
  waiting_.push_front(std::move(s));
  ++preemptions_;
}

Schedule Scheduler::schedule() {
  Schedule out;
  // Decodes are never refused: the budget left after them goes to prefill chunks.
  int32_t budget = opt_.step_token_budget;
  for (const auto& s : running_) budget -= s->prefilling() ? 0 : 1;
  int64_t reserved = 0;  // blocks this step will allocate, not yet taken from the pool

  // Running sequences, oldest first; victims come from the back, so never an already planned one.
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& s = *running_[i];
    const bool decode = !s.prefilling();
    const int32_t n =
        decode ? 1 : std::min({s.prefill_end - s.computed(), opt_.prefill_chunk, budget});
    if (n <= 0) continue;  // a prefill with no budget left waits for the next step
    // The plan of s's piece: its net device blocks against what is free after the pieces
    // planned before it. Preempting frees blocks, so the plan is asked again after each victim.
    StepPlan p = plan_one(s.kv.get(), n, decode);
    while (!fits(p, reserved) && running_.size() > i) {
      preempt_last();  // possibly s itself, when it is the last one
      p = plan_one(s.kv.get(), n, decode);
    }
    const int64_t need = p.device.net();
    if (running_.size() <= i) break;  // s was preempted
    reserved += need;
    if (!decode) budget -= n;
    out.chunks.push_back({&s, n, decode, !decode && s.computed() + n == s.prefill_end});
  }

  // Admission, first come first served: stop at the first sequence that does not fit.
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < opt_.max_batch &&
         budget > 0) {
    Sequence& s = *waiting_.front();
    // The whole sequence must fit (not only its first chunk), so that admitting it does not
    // preempt it again on its next chunk.
    if (!fits(plan_one(nullptr, s.size(), false), reserved)) break;
    const int32_t n = std::min({s.size(), opt_.prefill_chunk, budget});
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    s.status = SequenceStatus::kRunning;
    s.prefill_end = s.size();
    try {
      s.kv = store_.new_sequence(s.capacity());
    } catch (const std::exception& e) {
      out.failed.emplace_back(&s, e.what());
      continue;
    }
    reserved += plan_one(nullptr, n, false).device.net();
    budget -= n;
    out.chunks.push_back({&s, n, false, n == s.prefill_end});
  }
  return out;
}

std::unique_ptr<Sequence> Scheduler::retire(Sequence* seq) {
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
    out->kv.reset();
    out->status = SequenceStatus::kFinished;
  }
  return out;
}

}  // namespace tandem
