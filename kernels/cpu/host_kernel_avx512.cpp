// The AVX-512 passes of the host attention kernel (kernels/cpu/host_kernel_passes.h): the same
// arithmetic as the AVX2 passes of host_kernel.cpp on 16 lanes, so half the FMAs and, for bf16
// and f16 KV, half the conversions per byte; with 32 registers the value pass keeps up to 24
// accumulators over a chunk's rows, and the score pass of 1, 2 or 4 heads 16 (R = 16 / heads
// rows per q load, one 16-lane reduction tree). Each score is one f32 dot product accumulated
// per lane and summed at the end (the order differs from the AVX2 path's: results agree to
// rounding, not bit for bit). A head_dim that is an odd multiple of 8 ends with a masked half
// vector. The chunk softmax also has a 16-lane version here (host_softmax_avx512).
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

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/host_kernel.h"
#include "kernels/cpu/host_kernel_passes.h"
#include "kernels/cpu/line_stream.h"

#define TANDEM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define TANDEM_AVX512_INLINE TANDEM_AVX512 __attribute__((always_inline)) inline
#define TANDEM_AVX512_INLINE_LAMBDA \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"), always_inline))

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

// The 16 sums of a[0..16): lane i of the result is the sum of a[i]'s lanes. Within each quad of
// accumulators two unpack levels fold the four 128-bit lanes' elements; then one 4x4 transpose of
// 128-bit lanes adds the quads' lanes. 45 instructions for 16 dot products, against ~35 per 8 for
// the extract + hadd tree of reduce8x16.
TANDEM_AVX512_INLINE __m512 reduce16x16(const __m512* a) {
  __m512 u[4];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    const __m512* x = a + 4 * q;
    // Per 128-bit lane: [x0_0 + x0_2, x1_0 + x1_2, x0_1 + x0_3, x1_1 + x1_3], same for x2, x3.
    const __m512 t0 = _mm512_add_ps(_mm512_unpacklo_ps(x[0], x[1]), _mm512_unpackhi_ps(x[0], x[1]));
    const __m512 t1 = _mm512_add_ps(_mm512_unpacklo_ps(x[2], x[3]), _mm512_unpackhi_ps(x[2], x[3]));
    // Per 128-bit lane: the lane's sums of x0, x1, x2, x3.
    u[q] = _mm512_add_ps(
        _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))),
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t0), _mm512_castps_pd(t1))));
  }
  // w01 lanes: u0 (L0 + L2), u0 (L1 + L3), u1 (L0 + L2), u1 (L1 + L3); w23 likewise.
  const __m512 w01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x44), _mm512_shuffle_f32x4(u[0], u[1], 0xEE));
  const __m512 w23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x44), _mm512_shuffle_f32x4(u[2], u[3], 0xEE));
  // Lane q: every lane of u_q added.
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

// The score pass for 1, 2 or 4 heads with 16 accumulators: R = 16 / GS rows at a time, each K
// load serving GS heads and each q load R rows, the 16 dot products reduced by reduce16x16 into
// one vector whose lanes g * R + r are stored as the R scores of head g. nr a multiple of R.
template <class L, int GS>
TANDEM_AVX512 void score_pass16(const typename L::T* const* rows, int32_t nr, const float* q,
                                int32_t d, float* s, const typename L::T* const* pf, int32_t pf_n) {
  static_assert(GS == 1 || GS == 2 || GS == 4);
  constexpr int R = 16 / GS;
  const int32_t row_bytes = d * static_cast<int32_t>(sizeof(typename L::T));
  for (int32_t j = 0; j < nr; j += R) {
    for (int32_t r = j; r < j + R && r < pf_n; ++r) prefetch_l2(pf[r], row_bytes);
    __m512 acc[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
    auto step = [&](int32_t c, __mmask16 m) TANDEM_AVX512_INLINE_LAMBDA {
      __m512 kv[R];
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        kv[r] = L::load(rows[j + r] + c, m);
        if constexpr (GS >= 2) TANDEM_ZMM_IN_REGISTER(kv[r]);
      }
#pragma GCC unroll 4
      for (int g = 0; g < GS; ++g) {
        __m512 qv =
            m == kFull ? _mm512_loadu_ps(q + g * d + c) : _mm512_maskz_loadu_ps(m, q + g * d + c);
        TANDEM_ZMM_IN_REGISTER(qv);
#pragma GCC unroll 16
        for (int r = 0; r < R; ++r) acc[g * R + r] = _mm512_fmadd_ps(qv, kv[r], acc[g * R + r]);
      }
    };
    int32_t c = 0;
    for (; c + 16 <= d; c += 16) step(c, kFull);
    if (c < d) step(c, kHalf);
    const __m512 t = reduce16x16(acc);
    if constexpr (GS == 1) {
      _mm512_storeu_ps(s + j, t);
    } else if constexpr (GS == 2) {
      _mm256_storeu_ps(s + j, _mm512_castps512_ps256(t));
      _mm256_storeu_ps(s + kChunkRows + j, _mm512_extractf32x8_ps(t, 1));
    } else {
      _mm_storeu_ps(s + j, _mm512_castps512_ps128(t));
      _mm_storeu_ps(s + kChunkRows + j, _mm512_extractf32x4_ps(t, 1));
      _mm_storeu_ps(s + 2 * kChunkRows + j, _mm512_extractf32x4_ps(t, 2));
      _mm_storeu_ps(s + 3 * kChunkRows + j, _mm512_extractf32x4_ps(t, 3));
    }
  }
}

// acc[g, c0 .. c0 + 16 CB) += sum_j p[g * kChunkRows + j] * v_j[c0 ...]; the last block masked
// with m. GS * CB accumulators stay in registers over the chunk's rows; each V load serves GS
// heads. pf (the pass's prefetch stream) ticks once per row. Block b of a row is at off[b] from
// the row's pointer (v_column: in the row, or in its tile; a block never straddles two tiles).
template <class L, int GS, int CB>
TANDEM_AVX512 void value_block(const typename L::T* const* rows, int32_t nr, const float* p,
                               float* acc, int32_t d, int64_t v_tile, int32_t c0, __mmask16 m,
                               LineStream& pf_io) {
  LineStream pf = pf_io;  // in registers over the loops
  int64_t off[CB];
#pragma GCC unroll 8
  for (int b = 0; b < CB; ++b) off[b] = v_column(c0 + 16 * b, v_tile);
  // bf16 with whole 32-channel pairs of blocks: one 64-byte load per pair, widened by shift
  // (even channels) and mask (odd ones), as the cols pass does; the pair's accumulators then
  // hold the even and the odd channels, permuted from and back to acc's order around the rows.
  if constexpr (std::is_same_v<L, LoadBF16> && CB % 2 == 0) {
    if (m == kFull) {
      const __m512i ev_idx =
          _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
      const __m512i od_idx =
          _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
      __m512 o[GS * CB];
#pragma GCC unroll 4
      for (int g = 0; g < GS; ++g)
#pragma GCC unroll 4
        for (int b = 0; b < CB; b += 2) {
          const __m512 a0 = _mm512_loadu_ps(acc + g * d + c0 + 16 * b);
          const __m512 a1 = _mm512_loadu_ps(acc + g * d + c0 + 16 * b + 16);
          o[g * CB + b] = _mm512_permutex2var_ps(a0, ev_idx, a1);
          o[g * CB + b + 1] = _mm512_permutex2var_ps(a0, od_idx, a1);
        }
      const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
      for (int32_t j = 0; j < nr; ++j) {
        pf.tick_many();
        const uint16_t* vr = rows[j];
        __m512 w[GS];
#pragma GCC unroll 4
        for (int g = 0; g < GS; ++g) w[g] = _mm512_set1_ps(p[g * kChunkRows + j]);
#pragma GCC unroll 4
        for (int b = 0; b < CB; b += 2) {
          const __m512i x = _mm512_loadu_si512(vr + off[b]);
          __m512 ve = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
          __m512 vo = _mm512_castsi512_ps(_mm512_and_si512(x, hi_mask));
          if constexpr (GS >= 2) {
            TANDEM_ZMM_IN_REGISTER(ve);
            TANDEM_ZMM_IN_REGISTER(vo);
          }
#pragma GCC unroll 4
          for (int g = 0; g < GS; ++g) {
            o[g * CB + b] = _mm512_fmadd_ps(w[g], ve, o[g * CB + b]);
            o[g * CB + b + 1] = _mm512_fmadd_ps(w[g], vo, o[g * CB + b + 1]);
          }
        }
      }
      const __m512i lo_idx =
          _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      const __m512i hi_idx =
          _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
#pragma GCC unroll 4
      for (int g = 0; g < GS; ++g)
#pragma GCC unroll 4
        for (int b = 0; b < CB; b += 2) {
          const __m512 ev = o[g * CB + b], od = o[g * CB + b + 1];
          _mm512_storeu_ps(acc + g * d + c0 + 16 * b, _mm512_permutex2var_ps(ev, lo_idx, od));
          _mm512_storeu_ps(acc + g * d + c0 + 16 * b + 16, _mm512_permutex2var_ps(ev, hi_idx, od));
        }
      pf_io = pf;
      return;
    }
  }
  __m512 o[GS * CB];
#pragma GCC unroll 24
  for (int g = 0; g < GS; ++g)
#pragma GCC unroll 8
    for (int b = 0; b < CB; ++b)
      o[g * CB + b] = _mm512_maskz_loadu_ps(b == CB - 1 ? m : kFull, acc + g * d + c0 + 16 * b);
  for (int32_t j = 0; j < nr; ++j) {
    pf.tick_many();
    const typename L::T* vr = rows[j];
    __m512 w[GS];
#pragma GCC unroll 4
    for (int g = 0; g < GS; ++g) w[g] = _mm512_set1_ps(p[g * kChunkRows + j]);
#pragma GCC unroll 8
    for (int b = 0; b < CB; ++b) {
      __m512 v = L::load(vr + off[b], b == CB - 1 ? m : kFull);
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
  pf_io = pf;
}

// The widest column blocks that keep <= 24 accumulators (16 for 4 heads), then narrower ones,
// then a masked half block when d is an odd multiple of 8.
template <class L, int GS>
TANDEM_AVX512 void value_pass(const typename L::T* const* rows, int32_t nr, const float* p,
                              float* acc, int32_t d, int64_t v_tile, const typename L::T* const* pf,
                              int32_t pf_n, int32_t pf_row_bytes, int32_t pf_every) {
  constexpr int CB = GS <= 2 ? 8 : 4;
  // The column sweeps below, each nr row steps: the prefetch list's lines spread over them.
  const int32_t rest = d % (16 * CB);
  const int32_t sweeps = d / (16 * CB) + rest / 32 + rest % 32 / 16 + (d % 16 != 0);
  LineStream pl(reinterpret_cast<const void* const*>(pf), pf_n, pf_row_bytes, pf_every);
  pl.pace(int64_t{nr} * sweeps);
  int32_t c = 0;
  for (; c + 16 * CB <= d; c += 16 * CB)
    value_block<L, GS, CB>(rows, nr, p, acc, d, v_tile, c, kFull, pl);
  if constexpr (CB > 2)
    for (; c + 32 <= d; c += 32) value_block<L, GS, 2>(rows, nr, p, acc, d, v_tile, c, kFull, pl);
  for (; c + 16 <= d; c += 16) value_block<L, GS, 1>(rows, nr, p, acc, d, v_tile, c, kFull, pl);
  if (c < d) value_block<L, GS, 1>(rows, nr, p, acc, d, v_tile, c, kHalf, pl);
  pl.rest();
}

// e^x on 16 lanes: exp8 of kernels/cpu/simd.h (the same range reduction, polynomial and
// guards, so the same bits per lane).
TANDEM_AVX512_INLINE __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.0f);
  const __m512 hi = _mm512_set1_ps(88.3f);
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), _mm512_setzero_ps());
  y = _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ),
                         _mm512_set1_ps(__builtin_inff()));
  return _mm512_mask_mov_ps(y, _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), x);
}

// The chunk softmax (HostSoftmax) on 16 lanes (softmax_chunk of host_kernel_passes.h); nr_pad a
// multiple of 16, d a multiple of 8 (a masked half vector at the end).
struct Softmax16 {
  TANDEM_AVX512 static float chunk_max(float* sg, int32_t nr, int32_t nr_pad) {
    for (int32_t j = nr; j < nr_pad; ++j) sg[j] = -__builtin_inff();
    __m512 vmax = _mm512_loadu_ps(sg);
    for (int32_t j = 16; j < nr_pad; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(sg + j));
    return _mm512_reduce_max_ps(vmax);
  }
  TANDEM_AVX512 static void scale(float* p, int32_t n, float a) {
    const __m512 av = _mm512_set1_ps(a);
    int32_t c = 0;
    for (; c + 16 <= n; c += 16) _mm512_storeu_ps(p + c, _mm512_mul_ps(_mm512_loadu_ps(p + c), av));
    if (c < n)
      _mm512_mask_storeu_ps(p + c, kHalf, _mm512_mul_ps(_mm512_maskz_loadu_ps(kHalf, p + c), av));
  }
  TANDEM_AVX512 static void weights(float* sg, int32_t nr_pad, float m, float* lg) {
    static_assert(kSumLanes == 16);
    const __m512 mb = _mm512_set1_ps(m);
    __m512 sum = _mm512_loadu_ps(lg);
    for (int32_t j = 0; j < nr_pad; j += 16) {
      const __m512 pj = exp16(_mm512_sub_ps(_mm512_loadu_ps(sg + j), mb));
      _mm512_storeu_ps(sg + j, pj);
      sum = _mm512_add_ps(sum, pj);
    }
    _mm512_storeu_ps(lg, sum);
  }
};

TANDEM_AVX512 void softmax16(float* s, int32_t G, int32_t nr, int32_t nr_pad, float* m_run,
                             float* l_run, float* acc, int32_t d) {
  softmax_chunk<Softmax16>(s, G, nr, nr_pad, m_run, l_run, acc, d);
}

// The cols pass (host_kernel_passes.h) for GS heads: per channel c, the n <= 64 rows' K values
// kt[c * ld, + 64) as four 16-lane vectors (masked past n: no memory is read there), each times
// q_gc broadcast into 4 GS accumulators. K is read in address order, whole lines; every score is
// one lane's chain of d FMAs in channel order. pf rows are prefetched spread over the channels.
template <class L, int GS, bool kWhole>
TANDEM_AVX512 void cols_heads(const typename L::T* kt, int64_t ld, int32_t n, const float* q,
                              int32_t d, float* s, int32_t s_stride, const typename L::T* const* pf,
                              int32_t pf_n, int32_t pf_row_bytes, int32_t pf_every) {
  __mmask16 m[4];
#pragma GCC unroll 4
  for (int z = 0; z < 4; ++z) {
    const int32_t k = std::clamp(n - 16 * z, 0, 16);
    m[z] = static_cast<__mmask16>((1u << k) - 1u);
  }
  // bf16: one 64-byte load holds 32 rows; the low halves of its 32-bit words shifted up are the
  // even rows as f32 and the high halves masked the odd ones (2 instructions per 32 values, where
  // widening takes 2 per 16). Accumulator z then holds the even (z even) or odd rows of rows
  // [32 (z / 2), + 32), put back in order when a span's sums are stored.
  constexpr bool kPairs = std::is_same_v<L, LoadBF16>;
  __mmask32 m32[2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const int32_t k = std::clamp(n - 32 * h, 0, 32);
    m32[h] = k == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << k) - 1u);
  }
  const __m512i lo_idx = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi_idx =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  LineStream pf_lines(reinterpret_cast<const void* const*>(pf), pf_n, pf_row_bytes, pf_every);
  pf_lines.pace(d);
  // Channels in spans of kColSpan, each span's dot products a fresh chain added to the sums in s:
  // one chain of d FMAs per score would round more than the row passes' 16 short chains (seen
  // with scores of several hundred).
  for (int32_t c0 = 0; c0 < d; c0 += kColSpan) {
    __m512 acc[GS * 4];
#pragma GCC unroll 16
    for (int i = 0; i < GS * 4; ++i) acc[i] = _mm512_setzero_ps();
    for (int32_t c = c0; c < std::min(d, c0 + kColSpan); ++c) {
      pf_lines.tick_many();  // the prefetch list's lines, evenly over the channels
      const typename L::T* col = kt + c * ld;
      __m512 kv[4];
      if constexpr (kPairs) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m512i x = kWhole ? _mm512_loadu_si512(col + 32 * h)
                                   : _mm512_maskz_loadu_epi16(m32[h], col + 32 * h);
          kv[2 * h] = _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
          kv[2 * h + 1] = _mm512_castsi512_ps(
              _mm512_and_si512(x, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
        }
      } else {
#pragma GCC unroll 4
        for (int z = 0; z < 4; ++z) kv[z] = L::load(col + 16 * z, kWhole ? kFull : m[z]);
      }
#pragma GCC unroll 4
      for (int g = 0; g < GS; ++g) {
        const __m512 qb = _mm512_set1_ps(q[g * d + c]);
#pragma GCC unroll 4
        for (int z = 0; z < 4; ++z) acc[g * 4 + z] = _mm512_fmadd_ps(qb, kv[z], acc[g * 4 + z]);
      }
    }
    if constexpr (kPairs) {
#pragma GCC unroll 4
      for (int g = 0; g < GS; ++g)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m512 ev = acc[g * 4 + 2 * h], od = acc[g * 4 + 2 * h + 1];
          acc[g * 4 + 2 * h] = _mm512_permutex2var_ps(ev, lo_idx, od);
          acc[g * 4 + 2 * h + 1] = _mm512_permutex2var_ps(ev, hi_idx, od);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < GS; ++g)
#pragma GCC unroll 4
      for (int z = 0; z < 4; ++z) {
        float* sp = s + g * s_stride + 16 * z;
        const __m512 sum = c0 == 0 ? acc[g * 4 + z]
                                   : _mm512_add_ps(_mm512_maskz_loadu_ps(m[z], sp), acc[g * 4 + z]);
        _mm512_mask_storeu_ps(sp, m[z], sum);
      }
  }
  pf_lines.rest();
}

// All G heads, in passes of up to 4 (the later passes find K in L1); only the first prefetches.
template <class L>
TANDEM_AVX512 void cols_pass(const typename L::T* kt, int64_t ld, int32_t n, const float* q,
                             int32_t G, int32_t d, float* s, int32_t s_stride,
                             const typename L::T* const* pf, int32_t pf_n, int32_t pf_row_bytes,
                             int32_t pf_every) {
  for (int32_t h0 = 0; h0 < G; h0 += 4) {
    const int32_t gs = std::min(4, G - h0);
    const float* qh = q + h0 * d;
    float* sh = s + h0 * s_stride;
    const int32_t npf = h0 == 0 ? pf_n : 0;
    // A whole panel (every full block) without masks: the loop then has no branch but its own.
    const bool whole = n == kColRows;
    auto run = [&](auto heads) TANDEM_AVX512_INLINE_LAMBDA {
      constexpr int kGs = decltype(heads)::value;
      if (whole)
        cols_heads<L, kGs, true>(kt, ld, n, qh, d, sh, s_stride, pf, npf, pf_row_bytes, pf_every);
      else
        cols_heads<L, kGs, false>(kt, ld, n, qh, d, sh, s_stride, pf, npf, pf_row_bytes, pf_every);
    };
    switch (gs) {
      case 1:
        run(std::integral_constant<int, 1>{});
        break;
      case 2:
        run(std::integral_constant<int, 2>{});
        break;
      case 3:
        run(std::integral_constant<int, 3>{});
        break;
      default:
        run(std::integral_constant<int, 4>{});
        break;
    }
  }
}

template <class L>
HostPasses<typename L::T> passes(int gs) {
  switch (gs) {
    case 1:
      return {&score_pass16<L, 1>, &value_pass<L, 1>};
    case 2:
      return {&score_pass16<L, 2>, &value_pass<L, 2>};
    case 3:
      return {&score_pass<L, 3>, &value_pass<L, 3>};
    default:
      return {&score_pass16<L, 4>, &value_pass<L, 4>};
  }
}

}  // namespace

HostColScore<float> host_cols_avx512_f32() { return &cols_pass<LoadF32>; }
HostColScore<uint16_t> host_cols_avx512_bf16() { return &cols_pass<LoadBF16>; }
HostColScore<uint16_t> host_cols_avx512_f16() { return &cols_pass<LoadF16>; }
HostPasses<float> host_passes_avx512_f32(int gs) { return passes<LoadF32>(gs); }
HostPasses<uint16_t> host_passes_avx512_bf16(int gs) { return passes<LoadBF16>(gs); }
HostPasses<uint16_t> host_passes_avx512_f16(int gs) { return passes<LoadF16>(gs); }
void host_softmax_avx512(float* s, int32_t G, int32_t nr, int32_t nr_pad, float* m_run,
                         float* l_run, float* acc, int32_t d) {
  softmax16(s, G, nr, nr_pad, m_run, l_run, acc, d);
}

}  // namespace tandem::cpu
