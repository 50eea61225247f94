// Key quantisation of value offload: codes, their keys, approximate scores (kvstore/key_quant.h).
#include "kvstore/key_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/common.h"
#include "kernels/cpu/simd.h"

namespace tandem {

float quant_step(float kmin, float kmax, int32_t bits) {
  const float levels = static_cast<float>((1u << bits) - 1u);
  // A constant channel (or an empty digest) has no range: step 0, every code 0.
  const float range = kmax - kmin;
  return range > 0.0f && std::isfinite(range) ? range / levels : 0.0f;
}

void quantize_row(const float* k, const float* kmin, const float* kmax, int32_t d, int32_t bits,
                  uint8_t* code) {
  TANDEM_CHECK((bits == 8 || bits == 4) && d % 2 == 0, "key codes of ", bits, " bits, d ", d);
  const float top = static_cast<float>((1u << bits) - 1u);
  if (bits == 4) std::fill_n(code, d / 2, uint8_t{0});
  for (int32_t c = 0; c < d; ++c) {
    const float step = quant_step(kmin[c], kmax[c], bits);
    // Rounded to the nearest level; clamped, as k may sit a rounding error outside the range.
    const float x = step > 0.0f ? std::nearbyint((k[c] - kmin[c]) / step) : 0.0f;
    const uint32_t q = static_cast<uint32_t>(std::clamp(x, 0.0f, top));
    if (bits == 8)
      code[c] = static_cast<uint8_t>(q);
    else
      code[c >> 1] = static_cast<uint8_t>(code[c >> 1] | (q << ((c & 1) * 4)));
  }
}

void dequantize_row(const uint8_t* code, const float* kmin, const float* kmax, int32_t d,
                    int32_t bits, float* out) {
  for (int32_t c = 0; c < d; ++c)
    out[c] =
        kmin[c] + static_cast<float>(code_of(code, c, bits)) * quant_step(kmin[c], kmax[c], bits);
}

void approx_scores(const uint8_t* codes, int32_t n, const float* kmin, const float* kmax, int32_t d,
                   int32_t bits, const float* q, int32_t G, float scale, float* z) {
  TANDEM_CHECK((bits == 8 || bits == 4) && d % 2 == 0 && G >= 1, "approximate scores of ", bits,
               " bits, d ", d, ", G ", G);
  // Per block: w[g, c] = scale * q_gc * step_c and base[g] = scale * q_g . kmin (O(G d)).
  thread_local std::vector<float> w, base, row;
  w.resize(static_cast<size_t>(G) * d);
  base.assign(static_cast<size_t>(G), 0.0f);
  row.resize(static_cast<size_t>(d));
  for (int32_t c = 0; c < d; ++c) {
    const float step = quant_step(kmin[c], kmax[c], bits);
    for (int32_t g = 0; g < G; ++g) {
      const float qs = scale * q[int64_t{g} * d + c];
      w[static_cast<size_t>(g) * d + c] = qs * step;
      base[static_cast<size_t>(g)] += qs * kmin[c];
    }
  }
  // Per row: its codes as floats once (8 channels a vector), then one dot product per query head
  // (O(G d)); d a multiple of 8 takes the vector path, any other the scalar one.
  const int64_t rb = code_row_bytes(d, bits);
  const bool vec = d % 8 == 0;
  for (int32_t i = 0; i < n; ++i) {
    const uint8_t* r = codes + i * rb;
    float* f = row.data();
    if (vec && bits == 8) {
      for (int32_t c = 0; c < d; c += 8) {
        const __m128i b8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(r + c));
        _mm256_storeu_ps(f + c, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b8)));
      }
    } else if (vec) {
      // 4 bytes hold 8 channels: low nibble first. Each byte repeated, then shifted per lane.
      const __m256i shifts = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4);
      const __m256i mask = _mm256_set1_epi32(0xF);
      for (int32_t c = 0; c < d; c += 8) {
        uint32_t word;
        std::memcpy(&word, r + c / 2, sizeof(word));
        const __m256i bytes = _mm256_setr_epi32(
            static_cast<int32_t>(word & 0xFF), static_cast<int32_t>(word & 0xFF),
            static_cast<int32_t>((word >> 8) & 0xFF), static_cast<int32_t>((word >> 8) & 0xFF),
            static_cast<int32_t>((word >> 16) & 0xFF), static_cast<int32_t>((word >> 16) & 0xFF),
            static_cast<int32_t>(word >> 24), static_cast<int32_t>(word >> 24));
        const __m256i nib = _mm256_and_si256(_mm256_srlv_epi32(bytes, shifts), mask);
        _mm256_storeu_ps(f + c, _mm256_cvtepi32_ps(nib));
      }
    } else {
      for (int32_t c = 0; c < d; ++c) f[c] = static_cast<float>(code_of(r, c, bits));
    }
    for (int32_t g = 0; g < G; ++g) {
      const float* wg = w.data() + static_cast<size_t>(g) * d;
      float dot = 0.0f;
      if (vec) {
        __m256 acc = _mm256_setzero_ps();
        for (int32_t c = 0; c < d; c += 8)
          acc = _mm256_fmadd_ps(_mm256_loadu_ps(wg + c), _mm256_loadu_ps(f + c), acc);
        dot = cpu::hsum(acc);
      } else {
        for (int32_t c = 0; c < d; ++c) dot += wg[c] * f[c];
      }
      z[int64_t{i} * G + g] = base[static_cast<size_t>(g)] + dot;
    }
  }
}

}  // namespace tandem
