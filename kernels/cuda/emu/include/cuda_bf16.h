// __nv_bfloat16 and __nv_bfloat162 for the emulator: bfloat16 storage, conversions rounding to
// nearest even like NVIDIA's cuda_bf16.h (through kernels/dtype.h).
#pragma once

#include <cstdint>

#include "kernels/cuda/emu/vector_types.h"
#include "kernels/dtype.h"

struct __nv_bfloat16 {
  uint16_t bits;
};
struct alignas(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline float __bfloat162float(__nv_bfloat16 h) { return tandem::bf16_to_f32(h.bits); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{tandem::f32_to_bf16(f)}; }
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float2 __bfloat1622float2(__nv_bfloat162 h) {
  return {__bfloat162float(h.x), __bfloat162float(h.y)};
}
