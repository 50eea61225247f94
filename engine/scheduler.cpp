// Continuous-batching scheduler: admission by device KV blocks and a token budget, chunked
// prefill sharing steps with decodes, preemption from the back with recomputation.
#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

namespace tandem {

Scheduler::Scheduler(const SchedulerOptions& opt, KvStore& store, int32_t n_layer)
    : opt_(opt), store_(store), n_layer_(n_layer) {}

void Scheduler::add(std::unique_ptr<Sequence> seq) {
  seq->status = SequenceStatus::kWaiting;
  waiting_.push_back(std::move(seq));
}

int64_t Scheduler::blocks_needed(const SequenceKv* kv, int32_t tokens) const {
  if (store_.config().dense) return 0;
  const auto* h = dynamic_cast<const HybridKv*>(kv);
  const int64_t held = h ? h->device_blocks() : 0;
  return std::max<int64_t>(0,
                           HybridKv::device_blocks_for(store_.config(), n_layer_, tokens) - held);
}

int64_t Scheduler::blocks_free() const {
  if (store_.config().dense) return std::numeric_limits<int64_t>::max() / 2;
  return store_.device_blocks_total() - store_.device_blocks_used();
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
    int64_t need = blocks_needed(s.kv.get(), s.computed() + n);
    while (need > blocks_free() - reserved && running_.size() > i) {
      preempt_last();  // possibly s itself, when it is the last one
      need = blocks_needed(s.kv.get(), s.computed() + n);
    }
    if (running_.size() <= i) break;  // s was preempted
    reserved += need;
    if (!decode) budget -= n;
    out.chunks.push_back({&s, n, decode, !decode && s.computed() + n == s.prefill_end});
  }

  // Admission, first come first served: stop at the first sequence that does not fit.
  while (!waiting_.empty() && static_cast<int32_t>(running_.size()) < opt_.max_batch &&
         budget > 0) {
    Sequence& s = *waiting_.front();
    if (blocks_needed(nullptr, s.size()) > blocks_free() - reserved) break;
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
    reserved += blocks_needed(nullptr, n);
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
