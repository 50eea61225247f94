// Helpers of the CUDA parity tests (tests/test_cuda_kernels_*.cpp): the same random inputs on the
// CPU reference backend and the CUDA backend, device outputs poisoned with NaN before each op so an
// unwritten element fails, and the error measure max |gpu - cpu| / max |cpu| (as in
// tests/cpu_ops_reference.h): below 1e-5 on f32 paths and 1e-2 where the GPU rounds an operand to
// f16/bf16 that the CPU keeps in f32 (cuBLAS with 16-bit weights).
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

#include "kernels/backend.h"
#include "kernels/buffer.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace tandem::test {

inline constexpr double kTol32 = 1e-5;
inline constexpr double kTol16 = 1e-2;
inline constexpr float kInf = std::numeric_limits<float>::infinity();
inline constexpr DType kFloatTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

inline Backend& gpu() {
  static const std::unique_ptr<Backend> b = make_cuda_backend();
  return *b;
}

inline Backend& cpu() {
  static const std::unique_ptr<Backend> b = make_cpu_backend();
  return *b;
}

inline float to_float(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kF16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    default:
      FAIL("not a float dtype");
  }
  return 0.0f;
}

inline void store(DType t, void* p, int64_t i, float v) {
  switch (t) {
    case DType::kF32:
      static_cast<float*>(p)[i] = v;
      return;
    case DType::kF16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
      return;
    default:
      FAIL("not a float dtype");
  }
}

// Uniform magnitudes in [0.1, 1) * scale with random sign, plus offset: never zero.
inline Buffer random_buffer(DType t, std::initializer_list<int64_t> dims, uint32_t seed,
                            float scale = 1.0f, float offset = 0.0f) {
  Buffer b(t, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  const int64_t n = b.view().numel();
  for (int64_t i = 0; i < n; ++i)
    store(t, b.view().data, i, (rng() & 1u ? 1.0f : -1.0f) * mag(rng) * scale + offset);
  return b;
}

inline Buffer i32_buffer(const std::vector<int32_t>& v) {
  Buffer b(DType::kI32, {static_cast<int64_t>(v.size())});
  std::memcpy(b.as<int32_t>(), v.data(), v.size() * sizeof(int32_t));
  return b;
}

// A host copy of a contiguous host buffer (the CPU backend works in place on it).
inline Buffer clone(const Buffer& src) {
  Buffer b = Buffer::like(host_heap(), src.view());
  std::memcpy(b.view().data, src.view().data, static_cast<size_t>(src.view().nbytes()));
  return b;
}

inline Buffer up(const Buffer& b) { return upload_to_device(b.view()); }

// A device buffer shaped like the host one, poisoned with NaN (0xff bytes).
inline Buffer poisoned_like(const Buffer& b) {
  Buffer d = Buffer::like(cuda_device_memory(), b.view());
  fill_device_bytes(d.view(), 0xff);
  return d;
}

// The device buffer's values as floats (after every queued op has finished).
inline std::vector<float> down(const TensorView& dev) {
  gpu().synchronize();
  std::vector<uint8_t> raw(static_cast<size_t>(dev.nbytes()));
  TensorView host = dev;
  host.data = raw.data();
  host.memory = MemoryKind::kHost;
  copy_to_host(dev, host);
  std::vector<float> out(static_cast<size_t>(dev.numel()));
  for (int64_t i = 0; i < dev.numel(); ++i)
    out[static_cast<size_t>(i)] = to_float(dev.dtype, raw.data(), i);
  return out;
}

inline std::vector<float> values(const Buffer& b) {
  std::vector<float> out(static_cast<size_t>(b.view().numel()));
  for (int64_t i = 0; i < b.view().numel(); ++i)
    out[static_cast<size_t>(i)] = to_float(b.view().dtype, b.view().data, i);
  return out;
}

// max |got - ref| / max |ref| over finite reference entries; a NaN in got, or an infinity
// where ref has another value, is an infinite error.
inline double rel_err(const std::vector<float>& got, const std::vector<float>& ref) {
  REQUIRE(got.size() == ref.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i])) return kInf;
    if (std::isinf(ref[i]) || std::isinf(got[i])) {
      if (got[i] != ref[i]) return kInf;
      continue;
    }
    num = std::max(num, std::abs(static_cast<double>(got[i]) - ref[i]));
    den = std::max(den, std::abs(static_cast<double>(ref[i])));
  }
  return den > 0.0 ? num / den : num;
}

// lse rows: infinities must match exactly, finite values within tol * max(1, |ref|).
inline void check_lse(const std::vector<float>& got, const std::vector<float>& ref, double tol) {
  REQUIRE(got.size() == ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    INFO("lse row " << i << " gpu " << got[i] << " cpu " << ref[i]);
    if (std::isinf(ref[i])) {
      CHECK(got[i] == ref[i]);
    } else {
      CHECK(std::abs(static_cast<double>(got[i]) - ref[i]) <=
            tol * std::max(1.0, std::abs(static_cast<double>(ref[i]))));
    }
  }
}

}  // namespace tandem::test
