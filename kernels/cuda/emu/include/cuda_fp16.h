// __half and __half2 for the emulator: IEEE binary16 storage, conversions rounding to nearest
// even like NVIDIA's cuda_fp16.h (through kernels/dtype.h, the CPU backend's conversions).
#pragma once

#include <cstdint>

#include "kernels/cuda/emu/vector_types.h"
#include "kernels/dtype.h"

struct __half {
  uint16_t bits;
};
struct alignas(4) __half2 {
  __half x, y;
};

inline float __half2float(__half h) { return tandem::f16_to_f32(h.bits); }
inline __half __float2half_rn(float f) { return __half{tandem::f32_to_f16(f)}; }
inline __half __float2half(float f) { return __float2half_rn(f); }
inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
