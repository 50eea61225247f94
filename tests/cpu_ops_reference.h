// Helpers of the CPU backend's op tests (tests/test_cpu_ops_*.cpp): random inputs of every float
// dtype (fixed seeds, no zeros) with their values after rounding to that dtype, and the error
// measure.
//
// Error measure: err = max_i |got_i - ref_i| / max_i |ref_i| (the normalised error of
// llama.cpp's test-backend-ops). Tolerance 1e-5 on every path: f16/bf16 inputs are rounded once
// when the test builds them and the float64 reference is computed from the same rounded values,
// so only the kernel's float32 arithmetic is measured.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "kernels/buffer.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace tandem::test {

inline constexpr double kTol = 1e-5;
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// A buffer of some float dtype plus its values as float after rounding to that dtype.
struct Tensor {
  Buffer buf;
  std::vector<float> val;
  const TensorView& view() const { return buf.view(); }
  float* f32() const { return buf.as<float>(); }
};

// Rounds v to dtype t, returns the value it stores, writes the bits to dst[i].
inline float store_as(DType t, void* dst, int64_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(dst)[i] = v;
      return v;
    case DType::kF16: {
      const uint16_t h = f32_to_f16(v);
      static_cast<uint16_t*>(dst)[i] = h;
      return f16_to_f32(h);
    }
    case DType::kBF16: {
      const uint16_t h = f32_to_bf16(v);
      static_cast<uint16_t*>(dst)[i] = h;
      return bf16_to_f32(h);
    }
    default:
      FAIL("not a float dtype");
  }
  return 0.0f;
}

// Uniform magnitudes in [0.1, 1) * scale with random sign plus offset: never zero.
inline Tensor random_tensor(DType t, std::initializer_list<int64_t> dims, uint32_t seed,
                            float scale = 1.0f, float offset = 0.0f) {
  Tensor x{Buffer(t, dims), {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  const int64_t n = x.buf.view().numel();
  x.val.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float v = (rng() & 1u ? 1.0f : -1.0f) * mag(rng) * scale + offset;
    x.val[static_cast<size_t>(i)] = store_as(t, x.buf.view().data, i, v);
  }
  return x;
}

inline Buffer i32_buffer(const std::vector<int32_t>& v) {
  Buffer b(DType::kI32, {static_cast<int64_t>(v.size())});
  std::memcpy(b.as<int32_t>(), v.data(), v.size() * sizeof(int32_t));
  return b;
}

inline double norm_err(const float* got, const std::vector<double>& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(got[i]) - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return den > 0.0 ? num / den : num;
}

inline std::unique_ptr<Backend> cpu() { return make_cpu_backend(); }

}  // namespace tandem::test
