// CpuBackend::matmul: y[n, m] = x[n, k] · w[m, k]^T (+ bias[m]), w f32/f16/bf16, x/y f32.
//
// Decode is memory-bound, so every weight byte is read from memory once per call whatever n:
//  - small n (decode, <= kSmallN rows): each group of 4 weight rows is streamed once and dotted
//    with all n x rows, 3 x rows at a time; the group stays in L1/L2 for the following x tiles.
//  - large n (prefill): a block of weight rows is converted once to f32 into a thread-local
//    buffer (L2-sized) and reused against every tile of 3 x rows.
// Both are parallel over blocks of output rows with oneTBB, in whatever arena is in force.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/simd.h"

namespace tandem {
namespace {

using cpu::BF16;
using cpu::F16;
using cpu::F32;

constexpr int64_t kSmallN = 16;           // at most this many x rows: stream weights directly
constexpr int64_t kRowBlock = 16;         // output rows per parallel work item (small n)
constexpr int64_t kGrainBytes = 1 << 18;  // weight bytes per task, at least
constexpr int64_t kPackBytes = 1 << 18;   // f32 bytes of a converted weight block (large n)

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

// Small n: parallel over blocks of kRowBlock weight rows, each streamed once.
template <typename E>
void matmul_small(const typename E::T* w, int64_t m, int64_t k, const float* x, int64_t ldx,
                  int64_t n, const float* bias, float* y, int64_t ldy) {
  const int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  const int64_t block_bytes = kRowBlock * k * static_cast<int64_t>(sizeof(typename E::T));
  const int64_t grain = std::max<int64_t>(1, kGrainBytes / std::max<int64_t>(1, block_bytes));
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, blocks, static_cast<size_t>(grain)),
                    [&](const tbb::blocked_range<int64_t>& br) {
                      const int64_t r0 = br.begin() * kRowBlock;
                      const int64_t r1 = std::min(m, br.end() * kRowBlock);
                      rows_times_x<E>(w + r0 * k, r1 - r0, k, x, ldx, n,
                                      bias != nullptr ? bias + r0 : nullptr, y + r0, ldy);
                    });
}

// Large n: blocks of weight rows converted once to f32 (f32 weights are used in place), then
// multiplied with every x tile.
template <typename E>
void matmul_large(const typename E::T* w, int64_t m, int64_t k, const float* x, int64_t ldx,
                  int64_t n, const float* bias, float* y, int64_t ldy) {
  // A block of weight rows as f32 fits about kPackBytes (L2), a multiple of 4 rows.
  const int64_t rows_per_block =
      std::clamp<int64_t>(kPackBytes / std::max<int64_t>(1, k * 4) / 4 * 4, 4, 256);
  const int64_t blocks = (m + rows_per_block - 1) / rows_per_block;
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, blocks, 1),
                    [&](const tbb::blocked_range<int64_t>& br) {
                      thread_local std::vector<float> pack;
                      for (int64_t b = br.begin(); b < br.end(); ++b) {
                        const int64_t r0 = b * rows_per_block;
                        const int64_t rows = std::min(m, r0 + rows_per_block) - r0;
                        const float* bb = bias != nullptr ? bias + r0 : nullptr;
                        if constexpr (std::is_same_v<E, F32>) {
                          rows_times_x<F32>(w + r0 * k, rows, k, x, ldx, n, bb, y + r0, ldy);
                        } else {
                          pack.resize(static_cast<size_t>(rows * k));
                          cpu::convert_to_f32<E>(w + r0 * k, pack.data(), rows * k);
                          rows_times_x<F32>(pack.data(), rows, k, x, ldx, n, bb, y + r0, ldy);
                        }
                      }
                    });
}

template <typename E>
void matmul_typed(const TensorView& x, const TensorView& w, const float* bias,
                  const TensorView& y) {
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  const auto* wp = w.as<const typename E::T>();
  if (n <= kSmallN) {
    matmul_small<E>(wp, m, k, x.as<const float>(), x.stride[0], n, bias, y.as<float>(),
                    y.stride[0]);
  } else {
    matmul_large<E>(wp, m, k, x.as<const float>(), x.stride[0], n, bias, y.as<float>(),
                    y.stride[0]);
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
