// CpuBackend::matmul: y[n, m] = x[n, k] · w[m, k]^T (+ bias[m]), w f32/f16/bf16, x/y f32.
//
// Decode is memory-bound, so every weight byte is read from memory once per call whatever n:
//  - n <= 3 (decode): each weight row is read once, start to end, and dotted with the n x rows.
//    One sequential stream per thread is what the hardware prefetcher follows at full speed
//    (interleaving 4 rows costs ~20% of the bandwidth). bf16 rows are widened without a shuffle:
//    16 loaded values split into even/odd halves by a shift and a mask, x reordered to match.
//  - 4..16 rows (batched decode, compute-bound on AVX2): groups of 4 weight rows are streamed
//    once and dotted with 3 x rows at a time; the group stays in L1/L2 for the next x tiles.
//  - more rows (prefill): cpu::matmul_prefill (kernels/cpu/gemm_prefill.h), register-tiled
//    micro-kernels on the run-time path of kernels/cpu/isa.h (AVX2, AVX-512, AVX512_BF16).
// The decode paths above are AVX2, except for bf16 weights on the avx512bf16 path, where x is
// rounded to bf16 and multiplied by VDPBF16PS (kernels/cpu/gemm_decode.h). All are parallel over
// blocks of output rows with oneTBB, in whatever arena is in force. The summation order depends on
// n only, never on the thread count.

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/gemm_decode.h"
#include "kernels/cpu/gemm_prefill.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace tandem {
namespace {

using cpu::BF16;
using cpu::F16;
using cpu::F32;

constexpr int64_t kStreamN = 3;           // at most this many x rows: one weight row at a time
constexpr int64_t kSmallN = 16;           // at most this many x rows: stream weights directly
constexpr int64_t kRowBlock = 16;         // output rows per parallel work item (small n)
constexpr int64_t kGrainBytes = 1 << 18;  // weight bytes per task, at least

constexpr int64_t kPrefetchBytes = 8192;  // software prefetch distance along a weight row

// Software prefetch for rows whose x rows take more than this much L1: streaming the weights
// would otherwise evict x (measured: bf16 k=8192 rows go from ~55% to ~80% of the bandwidth;
// for small x the hardware prefetcher alone is better).
constexpr int64_t kPrefetchAboveXBytes = 16384;

// Non-temporal prefetch of the weight bytes kPrefetchBytes ahead: into L1 without displacing x.
inline void prefetch_ahead(const void* p) {
  _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_NTA);
}

// s[i] = sum_p w[p] * x[i * ldx + p] for N x rows: one weight row read once, in order. U-way
// unrolled so there are at least 4 independent accumulators (FMA latency).
template <typename E, int N, bool kPrefetch>
inline void dot_row(const typename E::T* w, const float* x, int64_t ldx, int64_t k, float* s) {
  constexpr int U = N == 1 ? 4 : 2;
  constexpr int kStepBytes = 8 * U * static_cast<int>(sizeof(typename E::T));
  __m256 acc[U][N];
#pragma GCC unroll 16
  for (int u = 0; u < U; ++u)
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) acc[u][i] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 8 * U <= k; p += 8 * U) {
    if constexpr (kPrefetch) {
#pragma GCC unroll 4
      for (int b = 0; b < kStepBytes; b += 64)
        prefetch_ahead(reinterpret_cast<const char*>(w + p) + b);
    }
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) {
      const __m256 wv = E::load8(w + p + 8 * u);
#pragma GCC unroll 16
      for (int i = 0; i < N; ++i)
        acc[u][i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * ldx + p + 8 * u), acc[u][i]);
    }
  }
  for (; p + 8 <= k; p += 8) {
    const __m256 wv = E::load8(w + p);
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i)
      acc[0][i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + i * ldx + p), acc[0][i]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) {
    __m256 a = acc[0][i];
#pragma GCC unroll 16
    for (int u = 1; u < U; ++u) a = _mm256_add_ps(a, acc[u][i]);
    float r = cpu::hsum(a);
    for (int64_t q = p; q < k; ++q) r += E::get(w + q) * x[i * ldx + q];
    s[i] = r;
  }
}

// As dot_row for bf16 weights, with x permuted by permute_even_odd: 16 weights are loaded at
// once; shifting each 32-bit lane left by 16 gives the even ones as f32, masking the low half
// gives the odd ones. Saves the widening shuffle of load8_bf16.
template <int N, bool kPrefetch>
inline void dot_row_bf16(const uint16_t* w, const float* xp, int64_t ldx, int64_t k, float* s) {
  constexpr int U = N == 1 ? 2 : 1;  // 16-value blocks per step; 2 * U * N accumulators
  const __m256i hi_mask = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
  __m256 acc[2 * U][N];
#pragma GCC unroll 16
  for (int u = 0; u < 2 * U; ++u)
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) acc[u][i] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 16 * U <= k; p += 16 * U) {
    // One prefetch per step: 64 bytes (U = 2) or 32 (U = 1, every line prefetched twice).
    if constexpr (kPrefetch) prefetch_ahead(w + p);
#pragma GCC unroll 16
    for (int u = 0; u < U; ++u) {
      const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + p + 16 * u));
      const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(raw, 16));
      const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(raw, hi_mask));
#pragma GCC unroll 16
      for (int i = 0; i < N; ++i) {
        const float* xi = xp + i * ldx + p + 16 * u;
        acc[2 * u][i] = _mm256_fmadd_ps(even, _mm256_loadu_ps(xi), acc[2 * u][i]);
        acc[2 * u + 1][i] = _mm256_fmadd_ps(odd, _mm256_loadu_ps(xi + 8), acc[2 * u + 1][i]);
      }
    }
  }
  // Past the last full step x is not permuted (see permute_even_odd): plain widening.
  for (; p + 8 <= k; p += 8) {
    const __m256 wv = cpu::load8_bf16(w + p);
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i)
      acc[0][i] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp + i * ldx + p), acc[0][i]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) {
    __m256 a = acc[0][i];
#pragma GCC unroll 16
    for (int u = 1; u < 2 * U; ++u) a = _mm256_add_ps(a, acc[u][i]);
    float r = cpu::hsum(a);
    for (int64_t q = p; q < k; ++q) r += bf16_to_f32(w[q]) * xp[i * ldx + q];
    s[i] = r;
  }
}

// Length of the prefix of a row that dot_row_bf16<N> reads in 16-value even/odd blocks.
inline int64_t even_odd_prefix(int64_t k, int64_t n) {
  const int64_t step = n == 1 ? 32 : 16;
  return k / step * step;
}

// xp[i, :] = x[i, :] with each 16-value block of the prefix reordered to [x0 x2 .. x14 | x1 x3
// .. x15]; the rest copied as is. xp is [n, k] contiguous.
void permute_even_odd(const float* x, int64_t ldx, int64_t n, int64_t k, float* xp) {
  const int64_t prefix = even_odd_prefix(k, n);
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x + i * ldx;
    float* pr = xp + i * k;
    for (int64_t b = 0; b < prefix; b += 16)
      for (int64_t l = 0; l < 8; ++l) {
        pr[b + l] = xr[b + 2 * l];
        pr[b + 8 + l] = xr[b + 2 * l + 1];
      }
    for (int64_t q = prefix; q < k; ++q) pr[q] = xr[q];
  }
}

// Weight rows [0, rows), each read once, against n <= 3 x rows (xs: x itself, or for bf16 the
// permuted copy with row stride ldxs). w, bias and y point at the block's first row.
template <typename E, int N, bool kPrefetch>
void stream_rows(const typename E::T* w, int64_t rows, int64_t k, const float* xs, int64_t ldxs,
                 const float* bias, float* y, int64_t ldy) {
  float s[N];
  for (int64_t r = 0; r < rows; ++r) {
    if constexpr (std::is_same_v<E, BF16>) {
      dot_row_bf16<N, kPrefetch>(w + r * k, xs, ldxs, k, s);
    } else {
      dot_row<E, N, kPrefetch>(w + r * k, xs, ldxs, k, s);
    }
    for (int i = 0; i < N; ++i) y[i * ldy + r] = bias != nullptr ? s[i] + bias[r] : s[i];
  }
}

template <typename E, int N>
void stream_rows(const typename E::T* w, int64_t rows, int64_t k, const float* xs, int64_t ldxs,
                 const float* bias, float* y, int64_t ldy) {
  if (N * k * 4 > kPrefetchAboveXBytes) {
    stream_rows<E, N, true>(w, rows, k, xs, ldxs, bias, y, ldy);
  } else {
    stream_rows<E, N, false>(w, rows, k, xs, ldxs, bias, y, ldy);
  }
}

// Dot products of R weight rows with N x rows over k:
//   y[i * ldy + r] = sum_p w[r * ldw + p] * x[i * ldx + p] (+ bias[r]), r < R, i < N.
// R * N accumulators + N x vectors + 1 weight vector fit the 16 ymm registers for (4, 3).
template <typename E, int R, int N>
inline void dot_tile(const typename E::T* w, int64_t ldw, const float* x, int64_t ldx, int64_t k,
                     const float* bias, float* y, int64_t ldy) {
  __m256 acc[R][N];
  for (int r = 0; r < R; ++r)
    for (int i = 0; i < N; ++i) acc[r][i] = _mm256_setzero_ps();
  int64_t p = 0;
  for (; p + 8 <= k; p += 8) {
    __m256 xv[N];
    for (int i = 0; i < N; ++i) xv[i] = _mm256_loadu_ps(x + i * ldx + p);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = E::load8(w + r * ldw + p);
      for (int i = 0; i < N; ++i) acc[r][i] = _mm256_fmadd_ps(wv, xv[i], acc[r][i]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int i = 0; i < N; ++i) {
      float s = cpu::hsum(acc[r][i]);
      for (int64_t q = p; q < k; ++q) s += E::get(w + r * ldw + q) * x[i * ldx + q];
      y[i * ldy + r] = bias != nullptr ? s + bias[r] : s;
    }
  }
}

// Weight rows [0, rows) of w against all n x rows; x tiles of 3 (then 2 or 1) rows, weight
// groups of R = 4 rows (then 1 for the last rows). w, bias and y point at the block's first row.
template <typename E>
void rows_times_x(const typename E::T* w, int64_t rows, int64_t k, const float* x, int64_t ldx,
                  int64_t n, const float* bias, float* y, int64_t ldy) {
  auto tile = [&]<int R>(int64_t r) {
    const typename E::T* wr = w + r * k;
    const float* br = bias != nullptr ? bias + r : nullptr;
    int64_t i = 0;
    for (; i + 3 <= n; i += 3)
      dot_tile<E, R, 3>(wr, k, x + i * ldx, ldx, k, br, y + i * ldy + r, ldy);
    if (n - i == 2) dot_tile<E, R, 2>(wr, k, x + i * ldx, ldx, k, br, y + i * ldy + r, ldy);
    if (n - i == 1) dot_tile<E, R, 1>(wr, k, x + i * ldx, ldx, k, br, y + i * ldy + r, ldy);
  };
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) tile.template operator()<4>(r);
  for (; r < rows; ++r) tile.template operator()<1>(r);
}

// Small n: fn(r0, r1) over weight rows [r0, r1) in parallel, in blocks of kRowBlock rows (of
// row_bytes each), at least kGrainBytes of weights per task.
template <typename Fn>
void for_row_blocks(int64_t m, int64_t row_bytes, const Fn& fn) {
  const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  const int64_t grain =
      std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(1, kRowBlock * row_bytes));
  tandem::parallel_for_range(tbb::blocked_range<int64_t>(0, blocks, static_cast<size_t>(grain)),
                             [&](const tbb::blocked_range<int64_t>& br) {
                               fn(br.begin() * kRowBlock, std::min(m, br.end() * kRowBlock));
                             });
}

// Small n: blocks of weight rows, each row streamed once.
template <typename E>
void matmul_small(const typename E::T* w, int64_t m, int64_t k, const float* x, int64_t ldx,
                  const float* xs, int64_t ldxs, int64_t n, const float* bias, float* y,
                  int64_t ldy) {
  for_row_blocks(m, k * static_cast<int64_t>(sizeof(typename E::T)), [&](int64_t r0, int64_t r1) {
    const float* b0 = bias != nullptr ? bias + r0 : nullptr;
    switch (n) {
      case 1:
        return stream_rows<E, 1>(w + r0 * k, r1 - r0, k, xs, ldxs, b0, y + r0, ldy);
      case 2:
        return stream_rows<E, 2>(w + r0 * k, r1 - r0, k, xs, ldxs, b0, y + r0, ldy);
      case 3:
        return stream_rows<E, 3>(w + r0 * k, r1 - r0, k, xs, ldxs, b0, y + r0, ldy);
      default:
        return rows_times_x<E>(w + r0 * k, r1 - r0, k, x, ldx, n, b0, y + r0, ldy);
    }
  });
}

// Small n, bf16 weights on the avx512bf16 path: x rounded to bf16 once, then as matmul_small.
void matmul_small_bf16x(const uint16_t* w, int64_t m, int64_t k, const float* x, int64_t ldx,
                        int64_t n, const float* bias, float* y, int64_t ldy) {
  thread_local std::vector<uint16_t> xb;  // the calling thread's; workers read it through `xp`
  xb.resize(static_cast<size_t>(n * cpu::decode_bf16x_stride(k)));
  cpu::pack_decode_bf16x(x, ldx, n, k, xb.data());
  const uint16_t* xp = xb.data();
  for_row_blocks(m, k * 2, [&](int64_t r0, int64_t r1) {
    cpu::decode_bf16x_rows(w + r0 * k, r1 - r0, k, xp, n, bias != nullptr ? bias + r0 : nullptr,
                           y + r0, ldy);
  });
}

template <typename E>
void matmul_typed(const TensorView& x, const TensorView& w, const float* bias,
                  const TensorView& y) {
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  const auto* wp = w.as<const typename E::T>();
  const float* xp = x.as<const float>();
  if (std::is_same_v<E, BF16> && n <= kSmallN && cpu::active_isa() == cpu::Isa::kAvx512Bf16) {
    matmul_small_bf16x(reinterpret_cast<const uint16_t*>(wp), m, k, xp, x.stride[0], n, bias,
                       y.as<float>(), y.stride[0]);
  } else if (n <= kSmallN) {
    std::vector<float> permuted;
    const float* xs = xp;
    int64_t ldxs = x.stride[0];
    if (std::is_same_v<E, BF16> && n <= kStreamN) {
      permuted.resize(static_cast<size_t>(n * k));
      permute_even_odd(xp, x.stride[0], n, k, permuted.data());
      xs = permuted.data();
      ldxs = k;
    }
    matmul_small<E>(wp, m, k, xp, x.stride[0], xs, ldxs, n, bias, y.as<float>(), y.stride[0]);
  } else {
    cpu::matmul_prefill(cpu::active_isa(), w.dtype, wp, m, k, xp, x.stride[0], n, bias,
                        y.as<float>(), y.stride[0]);
  }
}

}  // namespace

void CpuBackend::matmul(const TensorView& x, const TensorView& w, const TensorView& bias,
                        const TensorView& y) {
  TANDEM_CHECK(x.ndim == 2 && w.ndim == 2 && y.ndim == 2, "matmul ranks: x ", x.describe(), " w ",
               w.describe(), " y ", y.describe());
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  TANDEM_CHECK(w.dim(1) == k && y.dim(0) == n && y.dim(1) == m, "matmul shapes: x ", x.describe(),
               " w ", w.describe(), " y ", y.describe());
  TANDEM_CHECK(x.dtype == DType::kF32 && y.dtype == DType::kF32, "matmul x/y must be f32");
  TANDEM_CHECK(cpu::last_dim_contiguous(x) && cpu::last_dim_contiguous(y) && w.contiguous(),
               "matmul layout: x, y rows contiguous, w contiguous");
  const float* bp = nullptr;
  if (!bias.empty()) {
    TANDEM_CHECK(bias.dtype == DType::kF32 && bias.numel() == m && bias.contiguous(),
                 "matmul bias ", bias.describe(), " for m=", m);
    bp = bias.as<const float>();
  }
  if (n == 0 || m == 0) return;
  switch (w.dtype) {
    case DType::kF32:
      return matmul_typed<F32>(x, w, bp, y);
    case DType::kF16:
      return matmul_typed<F16>(x, w, bp, y);
    case DType::kBF16:
      return matmul_typed<BF16>(x, w, bp, y);
    default:
      break;
  }
  TANDEM_CHECK(false, "matmul weight dtype ", dtype_name(w.dtype));
}

}  // namespace tandem
