// Host-entry selection policies of the hybrid attention, as pure functions over block metadata:
// HGCA per-head MAW thresholds, Quest upper bounds and top-k blocks (ScoutAttention), and the
// MAW / digest updates that feed them.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

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

}  // namespace tandem
