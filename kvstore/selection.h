// Host-entry selection policies of the hybrid attention. The primitives are pure functions over
// block metadata (HGCA per-head MAW thresholds, Quest upper bounds and top-k blocks as in
// ScoutAttention, the digest update); each policy is a small unit that turns one (sequence,
// layer, KV head)'s host blocks into the block / entry references the host attention reads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/host_kernel.h"
#include "kvstore/block_access.h"
#include "kvstore/key_quant.h"

namespace tandem {

// Quest upper bound of q·k over a block with per-channel key bounds [kmin, kmax], summed over the
// G query heads of a group: sum_h sum_c max(q_hc * kmin_c, q_hc * kmax_c). q is [G, d].
float quest_bound(const float* q, int32_t G, int32_t d, const float* kmin, const float* kmax);

// Indices of the k largest bounds (all when k >= size), in ascending index order.
std::vector<int32_t> top_k_indices(std::span<const float> bounds, int32_t k);

// HGCA: appends to out the offsets i (ascending) of maw[0..n) with maw[i] > threshold; returns
// how many were appended.
int32_t select_above(const float* maw, int32_t n, float threshold, std::vector<int32_t>& out);

// maw = (1 - alpha) * maw + alpha * p (one entry).
inline float maw_step(float maw, float p, float alpha) { return (1.0f - alpha) * maw + alpha * p; }

// Widens a block digest [kmin, kmax] (d channels) by one key row.
void digest_add(float* kmin, float* kmax, const float* k, int32_t d);

// The host blocks of one (sequence, layer) and the KV head g a policy selects for: block ids
// oldest first, holding host_tokens rows (every block full but the last).
struct HostHead {
  std::span<const int32_t> host;
  int32_t host_tokens = 0;
  const BlockAccess& blocks;
  int32_t g = 0;
  std::span<const float* const> maw = {};  // per block: MAW f32 [Hkv, tokens] (hgca reads it)
  // Block j's reference: all its rows of head g.
  HostBlockRef ref(int32_t j) const;
  int32_t rows_of(int32_t j) const;
  int32_t count() const { return static_cast<int32_t>(host.size()); }
};

// The policies: append to refs (and idx, which refs point into; not grown afterwards) what head
// g attends; return the rows selected.
// full: every host entry.
int64_t select_full(const HostHead& h, std::vector<HostBlockRef>& refs);
// topk: the k blocks with the largest Quest bound for the group's queries qg [G, d]. With skip
// (per block; --device-budget's resident blocks, attended on the device) the selected blocks
// marked there are left out of refs and of the rows returned. chosen, if set, receives the
// selected block indices (ascending, skipped ones included), bounds every block's bound.
int64_t select_topk(const HostHead& h, const float* qg, int32_t G, int32_t k,
                    std::vector<HostBlockRef>& refs, std::span<const uint8_t> skip = {},
                    std::vector<int32_t>* chosen = nullptr, std::vector<float>* bounds = nullptr);
// hgca: the entries whose MAW exceeds threshold.
int64_t select_hgca(const HostHead& h, float threshold, std::vector<HostBlockRef>& refs,
                    std::vector<int32_t>& idx);
// tau (HCAttention Eq. 4): the fewest entries whose attention mass reaches tau, the mass of an
// entry being its softmax probability over the host entries averaged over the group's G query
// heads qg [G, d] (scores scale * q.k from the stored keys); ties broken by position.
int64_t select_tau(const HostHead& h, const float* qg, int32_t G, float scale, float tau,
                   std::vector<HostBlockRef>& refs, std::vector<int32_t>& idx);

// Value offload (--value-offload, HCAttention Eq. 2-5). The approximate scores z [n, G] of every
// host entry of the head (position-major: z[p * G + g]) from the blocks' key codes
// (kvstore/key_quant.h) for the group's queries qg [G, d].
void approx_head_scores(const HostHead& h, const float* qg, int32_t G, float scale, float* z);
// Selection by the approximate scores: with `all` every entry (--sparse full), else the fewest
// whose approximate mass reaches tau, exactly as select_tau does with exact scores. Appends to
// scores the approximate scores [rows, G] of the selected rows in the order of the refs, which
// point into it (HostBlockRef::s), so the host reads no K. err: when set, receives |z~ - z| of
// every entry and query head against the exact scores of the stored keys (a sampled item).
int64_t select_quantized(const HostHead& h, const float* qg, int32_t G, float scale, float tau,
                         bool all, std::vector<HostBlockRef>& refs, std::vector<int32_t>& idx,
                         std::vector<float>& scores, QuantError* err = nullptr);

}  // namespace tandem
