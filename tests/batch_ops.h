// Helpers of the batched-op tests (test_cuda_attention_batch, test_cuda_scatter_rows): the CPU
// backend, the CUDA backend where there is a device (a GPU or the emulator), random inputs and
// the bytes of backend views.
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"

namespace tandem::test {

inline Backend& cpu() {
  static const std::unique_ptr<Backend> b = make_cpu_backend();
  return *b;
}

// The CUDA backend, or null without a device (then the CUDA checks are skipped).
inline Backend* gpu() {
  static const std::unique_ptr<Backend> b =
      cuda_device_info().count > 0 ? make_cuda_backend() : nullptr;
  return b.get();
}

inline void store(DType t, void* p, int64_t i, float v) {
  if (t == DType::kF32)
    static_cast<float*>(p)[i] = v;
  else if (t == DType::kF16)
    static_cast<uint16_t*>(p)[i] = f32_to_f16(v);
  else
    static_cast<uint16_t*>(p)[i] = f32_to_bf16(v);
}

// Uniform magnitudes in [0.1, 1) with random sign: never zero.
inline Buffer random_buffer(DType t, std::initializer_list<int64_t> dims, uint32_t seed) {
  Buffer b(t, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  for (int64_t i = 0; i < b.view().numel(); ++i)
    store(t, b.view().data, i, (rng() & 1u ? 1.0f : -1.0f) * mag(rng));
  return b;
}

// The bytes of a backend view (waits for its queue).
inline std::vector<uint8_t> bytes_of(Backend& be, const TensorView& v) {
  std::vector<uint8_t> raw(static_cast<size_t>(v.nbytes()));
  TensorView host = v;
  host.data = raw.data();
  host.memory = MemoryKind::kHost;
  be.download(v, host);
  return raw;
}

// Index of the first differing byte, or -1.
inline int64_t first_diff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return static_cast<int64_t>(i);
  return -1;
}

}  // namespace tandem::test
