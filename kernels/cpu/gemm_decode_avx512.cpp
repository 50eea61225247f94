// The VDPBF16PS decode products of kernels/cpu/gemm_decode.h.
//
// n <= 3: each weight row is read once, start to end (one sequential stream per thread, what the
// hardware prefetcher follows best), against all n x rows. n = 4..16: tiles of 4 weight rows x 3
// x rows, the 4 rows re-read from L1/L2 for each x tile. Both compute each (row, x row) output with
// the same two accumulator chains, so the tiling changes nothing in the result.
//
// Compiled with the baseline flags: the AVX-512 code is in function-level target attributes
// inside the anonymous namespace, reached only through the entry points below (the rule of
// kernels/cpu/isa.h).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() placeholders to their builtins, which it
// then reports as (maybe) uninitialised once inlined into target-attribute functions.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/gemm_decode.h"
#include "kernels/cpu/simd.h"

#define TANDEM_AVX512BF16 \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace tandem::cpu {
namespace {

constexpr int64_t kStep = 32;  // bf16 values per VDPBF16PS (one 64-byte line of a weight row)

// Software prefetch distance along a weight row, and the x size above which it pays (the weight
// stream would otherwise evict x from L1; as for the AVX2 stream of gemm.cpp).
constexpr int64_t kPrefetchBytes = 8192;
constexpr int64_t kPrefetchAboveXBytes = 16384;

// s[r * N + i] = w row r . x row i for R weight rows (stride k) and N x rows (stride xs): chain
// c = step index & 1 accumulates steps c, c + 2, ...; the last step is masked to k.
template <int R, int N, bool kPrefetch>
TANDEM_AVX512BF16 void dots(const uint16_t* w, int64_t k, const uint16_t* xb, int64_t xs,
                            float* s) {
  __m512 acc[2][R][N];
#pragma GCC unroll 2
  for (int c = 0; c < 2; ++c)
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
      for (int i = 0; i < N; ++i) acc[c][r][i] = _mm512_setzero_ps();
  auto step = [&](int c, int64_t p, __mmask32 mask) TANDEM_AVX512BF16
      __attribute__((always_inline)) {
    __m512bh wv[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      if constexpr (kPrefetch)
        _mm_prefetch(reinterpret_cast<const char*>(w + r * k + p) + kPrefetchBytes, _MM_HINT_NTA);
      wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(mask, w + r * k + p);
    }
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i) {
      const __m512bh xv = (__m512bh)_mm512_loadu_si512(xb + i * xs + p);
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[c][r][i] = _mm512_dpbf16_ps(acc[c][r][i], wv[r], xv);
    }
  };
  const __mmask32 all = ~__mmask32{0};
  int64_t p = 0;
  for (; p + 2 * kStep <= k; p += 2 * kStep) {
    step(0, p, all);
    step(1, p + kStep, all);
  }
  int c = 0;
  if (p + kStep <= k) {
    step(0, p, all);
    p += kStep;
    c = 1;
  }
  if (p < k) {  // chain indices stay constants, so the accumulators stay in registers
    const auto tail = static_cast<__mmask32>((uint64_t{1} << (k - p)) - 1);
    if (c == 0) {
      step(0, p, tail);
    } else {
      step(1, p, tail);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int i = 0; i < N; ++i)
      s[r * N + i] = _mm512_reduce_add_ps(_mm512_add_ps(acc[0][r][i], acc[1][r][i]));
}

template <int R, int N>
TANDEM_AVX512BF16 void tile(const uint16_t* w, int64_t k, const uint16_t* xb, int64_t xs,
                            const float* bias, float* y, int64_t ldy) {
  float s[R * N];
  if (N * xs * 2 > kPrefetchAboveXBytes) {
    dots<R, N, true>(w, k, xb, xs, s);
  } else {
    dots<R, N, false>(w, k, xb, xs, s);
  }
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < N; ++i)
      y[i * ldy + r] = bias != nullptr ? s[r * N + i] + bias[r] : s[r * N + i];
}

// Weight rows [0, rows) against x rows [0, N), N <= 3: each weight row streamed once.
template <int N>
TANDEM_AVX512BF16 void stream(const uint16_t* w, int64_t rows, int64_t k, const uint16_t* xb,
                              int64_t xs, const float* bias, float* y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r)
    tile<1, N>(w + r * k, k, xb, xs, bias != nullptr ? bias + r : nullptr, y + r, ldy);
}

// Weight rows [0, rows) against n x rows: groups of 4 weight rows x tiles of 3 x rows.
TANDEM_AVX512BF16 void tiled(const uint16_t* w, int64_t rows, int64_t k, const uint16_t* xb,
                             int64_t xs, int64_t n, const float* bias, float* y, int64_t ldy) {
  auto group = [&]<int R>(int64_t r) TANDEM_AVX512BF16 {
    const uint16_t* wr = w + r * k;
    const float* br = bias != nullptr ? bias + r : nullptr;
    int64_t i = 0;
    for (; i + 3 <= n; i += 3) tile<R, 3>(wr, k, xb + i * xs, xs, br, y + i * ldy + r, ldy);
    if (n - i == 2) tile<R, 2>(wr, k, xb + i * xs, xs, br, y + i * ldy + r, ldy);
    if (n - i == 1) tile<R, 1>(wr, k, xb + i * xs, xs, br, y + i * ldy + r, ldy);
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) group.template operator()<4>(r);
  for (; r < rows; ++r) group.template operator()<1>(r);
}

}  // namespace

void pack_decode_bf16x(const float* x, int64_t ldx, int64_t n, int64_t k, uint16_t* xb) {
  const int64_t xs = decode_bf16x_stride(k);
  for (int64_t i = 0; i < n; ++i) {
    uint16_t* out = xb + i * xs;
    row_from_f32(x + i * ldx, out, DType::kBF16, k);
    std::memset(out + k, 0, static_cast<size_t>(xs - k) * sizeof(uint16_t));
  }
}

void decode_bf16x_rows(const uint16_t* w, int64_t rows, int64_t k, const uint16_t* xb, int64_t n,
                       const float* bias, float* y, int64_t ldy) {
  const int64_t xs = decode_bf16x_stride(k);
  switch (n) {
    case 1:
      return stream<1>(w, rows, k, xb, xs, bias, y, ldy);
    case 2:
      return stream<2>(w, rows, k, xb, xs, bias, y, ldy);
    case 3:
      return stream<3>(w, rows, k, xb, xs, bias, y, ldy);
    default:
      return tiled(w, rows, k, xb, xs, n, bias, y, ldy);
  }
}

}  // namespace tandem::cpu
