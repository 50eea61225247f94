// Scheduler: iteration-level continuous batching in the manner of nano-vllm. A FIFO waiting
// queue and a running set in admission order. Each step: every running sequence gets its next
// piece (one decode token, or its next prefill chunk within the step's token budget); a running
// sequence that cannot grow preempts the most recently admitted one (its KV is freed and it goes
// back to the FRONT of the queue to be recomputed from prompt + generated tokens); then waiting
// sequences are admitted in order while the batch has room, the device KV pool can hold them and
// the budget allows. Memory questions go to the store's plans (KvPlanner): what a sequence's next
// piece takes from the device pool. No model code here: the engine runs what schedule() returns,
// and a fake planner drives it in tests.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "engine/sequence.h"
#include "kvstore/step_plan.h"

namespace tandem {

struct SchedulerOptions {
  int32_t max_batch = 64;            // running sequences at most
  int32_t prefill_chunk = 512;       // prompt tokens of one sequence per step at most
  int32_t step_token_budget = 2048;  // tokens of one step (decodes are never refused)
};

// One sequence's share of a step: tokens [seq->computed(), seq->computed() + n).
struct ScheduledChunk {
  Sequence* seq = nullptr;
  int32_t n = 0;
  bool decode = false;                             // one generated token fed back
  bool observe = false;                            // the last chunk of a prefill
  bool last() const { return decode || observe; }  // logits of this step are sampled
};

struct Schedule {
  std::vector<ScheduledChunk> chunks;
  // Admitted sequences whose KV could not be created (still in the running set: retire them).
  std::vector<std::pair<Sequence*, std::string>> failed;
  bool empty() const { return chunks.empty() && failed.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerOptions& opt, KvPlanner& store);

  void add(std::unique_ptr<Sequence> seq);  // to the back of the waiting queue
  Schedule schedule();
  // Removes a sequence from the queue or the running set and gives its KV back to the store now:
  // with keep_prefix, its full blocks stay in the store's prefix cache (not for a sequence a
  // failed step may have half written).
  std::unique_ptr<Sequence> retire(Sequence* seq, bool keep_prefix = true);

  // Device blocks a sequence (kv may be null: a new one) takes from the pool to grow to `tokens`
  // tokens (its plan's net device blocks; 0 without a device tier).
  int64_t blocks_needed(const SequenceKv* kv, int32_t tokens) const;
  int64_t blocks_total() const { return store_.device_blocks_total(); }

  const std::deque<std::unique_ptr<Sequence>>& waiting() const { return waiting_; }
  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  int64_t preemptions() const { return preemptions_; }

 private:
  // The plan of one sequence growing by n tokens (last: its prompt's last prefill chunk, which
  // takes --device-budget's reserve).
  StepPlan plan_one(const SequenceKv* kv, int32_t n, bool decode, bool last) const;
  void preempt_last();  // the most recently admitted running sequence
  // Whether s should wait for a running prefill of a prefix it shares (at least the store's
  // prefix unit, not computed yet), so that it adopts those blocks instead of computing them
  // again: the choices of an n > 1 request, requests with a common system prompt.
  bool awaits_prefix(const Sequence& s) const;

  SchedulerOptions opt_;
  KvPlanner& store_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // admission order
  int64_t preemptions_ = 0;
};

}  // namespace tandem
