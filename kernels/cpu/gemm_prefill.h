// The prefill matrix product of CpuBackend::matmul (n > 16 rows), internal to the CPU backend:
// y[n, m] = x[n, k] · w[m, k]^T (+ bias), on the path kernels/cpu/isa.h makes active.
//
// Layout (the "weights broadcast" form): a micro-kernel keeps a tile of mr weight rows x nr x
// rows in registers, one vector per weight row and 8 or 16 x rows; each step broadcasts one
// weight value (or, for VDPBF16PS, one pair of bf16 values) per weight row and multiplies it
// with one packed vector of nr x values. So
//  - x is packed once per call: panels of nr rows, k-major (f32; or bf16 pairs for VDPBF16PS);
//  - weights are read in place (f32, and bf16 for VDPBF16PS): nothing cached, nothing packed.
//    f16 weights (and bf16 ones on the f32 paths) are converted per micro-panel (mr rows x kc)
//    into an L1-sized buffer that serves every x panel of the task;
//  - each output is one f32 chain over p = 0..k-1 in order (a register lane, spilled to an f32
//    tile between k blocks), so the result depends neither on the thread count nor on n nor on
//    the blocking. The f32 paths agree bit for bit with each other; the bf16 path rounds x to
//    bf16 (round to nearest even) and accumulates pairs with VDPBF16PS.
// Blocking: tasks of mc weight rows x nc x rows (oneTBB); inside a task, k blocks of kc, then
// micro-panels of mr weight rows (L1), then x panels (nc x kc packed values, L2); the task's
// f32 tile [mc][nc] stays in L2 and is transposed into y (+ bias) at the end.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/dtype.h"

namespace tandem::cpu {

// t[r * ldt + i] (+)= sum_{p < kc} w[r * ldw + p] * xp[p * nr + i] for r < rows <= mr and
// i < nv * lanes (the first nv vectors of each packed step); accumulate: add to t, else set.
using KernelF32 = void (*)(int rows, int nv, const float* w, int64_t ldw, const float* xp,
                           int64_t kc, float* t, int64_t ldt, bool accumulate);
// As KernelF32 over kq pairs: w[r * ldw + 2q .. 2q + 1] times xp[(q * nr + i) * 2 .. + 1].
using KernelBf16 = void (*)(int rows, int nv, const uint16_t* w, int64_t ldw, const uint16_t* xp,
                            int64_t kq, float* t, int64_t ldt, bool accumulate);

struct PrefillPath {
  int mr = 0;                      // weight rows per micro-tile
  int lanes = 0;                   // f32 lanes per vector
  int nr = 0;                      // x rows per packed panel: nv_max * lanes
  int64_t kc = 0, mc = 0, nc = 0;  // k per block (even), weight and x rows per task
  KernelF32 f32 = nullptr;
  KernelBf16 bf16 = nullptr;  // set on the avx512bf16 path only
};

// The AVX2 path (gemm_prefill.cpp) and the AVX-512 ones (gemm_avx512.cpp); call the latter only
// where isa_supported says so.
PrefillPath prefill_path_avx2();
PrefillPath prefill_path_avx512();
PrefillPath prefill_path_avx512bf16();

// y[i * ldy + j] = sum_p x[i * ldx + p] * w[j * k + p] (+ bias[j]), i < n, j < m, on `isa`.
void matmul_prefill(Isa isa, DType wt, const void* w, int64_t m, int64_t k, const float* x,
                    int64_t ldx, int64_t n, const float* bias, float* y, int64_t ldy);

}  // namespace tandem::cpu
