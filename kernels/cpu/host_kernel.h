// The host attention kernel: decode attention of one query token over host-resident KV blocks,
// for one KV head and the G query heads that share it (GQA group). Returns the partial (o, lse)
// of kernels/attn_partial.h, so it merges with the device part by merge_partial_row.
//
// Memory-bound by design: every K and V byte is read once for all G query heads. float32 math on
// AVX2/FMA/F16C; rows are processed in chunks of kChunkRows (scores, one max update and rescale
// per chunk, then the V accumulation).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/dtype.h"

namespace tandem {

// One block's rows of one KV head: V [n, head_dim] contiguous rows in the store's KV dtype (or
// rows `stride` elements apart, e.g. one head of [n, n_head_kv, head_dim] rows); K likewise, or
// stored by columns [head_dim, k_ld] as the host store keeps it (k_ld below): the score pass then
// reads K in address order, which the hardware prefetchers follow.
struct HostBlockRef {
  const void* k = nullptr;       // [n, head_dim], or [head_dim, k_ld] (k_ld below)
  const void* v = nullptr;       // [n, head_dim]
  int32_t n = 0;                 // valid rows in the block
  const int32_t* idx = nullptr;  // optional selection: attend only rows idx[0, n_idx), each in
                                 // [0, n); nullptr = all n rows
  int32_t n_idx = 0;
  int64_t stride = 0;  // elements from one row to the next; 0 = head_dim (contiguous rows)
  // K stored by columns, as the host store keeps it: element (row i, channel c) at
  // k[c * k_ld + i], k_ld >= n (the block's row capacity); 0 = K by rows like V (stride above).
  // Rows a.. of such a block start at k + a.
  int64_t k_ld = 0;
  // V stored by tiles of kVTile channels, as the host store keeps it when head_dim is a larger
  // multiple of kVTile: element (row i, channel c) at v[(c / kVTile) * v_tile + i * kVTile +
  // c % kVTile], v_tile >= n * kVTile (the block's row capacity times kVTile); 0 = V by rows
  // (stride above, which must then be 0). The value passes then read V in address order, one
  // tile after the other, which the hardware prefetchers follow (docs/host-attention.md).
  int64_t v_tile = 0;
  // Optional given scores (value offload): s[i * G + g] is the score, already scaled, of the
  // block's i-th selected row for query head g of the call; K is then not read (k may be null).
  const float* s = nullptr;

  // Rows this block contributes.
  int32_t rows() const { return idx != nullptr ? n_idx : n; }
};

// Channels per tile of a V stored by tiles (HostBlockRef::v_tile): the columns one value sweep of
// the AVX-512 passes covers for 3-4 heads.
inline constexpr int32_t kVTile = 64;

// Whether the host store keeps V by tiles for this head_dim: a larger multiple of kVTile (at
// kVTile itself a tile is a row).
inline constexpr bool v_by_tiles(int32_t head_dim) {
  return head_dim > kVTile && head_dim % kVTile == 0;
}

// Rows per chunk of the online softmax (one max update and rescale per chunk): a host block of
// 64 tokens is one chunk, so its scores go from the cols pass to the softmax in place.
inline constexpr int32_t kChunkRows = 64;

// Attention of one query token, G query heads, over the selected rows of `blocks` (in order).
//   q    f32 [G, d]  query heads of the group (not yet scaled)
//   o    f32 [G, d]  out: softmax(scale * q.K^T) V over the selected rows
//   lse  f32 [G]     out: natural log of sum_j exp(scale * q.k_j)
// kv_dtype: f32, f16 or bf16; d a multiple of 8; G >= 1. No block or no selected row gives the
// empty partial: lse = -inf, o = 0. Throws tandem::Error (kInternal) on bad arguments or an idx
// entry outside [0, n). q, o and lse must not alias the KV.
void host_attend_group(const float* q, int32_t G, int32_t d, float scale, DType kv_dtype,
                       std::span<const HostBlockRef> blocks, float* o, float* lse);

// One KV head's call of host_attend_groups: host_attend_group's arguments.
struct HostGroupCall {
  const float* q = nullptr;  // f32 [G, d]
  int32_t G = 1;
  std::span<const HostBlockRef> blocks;
  float* o = nullptr;    // f32 [G, d] out
  float* lse = nullptr;  // f32 [G] out
};

// host_attend_group for several calls at once, their blocks taken in turn: block 0 of every call,
// then block 1 of every call, and so on, each block's K prefetched during the one before it in
// that order. For the KV heads of one sequence, whose blocks lie side by side in the host store
// (kvstore/block_table.h), K and V are then read in address order: a few long streams the
// hardware prefetchers follow, where one head at a time reads 32 KB runs far apart. Each call's
// o and lse are the same bits as host_attend_group's. Calls whose blocks carry given scores
// (value offload) run one after the other.
void host_attend_groups(int32_t d, float scale, DType kv_dtype,
                        std::span<const HostGroupCall> calls);

// The weighted-value kernel of value offload (HCAttention Eq. 5): the same partial as
// host_attend_group, o = softmax(s) V and lse = logsumexp(s) per query head, over scores given
// with every block (HostBlockRef::s; K is not read). Blocks without s are an error here;
// host_attend_group itself takes this path when its blocks carry scores (all or none of them).
void host_weighted_values(int32_t G, int32_t d, DType kv_dtype,
                          std::span<const HostBlockRef> blocks, float* o, float* lse);

// Bytes of K and V that host_attend_group reads for these blocks (selected rows only; V only for
// blocks with given scores).
int64_t host_kv_bytes(std::span<const HostBlockRef> blocks, int32_t d, DType kv_dtype);

}  // namespace tandem
