// The resident set of --device-budget (ScoutAttention §3.4): per (sequence, layer), copies of up to
// B = device_budget / block important host blocks kept in device blocks beside sinks and window.
// A decode step's device part attends them (all KV heads: a block is resident for every head);
// topk's selection per KV head is unchanged, but the CPU attends only the selected blocks that
// are not resident, so every host entry is counted once.
//
// The set is chosen after the prompt's last prefill chunk by the Quest bound of the prompt's last
// query summed over KV heads (the score topk itself ranks blocks by), and recalled, when due, from
// a decode step's top-k bounds (kvstore/hybrid_recall.cpp). A recalled block is copied as
// [Hkv, block, d] K then V (V as the host block stores it, K transposed back from the host
// block's columns to rows on the host): the device part reads it through strides.
//
// The pure choices live here (tested against brute force in tests/test_device_budget.cpp); the
// copies are HybridKv's (kvstore/resident.cpp), the timing the runner's.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvstore/block_access.h"
#include "kvstore/kv_config.h"

namespace tandem {

// One (sequence, layer)'s resident set.
struct ResidentLayer {
  std::vector<int32_t> dev;   // device blocks held for it (the reserve), one per slot
  std::vector<int32_t> host;  // per slot: index in LayerTable::host of the block it copies; -1
  bool chosen = false;        // the first set (post-prefill, or at the first decode) is in place
  int32_t steps = 0;          // decode steps since the last recall (or the first set)
  double ratio_sum = 0;       // their CPU compute ratios (--recall-interval auto)
  double ratio_last = 0;      // the last one's
};

// B: whole blocks of --device-budget.
inline int32_t resident_blocks(const KvConfig& cfg) {
  return cfg.device_budget > 0 ? cfg.device_budget / cfg.block : 0;
}

// Device blocks per layer a sequence of `length` tokens holds for its resident set: B, or its
// host blocks if fewer. Reserved from the prompt's last prefill chunk on, and grown by the decode
// steps that bring host blocks until it reaches B (each step's plan counts what it adds).
int32_t resident_reserve(const KvConfig& cfg, int64_t length);

// Quest bounds of a query q [Hq, d] over host blocks, summed over the KV heads (each bound
// summed over the group's G query heads, as topk ranks blocks) -> out [host.size()].
void summed_bounds(const BlockAccess& blocks, std::span<const int32_t> host, const float* q,
                   int32_t n_head_kv, int32_t G, std::vector<float>& out);

// The post-prefill set: the r blocks of largest score (ties: the older), ascending.
std::vector<int32_t> choose_initial(std::span<const float> score, int32_t r);

// A recall's set of r blocks (ascending) among score.size(): the blocks in the union of the KV
// heads' top-k selections first, by score; then, if that union is smaller than r, blocks already
// resident (no copy needed), then the others, each by score (ties: the older).
std::vector<int32_t> choose_recall(std::span<const float> score, std::span<const uint8_t> in_union,
                                   std::span<const uint8_t> resident, int32_t r);

// Puts `wanted` (block indices, at most slots.size()) into the slots (-1: empty): a block already
// in a slot stays there, the others take the slots whose block left, in order. Returns the
// slots that need a copy.
std::vector<int32_t> assign_slots(std::vector<int32_t>& slots, std::span<const int32_t> wanted);

// Whether a layer's resident set is due for a recall after a decode step (its ratio counted in
// r.steps, r.ratio_sum and r.ratio_last): the first set not chosen yet; interval N every N
// steps; auto when the mean ratio since the last recall would exceed the threshold one step
// later if the next step's ratio were this one's (the recall lands before that step: waiting
// for the mean itself to pass the threshold would end every interval above it). Interval 0:
// only the first.
bool recall_due(const KvConfig& cfg, const ResidentLayer& r);

}  // namespace tandem
