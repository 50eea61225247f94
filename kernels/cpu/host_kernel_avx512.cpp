// The AVX-512 passes of the host attention kernel (kernels/cpu/host_kernel_passes.h): the same
// arithmetic as the AVX2 passes of host_kernel.cpp on 16 lanes, so half the FMAs and, for bf16
// and f16 KV, half the conversions per byte; with 32 registers the value pass keeps up to 24
// accumulators over a chunk's rows. Each score is one f32 dot product accumulated per lane and
// summed at the end (the order differs from the AVX2 path's: results agree to rounding, not bit
// for bit). A head_dim that is an odd multiple of 8 ends with a masked half vector.
//
// Compiled with the baseline flags: the AVX-512 code is in function-level target attributes
// inside the anonymous namespace, reached only through the host_passes_avx512_* entry points
// (the rule of kernels/cpu/isa.h). Helpers carry the attribute themselves.
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() placeholders to their builtins, which it
// then reports as maybe uninitialised once inlined into target-attribute functions.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "kernels/cpu/host_kernel.h"
#include "kernels/cpu/host_kernel_passes.h"

#define TANDEM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define TANDEM_AVX512_INLINE TANDEM_AVX512 __attribute__((always_inline)) inline

namespace tandem::cpu {
namespace {

// Keeps a loaded vector in a register (see host_kernel.cpp: GCC would otherwise fold the load
// into every FMA that uses it).
#define TANDEM_ZMM_IN_REGISTER(x) __asm__("" : "+v"(x))

constexpr __mmask16 kFull = 0xFFFF;
constexpr __mmask16 kHalf = 0x00FF;  // the last 8 lanes of an odd multiple of 8

// 16 elements (the first 8 with kHalf, the rest 0) as f32.
struct LoadF32 {
  using T = float;
  TANDEM_AVX512_INLINE static __m512 load(const float* p, __mmask16 m) {
    return m == kFull ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
  }
};
struct LoadBF16 {
  using T = uint16_t;
  TANDEM_AVX512_INLINE static __m512 load(const uint16_t* p, __mmask16 m) {
    const __m256i h = m == kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                 : _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
struct LoadF16 {
  using T = uint16_t;
  TANDEM_AVX512_INLINE static __m512 load(const uint16_t* p, __mmask16 m) {
    const __m256i h = m == kFull ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                 : _mm256_maskz_loadu_epi16(m, p);
    return _mm512_cvtph_ps(h);
  }
};

// The cache lines of [p, p + bytes) into L2 (why L2: host_kernel.cpp).
TANDEM_AVX512_INLINE void prefetch_l2(const void* p, int32_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t line = a & ~uintptr_t{63}; line < a + static_cast<uintptr_t>(bytes); line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T2);
}

// The 8 sums of a[0..8), in order.
TANDEM_AVX512_INLINE __m256 reduce8x16(const __m512* a) {
  __m256 h[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    h[i] = _mm256_add_ps(_mm512_castps512_ps256(a[i]), _mm512_extractf32x8_ps(a[i], 1));
  // hadd(hadd(h0, h1), hadd(h2, h3)): lane i of each 128-bit half is part of the sum of h_i.
  const __m256 t0 = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
  const __m256 t1 = _mm256_hadd_ps(_mm256_hadd_ps(h[4], h[5]), _mm256_hadd_ps(h[6], h[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}

// One column step of the score pass: acc[g * R + r] += q_g[c..] * k_r[c..] (16 lanes, masked).
template <class L, int GS>
TANDEM_AVX512_INLINE void score_step(const typename L::T* const* rows, const float* q, int32_t d,
                                     int32_t c, __mmask16 m, __m512* acc) {
  constexpr int R = 8 / GS;
  __m512 kv[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    kv[r] = L::load(rows[r] + c, m);
    if constexpr (GS >= 2) TANDEM_ZMM_IN_REGISTER(kv[r]);
  }
#pragma GCC unroll 8
  for (int g = 0; g < GS; ++g) {
    __m512 qv =
        m == kFull ? _mm512_loadu_ps(q + g * d + c) : _mm512_maskz_loadu_ps(m, q + g * d + c);
    if constexpr (GS >= 3) TANDEM_ZMM_IN_REGISTER(qv);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[g * R + r] = _mm512_fmadd_ps(qv, kv[r], acc[g * R + r]);
  }
}

template <class L, int GS>
TANDEM_AVX512 void score_pass(const typename L::T* const* rows, int32_t nr, const float* q,
                              int32_t d, float* s, const typename L::T* const* pf, int32_t pf_n) {
  constexpr int R = 8 / GS;
  const int32_t row_bytes = d * static_cast<int32_t>(sizeof(typename L::T));
  for (int32_t j = 0; j < nr; j += R) {
    for (int32_t r = j; r < j + R && r < pf_n; ++r) prefetch_l2(pf[r], row_bytes);
    __m512 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = _mm512_setzero_ps();
    int32_t c = 0;
    for (; c + 16 <= d; c += 16) score_step<L, GS>(rows + j, q, d, c, kFull, acc);
    if (c < d) score_step<L, GS>(rows + j, q, d, c, kHalf, acc);
    alignas(32) float t[8];
    _mm256_store_ps(t, reduce8x16(acc));
#pragma GCC unroll 8
    for (int g = 0; g < GS; ++g)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[g * kChunkRows + j + r] = t[g * R + r];
  }
}

// acc[g, c0 .. c0 + 16 CB) += sum_j p[g * kChunkRows + j] * v_j[c0 ...]; the last block masked
// with m. GS * CB accumulators stay in registers over the chunk's rows; each V load serves GS
// heads. Also prefetches the same columns of rows pf[0, pf_n).
template <class L, int GS, int CB>
TANDEM_AVX512 void value_block(const typename L::T* const* rows, int32_t nr, const float* p,
                               float* acc, int32_t d, int32_t c0, __mmask16 m,
                               const typename L::T* const* pf, int32_t pf_n) {
  constexpr int32_t kBlockBytes = 16 * CB * static_cast<int32_t>(sizeof(typename L::T));
  __m512 o[GS * CB];
#pragma GCC unroll 24
  for (int g = 0; g < GS; ++g)
#pragma GCC unroll 8
    for (int b = 0; b < CB; ++b)
      o[g * CB + b] = _mm512_maskz_loadu_ps(b == CB - 1 ? m : kFull, acc + g * d + c0 + 16 * b);
  for (int32_t j = 0; j < nr; ++j) {
    if (j < pf_n) prefetch_l2(pf[j] + c0, kBlockBytes);
    const typename L::T* vr = rows[j] + c0;
    __m512 w[GS];
#pragma GCC unroll 4
    for (int g = 0; g < GS; ++g) w[g] = _mm512_set1_ps(p[g * kChunkRows + j]);
#pragma GCC unroll 8
    for (int b = 0; b < CB; ++b) {
      __m512 v = L::load(vr + 16 * b, b == CB - 1 ? m : kFull);
      if constexpr (GS >= 2) TANDEM_ZMM_IN_REGISTER(v);
#pragma GCC unroll 4
      for (int g = 0; g < GS; ++g) o[g * CB + b] = _mm512_fmadd_ps(w[g], v, o[g * CB + b]);
    }
  }
#pragma GCC unroll 24
  for (int g = 0; g < GS; ++g)
#pragma GCC unroll 8
    for (int b = 0; b < CB; ++b)
      _mm512_mask_storeu_ps(acc + g * d + c0 + 16 * b, b == CB - 1 ? m : kFull, o[g * CB + b]);
}

// The widest column blocks that keep <= 24 accumulators (16 for 4 heads), then narrower ones,
// then a masked half block when d is an odd multiple of 8.
template <class L, int GS>
TANDEM_AVX512 void value_pass(const typename L::T* const* rows, int32_t nr, const float* p,
                              float* acc, int32_t d, const typename L::T* const* pf, int32_t pf_n) {
  constexpr int CB = GS <= 2 ? 8 : 4;
  int32_t c = 0;
  for (; c + 16 * CB <= d; c += 16 * CB)
    value_block<L, GS, CB>(rows, nr, p, acc, d, c, kFull, pf, pf_n);
  if constexpr (CB > 2)
    for (; c + 32 <= d; c += 32) value_block<L, GS, 2>(rows, nr, p, acc, d, c, kFull, pf, pf_n);
  for (; c + 16 <= d; c += 16) value_block<L, GS, 1>(rows, nr, p, acc, d, c, kFull, pf, pf_n);
  if (c < d) value_block<L, GS, 1>(rows, nr, p, acc, d, c, kHalf, pf, pf_n);
}

template <class L>
HostPasses<typename L::T> passes(int gs) {
  switch (gs) {
    case 1:
      return {&score_pass<L, 1>, &value_pass<L, 1>};
    case 2:
      return {&score_pass<L, 2>, &value_pass<L, 2>};
    case 3:
      return {&score_pass<L, 3>, &value_pass<L, 3>};
    default:
      return {&score_pass<L, 4>, &value_pass<L, 4>};
  }
}

}  // namespace

HostPasses<float> host_passes_avx512_f32(int gs) { return passes<LoadF32>(gs); }
HostPasses<uint16_t> host_passes_avx512_bf16(int gs) { return passes<LoadBF16>(gs); }
HostPasses<uint16_t> host_passes_avx512_f16(int gs) { return passes<LoadF16>(gs); }

}  // namespace tandem::cpu
