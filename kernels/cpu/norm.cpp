// CpuBackend::rms_norm and layer_norm: row-wise over the last dim, float accumulation, parallel
// over rows. out may alias x: each row is reduced completely before it is written.

#include <algorithm>
#include <cmath>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace tandem {
namespace {

// Rows per task: at least ~16K elements of work each.
size_t row_grain(int64_t d) {
  return static_cast<size_t>(std::max<int64_t>(1, 16384 / std::max<int64_t>(1, d)));
}

void check_norm_args(const TensorView& x, const TensorView& w, const TensorView& out) {
  TANDEM_CHECK(x.dtype == DType::kF32 && out.dtype == DType::kF32 && w.dtype == DType::kF32,
               "norm: f32 only, x ", x.describe(), " w ", w.describe(), " out ", out.describe());
  TANDEM_CHECK(cpu::same_shape(x, out) && w.numel() == cpu::n_cols(x) && w.contiguous(),
               "norm shapes: x ", x.describe(), " w ", w.describe(), " out ", out.describe());
  TANDEM_CHECK(cpu::last_dim_contiguous(x) && cpu::last_dim_contiguous(out),
               "norm: last dim must be contiguous");
}

// Sum of x[i] over d floats.
float row_sum(const float* x, int64_t d) {
  __m256 s = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(x + i));
  float r = cpu::hsum(s);
  for (; i < d; ++i) r += x[i];
  return r;
}

// Sum of (x[i] - c)^2 over d floats.
float row_sq_dev(const float* x, float c, int64_t d) {
  const __m256 cv = _mm256_set1_ps(c);
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= d; i += 16) {
    const __m256 a = _mm256_sub_ps(_mm256_loadu_ps(x + i), cv);
    const __m256 b = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), cv);
    s0 = _mm256_fmadd_ps(a, a, s0);
    s1 = _mm256_fmadd_ps(b, b, s1);
  }
  for (; i + 8 <= d; i += 8) {
    const __m256 a = _mm256_sub_ps(_mm256_loadu_ps(x + i), cv);
    s0 = _mm256_fmadd_ps(a, a, s0);
  }
  float r = cpu::hsum(_mm256_add_ps(s0, s1));
  for (; i < d; ++i) r += (x[i] - c) * (x[i] - c);
  return r;
}

// out[i] = (x[i] - c) * s * w[i] (+ b[i] when b is not null).
void row_affine(const float* x, float c, float s, const float* w, const float* b, float* out,
                int64_t d) {
  const __m256 cv = _mm256_set1_ps(c), sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), cv), sv),
                             _mm256_loadu_ps(w + i));
    if (b != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(b + i));
    _mm256_storeu_ps(out + i, v);
  }
  for (; i < d; ++i) out[i] = (x[i] - c) * s * w[i] + (b != nullptr ? b[i] : 0.0f);
}

}  // namespace

void CpuBackend::rms_norm(const TensorView& x, const TensorView& w, float eps,
                          const TensorView& out) {
  check_norm_args(x, w, out);
  const int64_t rows = cpu::n_rows(x), d = cpu::n_cols(x);
  if (rows == 0 || d == 0) return;
  const float* wp = w.as<const float>();
  tandem::parallel_for_range(tbb::blocked_range<int64_t>(0, rows, row_grain(d)),
                             [&](const tbb::blocked_range<int64_t>& br) {
                               for (int64_t r = br.begin(); r < br.end(); ++r) {
                                 const float* xr = cpu::row_f32(x, r);
                                 const float ms = row_sq_dev(xr, 0.0f, d) / static_cast<float>(d);
                                 const float s = 1.0f / std::sqrt(ms + eps);
                                 row_affine(xr, 0.0f, s, wp, nullptr, cpu::row_f32(out, r), d);
                               }
                             });
}

void CpuBackend::layer_norm(const TensorView& x, const TensorView& w, const TensorView& b,
                            float eps, const TensorView& out) {
  check_norm_args(x, w, out);
  TANDEM_CHECK(b.dtype == DType::kF32 && b.numel() == cpu::n_cols(x) && b.contiguous(),
               "layer_norm bias ", b.describe());
  const int64_t rows = cpu::n_rows(x), d = cpu::n_cols(x);
  if (rows == 0 || d == 0) return;
  const float* wp = w.as<const float>();
  const float* bp = b.as<const float>();
  tandem::parallel_for_range(tbb::blocked_range<int64_t>(0, rows, row_grain(d)),
                             [&](const tbb::blocked_range<int64_t>& br) {
                               for (int64_t r = br.begin(); r < br.end(); ++r) {
                                 const float* xr = cpu::row_f32(x, r);
                                 // Two passes (mean, then squared deviations): no cancellation.
                                 const float mean = row_sum(xr, d) / static_cast<float>(d);
                                 const float var = row_sq_dev(xr, mean, d) / static_cast<float>(d);
                                 const float s = 1.0f / std::sqrt(var + eps);
                                 row_affine(xr, mean, s, wp, bp, cpu::row_f32(out, r), d);
                               }
                             });
}

}  // namespace tandem
