// StepPlan: what one step will do to the KV cache, computed before anything changes (in the
// manner of llama.cpp's memory interface, which plans a batch before it mutates the cache).
//
// KvPlanner::plan(batch) answers, for each sequence of a candidate batch, the blocks it will take
// and give back in each tier; the scheduler admits and preempts by asking it whether a plan fits.
// The store commits a plan when the step starts (KvStore::commit: every check that can fail runs
// before the first block moves) and fills in, layer by layer, what each (sequence, KV head)
// attends: the device pages as of the start of the step and the host blocks or entries its
// policy selected.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <vector>

namespace tandem {

class SequenceKv;

// One sequence's share of a candidate step: `tokens` new tokens after what it holds now.
struct PlanRequest {
  const SequenceKv* kv = nullptr;  // nullptr: a sequence not created yet (holds nothing)
  int32_t tokens = 0;
  bool decode = false;   // one generated token (sparse host attention allowed)
  bool observe = false;  // the last prefill chunk of a prompt
};

// Blocks of one tier (all layers) a step takes from and returns to its pool.
struct TierDelta {
  int64_t alloc = 0;  // blocks taken
  int64_t freed = 0;  // blocks returned (device: evicted window blocks)
  int64_t net() const { return alloc - freed; }
};

// What one (sequence, layer) attends in a step, as of its start.
struct LayerSpans {
  int32_t sink_rows = 0;          // tokens in the sink block (0: none)
  int32_t sink = -1;              // device block id of the sinks
  std::vector<int32_t> window;    // device block ids, oldest first
  int32_t window_tokens = 0;      // the last window block may be partial
  std::vector<int32_t> host;      // host block ids, oldest first
  std::vector<const float*> maw;  // per host block: the sequence's MAW values [Hkv, block]
  int32_t host_tokens = 0;        //
  std::vector<int64_t> selected;  // per KV head: host entries the policy selected (decode)
  // --device-budget (kvstore/resident.h): device blocks holding copies of host blocks, which a
  // decode step's device part attends (every KV head), and per host block whether it is one of
  // them (the CPU then skips it). Empty without a resident set.
  std::vector<int32_t> resident;
  std::vector<uint8_t> on_device;
};

struct SequencePlan {
  PlanRequest request;
  TierDelta device, host;
  int32_t evictions = 0;           // window blocks per layer that move to the host tier
  int32_t reserve = 0;             // device blocks per layer the step reserves (--device-budget)
  std::vector<LayerSpans> layers;  // filled by commit (empty in a plan that only sizes)
};

struct StepPlan {
  std::vector<SequencePlan> seqs;
  TierDelta device, host;   // sums over seqs
  int64_t device_free = 0;  // device blocks free when the plan was made
  // Host blocks the step can take when the plan was made: free within the host bound, or held
  // by prefix-cache entries nobody references (evicted on demand).
  int64_t host_free = std::numeric_limits<int64_t>::max() / 4;
  // Whether both tiers can take the step: blocks are freed (evictions) before the same layer
  // allocates, so the net count is what has to be free.
  bool fits() const { return device.net() <= device_free && host.net() <= host_free; }
};

// The scheduler's view of a KV store: plans, and sequences to plan for.
class KvPlanner {
 public:
  virtual ~KvPlanner() = default;
  // The plan of a candidate batch; changes nothing. Sequences of the batch are distinct.
  virtual StepPlan plan(std::span<const PlanRequest> batch) const = 0;
  // A new sequence that may grow to `capacity` tokens, to hold `tokens` (its prompt, or prompt
  // and generated tokens after a preemption): a store with a prefix cache hands it the longest
  // cached prefix of them already stored (its length()); others return it empty.
  virtual std::unique_ptr<SequenceKv> new_sequence(int32_t capacity,
                                                   std::span<const int32_t> tokens = {}) = 0;
  // Gives a sequence back: a store with a prefix cache keeps the full blocks of its first
  // length() tokens (`tokens` holds at least those), then frees it. Empty tokens: nothing kept
  // (a sequence a failed step may have half written).
  virtual void release(std::unique_ptr<SequenceKv> kv, std::span<const int32_t> tokens);
  // Device blocks of the pool (0: no device tier limits admission, e.g. a dense store).
  virtual int64_t device_blocks_total() const = 0;
  // Tokens of the first chunk a prefix cache keeps (the sinks and one block): sequences that
  // share them may share a cached prefix. 0: the store caches no prefixes.
  virtual int32_t prefix_unit() const { return 0; }
};

}  // namespace tandem
