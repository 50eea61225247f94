// The two per-chunk passes of the host attention kernel (kernels/cpu/host_kernel.cpp), as
// function pointers, so that the chunking and the online softmax are written once and the passes
// are chosen by the run-time ISA (kernels/cpu/isa.h).
//   score  s[g * kChunkRows + j] = q_g . k_j for the pass's gs heads and rows j in [0, nr) (nr a
//          multiple of 16); rows: nr pointers to K rows of d elements; q: f32 [gs, d],
//          pre-scaled. Rows pf[0, pf_n) are prefetched along the way.
//   value  acc[g * d + c] += sum over j < nr of p[g * kChunkRows + j] * v_j[c]; rows: nr pointers
//          to V rows, or with v_tile > 0 (V by tiles, HostBlockRef::v_tile) to the rows' first
//          tile: v_j[c] at rows[j][(c / kVTile) * v_tile + c % kVTile]. The columns of rows
//          pf[0, pf_n) are prefetched along the way.
//   cols   s[g * s_stride + i] = q_g . k_i for all G heads and rows i in [0, n), n <= kColRows,
//          of a block whose K is stored by columns (element (i, c) at kt[c * ld + i]): the pass
//          reads K in address order, channel after channel, each channel's rows as whole
//          vectors times q_gc broadcast, so no reduction is needed. q: f32 [G, d], pre-scaled.
//          The rows pf[0, pf_n) (V rows of pf_row_bytes) are prefetched along the way, spread
//          over the channels: every line, or with pf_every > 1 the first of every pf_every lines
//          of each row (LineStream).
// d is a multiple of 8.
#pragma once

#include <cstdint>

#include "kernels/cpu/host_kernel.h"

namespace tandem::cpu {

// Rows of a column-stored K block scored per call of the cols pass (four 16-lane vectors per
// channel).
inline constexpr int32_t kColRows = 64;

// Channels per chain of the cols pass: each score is the sum of d / kColSpan chains of FMAs.
inline constexpr int32_t kColSpan = 32;

template <typename T>
using HostColScore = void (*)(const T* kt, int64_t ld, int32_t n, const float* q, int32_t G,
                              int32_t d, float* s, int32_t s_stride, const T* const* pf,
                              int32_t pf_n, int32_t pf_row_bytes, int32_t pf_every);

template <typename T>
struct HostPasses {
  void (*score)(const T* const* rows, int32_t nr, const float* q, int32_t d, float* s,
                const T* const* pf, int32_t pf_n);
  // pf: rows of pf_row_bytes each, prefetched over the pass, the first of every pf_every lines
  // (LineStream; the AVX2 passes take rows of d elements, pf_row_bytes = d * sizeof(T), and
  // prefetch each sweep's columns of them, every line).
  void (*value)(const T* const* rows, int32_t nr, const float* p, float* acc, int32_t d,
                int64_t v_tile, const T* const* pf, int32_t pf_n, int32_t pf_row_bytes,
                int32_t pf_every);
};

// Where channel c of a V row is, from the row's start: c itself by rows (v_tile 0), else in its
// tile (v_tile elements from one tile to the next; HostBlockRef::v_tile).
inline int64_t v_column(int32_t c, int64_t v_tile) {
  return v_tile == 0 ? c : (c / kVTile) * v_tile + c % kVTile;
}

// The AVX2 cols pass (host_kernel.cpp).
HostColScore<float> host_cols_avx2_f32();
HostColScore<uint16_t> host_cols_avx2_bf16();
HostColScore<uint16_t> host_cols_avx2_f16();

// Lanes of a head's running sum in the online softmax: l_run [G, kSumLanes], lane i holding the
// sum of the weights the softmax's vector lane i produced (the 8-lane path uses lanes 0-7), added
// up once at the end, so no chunk waits on a horizontal sum.
inline constexpr int32_t kSumLanes = 16;

// The online softmax of one chunk, for heads g in [0, G): the scores s[g * kChunkRows + j],
// rows j in [nr, nr_pad) set to -inf first (pad rows), become exp(s - m_g) where m_g, the running
// max m_run[g], is raised to the chunk's max first (acc [G, d] and the running sum's lanes
// l_run[g * kSumLanes, + kSumLanes) rescaled by exp(old - new)); the lanes gain the chunk's
// weights. A head whose scores are all -inf so far gets weights 0.
using HostSoftmax = void (*)(float* s, int32_t G, int32_t nr, int32_t nr_pad, float* m_run,
                             float* l_run, float* acc, int32_t d);

// The body of a HostSoftmax, written once for both vector widths. W supplies, at its width:
//   float chunk_max(float* sg, int32_t nr, int32_t nr_pad)  rows [nr, nr_pad) set to -inf, then
//                                                            the max of sg[0, nr_pad)
//   void scale(float* p, int32_t n, float a)                p[0, n) *= a, n a multiple of 8
//   void weights(float* sg, int32_t nr_pad, float m, float* lg)
//                                   sg[j] = exp(sg[j] - m), lane sums added to lg[0, kSumLanes)
// Heads in groups of 8: every head's chunk max first (independent reductions the core overlaps),
// then per head the rescale and the weights. Inlined into each width's entry point, which has the
// width's target attribute, so W's functions inline there too.
template <class W>
__attribute__((always_inline)) inline void softmax_chunk(float* s, int32_t G, int32_t nr,
                                                         int32_t nr_pad, float* m_run, float* l_run,
                                                         float* acc, int32_t d) {
  constexpr float kNegInf = -__builtin_inff();
  constexpr int32_t kHeads = 8;
  for (int32_t g0 = 0; g0 < G; g0 += kHeads) {
    const int32_t gn = G - g0 < kHeads ? G - g0 : kHeads;
    float cm[kHeads];
    for (int32_t i = 0; i < gn; ++i) cm[i] = W::chunk_max(s + (g0 + i) * kChunkRows, nr, nr_pad);
    for (int32_t i = 0; i < gn; ++i) {
      const int32_t g = g0 + i;
      float* sg = s + g * kChunkRows;
      float& m = m_run[g];
      float* lg = l_run + static_cast<int64_t>(g) * kSumLanes;
      if (cm[i] > m) {
        // Rescale what was accumulated under the old max (nothing yet when it was -inf).
        if (m != kNegInf) {
          const float a = __builtin_expf(m - cm[i]);
          W::scale(acc + static_cast<int64_t>(g) * d, d, a);
          W::scale(lg, kSumLanes, a);
        }
        m = cm[i];
      }
      if (m == kNegInf) {  // every score so far is -inf: weights 0 (exp(-inf - -inf) is NaN)
        for (int32_t j = 0; j < nr_pad; ++j) sg[j] = 0.0f;
        continue;
      }
      // Pad rows have score -inf, and W's exp maps -inf to exactly 0.
      W::weights(sg, nr_pad, m, lg);
    }
  }
}

// The AVX-512 passes (kernels/cpu/host_kernel_avx512.cpp) for gs heads per pass, 1 to 4. Call
// only when active_isa() is avx512 or above.
HostColScore<float> host_cols_avx512_f32();
HostColScore<uint16_t> host_cols_avx512_bf16();
HostColScore<uint16_t> host_cols_avx512_f16();
HostPasses<float> host_passes_avx512_f32(int gs);
HostPasses<uint16_t> host_passes_avx512_bf16(int gs);
HostPasses<uint16_t> host_passes_avx512_f16(int gs);
void host_softmax_avx512(float* s, int32_t G, int32_t nr, int32_t nr_pad, float* m_run,
                         float* l_run, float* acc, int32_t d);

}  // namespace tandem::cpu
