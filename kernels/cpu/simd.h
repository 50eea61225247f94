// AVX2/FMA/F16C helpers shared by the CPU ops (kernels/cpu/*.cpp): 8-wide loads of f32/f16/bf16
// as f32, rounding stores, horizontal reductions, a vector exp, row addressing of views and
// row conversions. Internal to the CPU backend; nothing here is part of the Backend interface.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace tandem::cpu {

// ---- 8-wide loads and stores -----------------------------------------------------------------

inline __m256 load8_f32(const float* p) { return _mm256_loadu_ps(p); }

// f16 -> f32 is exact (F16C).
inline __m256 load8_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// bf16 -> f32 is exact: widen to 32 bits and shift into the high half.
inline __m256 load8_bf16(const uint16_t* p) {
  const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

// Round to nearest even, overflow to inf, subnormals kept (agrees with f32_to_f16 except for the
// payload bits of NaNs, which stay NaN).
inline void store8_f16(uint16_t* p, __m256 v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

// Round to nearest even with NaNs kept quiet, bit for bit as f32_to_bf16.
inline void store8_bf16(uint16_t* p, __m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  r = _mm256_srli_epi32(r, 16);
  const __m256i nan_bits = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  r = _mm256_blendv_epi8(r, nan_bits, _mm256_castps_si256(is_nan));
  // Every lane is in [0, 65535], so the unsigned-saturating pack is exact.
  const __m128i packed =
      _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), packed);
}

// Element-type traits, so kernels are written once and templated on the stored type.
struct F32 {
  using T = float;
  static __m256 load8(const float* p) { return load8_f32(p); }
  static float get(const float* p) { return *p; }
};
struct F16 {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) { return load8_f16(p); }
  static float get(const uint16_t* p) { return f16_to_f32(*p); }
};
struct BF16 {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) { return load8_bf16(p); }
  static float get(const uint16_t* p) { return bf16_to_f32(*p); }
};

// ---- Reductions --------------------------------------------------------------------------------

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Lane i of the result is the sum of the lanes of a[i] (8 dot products reduced together).
inline __m256 reduce8(const __m256* a) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]);
  const __m256 t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]);
  const __m256 t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1);  // [a0..a3 low halves | a0..a3 high halves]
  const __m256 u1 = _mm256_hadd_ps(t2, t3);  // [a4..a7 low halves | a4..a7 high halves]
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

// ---- exp ---------------------------------------------------------------------------------------

// e^x for 8 floats, relative error ~2 ulp: x = n ln2 + r with |r| <= ln2/2, e^r by the Cephes
// degree-6 polynomial, 2^n built in the exponent field.
// Numeric guards: x < -87 gives exactly 0 (e^-87 ~ 1.6e-38, so results below the smallest
// normal float are flushed; a -inf score must weigh exactly 0), x > 88.3 gives +inf (keeps
// n <= 127 so the exponent field cannot wrap), NaN stays NaN.
inline __m256 exp8(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 hi = _mm256_set1_ps(88.3f);
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // r = x - n ln2 with ln2 split in two so n * C1 is exact.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  y = _mm256_blendv_ps(y, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  y = _mm256_blendv_ps(y, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// Scalar e^x with the same guards as exp8, for tails (so a row gives the same answer whatever
// its length modulo 8).
inline float exp1(float x) {
  alignas(32) float buf[8] = {x, x, x, x, x, x, x, x};
  _mm256_store_ps(buf, exp8(_mm256_load_ps(buf)));
  return buf[0];
}

// ---- Row loops ---------------------------------------------------------------------------------

// Sum of a[i] * b[i] over n floats, 8-wide with two accumulators.
inline float dot_f32(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = _mm256_fmadd_ps(load8_f32(a + i), load8_f32(b + i), s0);
    s1 = _mm256_fmadd_ps(load8_f32(a + i + 8), load8_f32(b + i + 8), s1);
  }
  for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(load8_f32(a + i), load8_f32(b + i), s0);
  float s = hsum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// dst[0, n) = src[0, n) converted from E::T to f32.
template <typename E>
inline void convert_to_f32(const typename E::T* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, E::load8(src + i));
  for (; i < n; ++i) dst[i] = E::get(src + i);
}

// dst[0, n) = src[0, n) of any float dtype, as f32.
inline void row_to_f32(const void* src, DType t, float* dst, int64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16:
      convert_to_f32<F16>(static_cast<const uint16_t*>(src), dst, n);
      return;
    case DType::kBF16:
      convert_to_f32<BF16>(static_cast<const uint16_t*>(src), dst, n);
      return;
    default:
      break;
  }
  TANDEM_CHECK(false, "row_to_f32 of ", dtype_name(t));
}

// dst[0, n) (any float dtype) = src[0, n) f32, rounded to nearest even.
inline void row_from_f32(const float* src, void* dst, DType t, int64_t n) {
  int64_t i = 0;
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (; i + 8 <= n; i += 8) store8_f16(d + i, load8_f32(src + i));
      for (; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (; i + 8 <= n; i += 8) store8_bf16(d + i, load8_f32(src + i));
      for (; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    default:
      break;
  }
  TANDEM_CHECK(false, "row_from_f32 to ", dtype_name(t));
}

inline bool is_float_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

// ---- Row addressing ----------------------------------------------------------------------------

// A view whose last dim is contiguous is seen as [rows, cols]: cols = last dim, rows = product of
// the others. Leading dims may have any strides (a slice of a fused qkv row, for instance).
inline int64_t n_rows(const TensorView& t) {
  int64_t r = 1;
  for (int a = 0; a + 1 < t.ndim; ++a) r *= t.shape[static_cast<size_t>(a)];
  return r;
}
inline int64_t n_cols(const TensorView& t) { return t.dim(-1); }
inline bool last_dim_contiguous(const TensorView& t) {
  return t.ndim >= 1 && (t.dim(-1) <= 1 || t.stride[static_cast<size_t>(t.ndim - 1)] == 1);
}

// Offset in elements of row r.
inline int64_t row_offset(const TensorView& t, int64_t r) {
  int64_t off = 0;
  for (int a = t.ndim - 2; a >= 0; --a) {
    const int64_t s = t.shape[static_cast<size_t>(a)];
    off += (r % s) * t.stride[static_cast<size_t>(a)];
    r /= s;
  }
  return off;
}

inline float* row_f32(const TensorView& t, int64_t r) { return t.as<float>() + row_offset(t, r); }

// Byte pointer of row r, whatever the dtype.
inline char* row_bytes(const TensorView& t, int64_t r) {
  return static_cast<char*>(t.data) + row_offset(t, r) * dtype_size(t.dtype);
}

// Same shape (dims only; strides may differ).
inline bool same_shape(const TensorView& a, const TensorView& b) {
  if (a.ndim != b.ndim) return false;
  for (int i = 0; i < a.ndim; ++i)
    if (a.shape[static_cast<size_t>(i)] != b.shape[static_cast<size_t>(i)]) return false;
  return true;
}

}  // namespace tandem::cpu
