// The AVX-512 prefill micro-kernels (kernels/cpu/gemm_prefill.h): 12 weight rows x 32 x rows,
// 24 zmm accumulators,
//  - avx512: f32 FMA, one broadcast weight per row and step;
//  - avx512bf16: VDPBF16PS, one broadcast pair of bf16 weights per row and step (read in place
//    from the row-major weights), x packed as bf16 pairs.
// This file is compiled with the baseline flags; the AVX-512 code is in function-level target
// attributes inside the anonymous namespace, reached only through the prefill_path_* entry
// points (the rule of kernels/cpu/isa.h). Templates and lambdas here must carry the attribute
// themselves (a lambda does not inherit its enclosing function's target).
#include <immintrin.h>

#include <array>
#include <cstring>
#include <utility>

#include "kernels/cpu/gemm_prefill.h"

#define TANDEM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define TANDEM_AVX512BF16 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace tandem::cpu {
namespace {

constexpr int kMr = 12;
constexpr int kNr = 32;

template <int R, int NV>
TANDEM_AVX512 void micro_f32(const float* w, int64_t ldw, const float* xp, int64_t kc, float* t,
                             int64_t ldt, bool accumulate) {
  __m512 c[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      c[r][v] = accumulate ? _mm512_loadu_ps(t + r * ldt + 16 * v) : _mm512_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const float* xq = xp + p * kNr;
    __m512 xv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) xv[v] = _mm512_loadu_ps(xq + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m512 b = _mm512_set1_ps(w[r * ldw + p]);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_fmadd_ps(b, xv[v], c[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(t + r * ldt + 16 * v, c[r][v]);
}

template <int R, int NV>
TANDEM_AVX512BF16 void micro_bf16(const uint16_t* w, int64_t ldw, const uint16_t* xp, int64_t kq,
                                  float* t, int64_t ldt, bool accumulate) {
  __m512 c[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      c[r][v] = accumulate ? _mm512_loadu_ps(t + r * ldt + 16 * v) : _mm512_setzero_ps();
  for (int64_t q = 0; q < kq; ++q) {
    const uint16_t* xq = xp + q * kNr * 2;
    __m512bh xv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) xv[v] = (__m512bh)_mm512_loadu_si512(xq + 32 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      uint32_t pair;
      std::memcpy(&pair, w + r * ldw + 2 * q, sizeof pair);
      const __m512bh b = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) c[r][v] = _mm512_dpbf16_ps(c[r][v], xv[v], b);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm512_storeu_ps(t + r * ldt + 16 * v, c[r][v]);
}

using MicroF32 = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool);
using MicroBf16 = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, float*, int64_t,
                           bool);

template <int NV, int... R>
constexpr std::array<MicroF32, sizeof...(R)> f32_table(std::integer_sequence<int, R...>) {
  return {&micro_f32<R + 1, NV>...};
}
template <int NV, int... R>
constexpr std::array<MicroBf16, sizeof...(R)> bf16_table(std::integer_sequence<int, R...>) {
  return {&micro_bf16<R + 1, NV>...};
}

void kernel_f32(int rows, int nv, const float* w, int64_t ldw, const float* xp, int64_t kc,
                float* t, int64_t ldt, bool accumulate) {
  static constexpr auto one = f32_table<1>(std::make_integer_sequence<int, kMr>());
  static constexpr auto two = f32_table<2>(std::make_integer_sequence<int, kMr>());
  (nv == 1 ? one : two)[static_cast<size_t>(rows - 1)](w, ldw, xp, kc, t, ldt, accumulate);
}

void kernel_bf16(int rows, int nv, const uint16_t* w, int64_t ldw, const uint16_t* xp, int64_t kq,
                 float* t, int64_t ldt, bool accumulate) {
  static constexpr auto one = bf16_table<1>(std::make_integer_sequence<int, kMr>());
  static constexpr auto two = bf16_table<2>(std::make_integer_sequence<int, kMr>());
  (nv == 1 ? one : two)[static_cast<size_t>(rows - 1)](w, ldw, xp, kq, t, ldt, accumulate);
}

}  // namespace

PrefillPath prefill_path_avx512() {
  PrefillPath p;
  p.mr = kMr;
  p.lanes = 16;
  p.nr = kNr;
  p.kc = 256;
  p.mc = 96;
  p.nc = 256;
  p.f32 = &kernel_f32;
  return p;
}

PrefillPath prefill_path_avx512bf16() {
  PrefillPath p = prefill_path_avx512();
  p.kc = 512;
  p.bf16 = &kernel_bf16;
  return p;
}

}  // namespace tandem::cpu
