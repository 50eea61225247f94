// The two per-chunk passes of the host attention kernel (kernels/cpu/host_kernel.cpp), as
// function pointers, so that the chunking and the online softmax are written once and the passes
// are chosen by the run-time ISA (kernels/cpu/isa.h).
//   score  s[g * kChunkRows + j] = q_g . k_j for the pass's gs heads and rows j in [0, nr) (nr a
//          multiple of 16); rows: nr pointers to K rows of d elements; q: f32 [gs, d],
//          pre-scaled. Rows pf[0, pf_n) are prefetched along the way.
//   value  acc[g * d + c] += sum over j < nr of p[g * kChunkRows + j] * v_j[c]; rows: nr pointers
//          to V rows. The columns of rows pf[0, pf_n) are prefetched along the way.
// d is a multiple of 8.
#pragma once

#include <cstdint>

namespace tandem::cpu {

template <typename T>
struct HostPasses {
  void (*score)(const T* const* rows, int32_t nr, const float* q, int32_t d, float* s,
                const T* const* pf, int32_t pf_n);
  void (*value)(const T* const* rows, int32_t nr, const float* p, float* acc, int32_t d,
                const T* const* pf, int32_t pf_n);
};

// The online softmax of one chunk, for heads g in [0, G): the scores s[g * kChunkRows + j],
// rows j in [nr, nr_pad) set to -inf first (pad rows), become exp(s - m_g) where m_g, the running
// max m_run[g], is raised to the chunk's max first (acc [G, d] and the running sum l_run[g]
// rescaled by exp(old - new)); l_run[g] gains the chunk's sum. A head whose scores are all -inf
// so far gets weights 0.
using HostSoftmax = void (*)(float* s, int32_t G, int32_t nr, int32_t nr_pad, float* m_run,
                             float* l_run, float* acc, int32_t d);

// The AVX-512 passes (kernels/cpu/host_kernel_avx512.cpp) for gs heads per pass, 1 to 4. Call
// only when active_isa() is avx512 or above.
HostPasses<float> host_passes_avx512_f32(int gs);
HostPasses<uint16_t> host_passes_avx512_bf16(int gs);
HostPasses<uint16_t> host_passes_avx512_f16(int gs);
void host_softmax_avx512(float* s, int32_t G, int32_t nr, int32_t nr_pad, float* m_run,
                         float* l_run, float* acc, int32_t d);

}  // namespace tandem::cpu
