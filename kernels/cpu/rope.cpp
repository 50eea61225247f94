// CpuBackend::rope: rotary position embedding in place on x [n, heads, head_dim] f32.
//   neox (HF rotate-half): pairs (i, i + rotary_dim/2); otherwise (2i, 2i+1); i < rotary_dim/2.
//   (a, b) <- (a cos - b sin, b cos + a sin), angle = pos * inv_freq[i], cos and sin times
//   mscale; dims >= rotary_dim are untouched.
// The angle and its cos/sin are computed in double, so positions up to 128K+ keep float32
// accuracy (a float32 angle at pos 1e5 is already off by ~4e-3 rad).

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace tandem {
namespace {

// Rotate one head in place; cs/sn hold half = rotary_dim/2 values.
void rotate_neox(float* x, const float* cs, const float* sn, int64_t half) {
  int64_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + half + i);
    const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(sn + i);
    _mm256_storeu_ps(x + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
    _mm256_storeu_ps(x + half + i, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
  }
  for (; i < half; ++i) {
    const float a = x[i], b = x[half + i];
    x[i] = a * cs[i] - b * sn[i];
    x[half + i] = b * cs[i] + a * sn[i];
  }
}

void rotate_interleaved(float* x, const float* cs, const float* sn, int64_t half) {
  for (int64_t i = 0; i < half; ++i) {
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cs[i] - b * sn[i];
    x[2 * i + 1] = b * cs[i] + a * sn[i];
  }
}

}  // namespace

void CpuBackend::rope(const TensorView& x, const TensorView& pos, const RopeTable& rope) {
  TANDEM_CHECK(x.dtype == DType::kF32 && x.ndim == 3 && cpu::last_dim_contiguous(x), "rope x ",
               x.describe());
  const int64_t n = x.dim(0), heads = x.dim(1), hd = x.dim(2);
  TANDEM_CHECK(pos.dtype == DType::kI32 && pos.numel() == n && pos.contiguous(), "rope pos ",
               pos.describe(), " for x ", x.describe());
  TANDEM_CHECK(rope.head_dim == hd && rope.rotary_dim % 2 == 0 && rope.rotary_dim >= 0 &&
                   rope.rotary_dim <= hd &&
                   static_cast<int64_t>(rope.inv_freq.size()) == rope.rotary_dim / 2,
               "rope table head_dim=", rope.head_dim, " rotary_dim=", rope.rotary_dim,
               " inv_freq=", rope.inv_freq.size(), " for x ", x.describe());
  const int64_t half = rope.rotary_dim / 2;
  if (n == 0 || heads == 0 || half == 0) return;
  const int32_t* pp = pos.as<const int32_t>();
  const size_t grain =
      static_cast<size_t>(std::max<int64_t>(1, 8192 / std::max<int64_t>(1, heads * hd)));
  tandem::parallel_for_range(
      tbb::blocked_range<int64_t>(0, n, grain), [&](const tbb::blocked_range<int64_t>& br) {
        thread_local std::vector<float> table;
        table.resize(static_cast<size_t>(2 * half));
        float* cs = table.data();
        float* sn = cs + half;
        for (int64_t t = br.begin(); t < br.end(); ++t) {
          const double p = static_cast<double>(pp[t]);
          for (int64_t i = 0; i < half; ++i) {
            const double angle = p * static_cast<double>(rope.inv_freq[static_cast<size_t>(i)]);
            cs[i] = static_cast<float>(std::cos(angle) * rope.mscale);
            sn[i] = static_cast<float>(std::sin(angle) * rope.mscale);
          }
          for (int64_t h = 0; h < heads; ++h) {
            float* xh = x.as<float>() + t * x.stride[0] + h * x.stride[1];
            if (rope.neox) {
              rotate_neox(xh, cs, sn, half);
            } else {
              rotate_interleaved(xh, cs, sn, half);
            }
          }
        }
      });
}

}  // namespace tandem
