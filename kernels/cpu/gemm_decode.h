// Decode-size products (n <= 16 x rows) of bf16 weights on the avx512bf16 path, internal to the
// CPU backend (kernels/cpu/gemm.cpp): x is rounded to bf16 (round to nearest even, as the
// prefill path and llama.cpp's CPU backend do) and each weight row is multiplied with it by
// VDPBF16PS straight from the row-major weights: one 64-byte load and one instruction per 32
// weights and x row, against 7 instructions for the widening f32 stream of the AVX2 path.
//
// Every output is the same function of its weight row and x row whatever n and the tiling: two
// f32 accumulators per (row, x row), alternate 32-value steps, summed at the end. So on this
// path a sequence's decode logits do not depend on how many others share its step (n <= 16).
#pragma once

#include <cstdint>

namespace tandem::cpu {

// Values of k rounded up to what decode_bf16x_rows reads from each packed x row.
inline int64_t decode_bf16x_stride(int64_t k) { return (k + 31) / 32 * 32; }

// xb[i * decode_bf16x_stride(k) + p] = bf16(x[i * ldx + p]) for p < k, 0 after; i < n.
void pack_decode_bf16x(const float* x, int64_t ldx, int64_t n, int64_t k, uint16_t* xb);

// y[i * ldy + r] = sum_p w[r * k + p] * xb[i * stride + p] (+ bias[r]), r < rows, i < n <= 16.
// Call only where isa_supported(Isa::kAvx512Bf16).
void decode_bf16x_rows(const uint16_t* w, int64_t rows, int64_t k, const uint16_t* xb, int64_t n,
                       const float* bias, float* y, int64_t ldy);

}  // namespace tandem::cpu
