// host_attend_group: online-softmax decode attention over gathered host rows, AVX2/FMA/F16C, with
// AVX-512 score and value passes (host_kernel_avx512.cpp) where the active ISA has them.
//
// Rows are gathered across blocks (and selections) into chunks of kChunkRows row pointers, so a
// sparse selection still fills whole chunks. Per chunk and per pass over at most kMaxPass query
// heads:
//   scores  R = 8 / heads rows at a time (8 independent FMA chains); the 8 dot products are
//           reduced together by one hadd tree; q is pre-scaled and stays in L1;
//   softmax one max update per head per chunk; the accumulated o and sum are rescaled only when
//           the max grows;
//   values  up to 12 accumulators (heads x column blocks) held over the chunk's rows, each V
//           load serving every head of the pass.
// Heads beyond kMaxPass take further passes over the same chunk, which is then in L1, so K and V
// still come from memory once. On the machines measured (AVX2 Zen), loads rather than FMAs bound
// the in-cache speed, hence the register pinning below and the pass width of 4 heads. From
// memory, software prefetches spread over the compute keep the next rows in flight: a chunk's V
// rows during its scores, the next chunk's K rows during its values (chunks are gathered one
// ahead for that); with f32 KV on the AVX-512 passes one line in four of the long ranges read
// in address order, the hardware prefetchers fetching the rest (GroupAttention::sparse_every).
#include "kernels/cpu/host_kernel.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/attn_partial.h"
#include "kernels/common.h"
#include "kernels/cpu/host_kernel_passes.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/line_stream.h"
#include "kernels/cpu/simd.h"

namespace tandem {
namespace {

using cpu::LineStream;

constexpr int kMaxPass = 4;  // query heads per pass over a chunk (more would need > 16 ymm)

// Keeps a loaded vector in a register. Without it GCC folds the load into every FMA that uses
// the vector, loading it once per use instead of once; loads, not FMAs, then limit the kernel
// (measured: G=4 scores 30% faster, G=2 values with f32 KV 40% faster).
#define TANDEM_IN_REGISTER(x) __asm__("" : "+x"(x))

// Prefetches the cache lines holding bytes [p, p + bytes) into L2 (not L1: a prefetch to L1
// holds one of its few miss buffers until the line arrives, so a chunk's worth of them stalled
// the loads the FMAs wait for; to L2 the same prefetches took the 32K-context full scan with 2
// threads from ~16 to 21-27 GB/s on the AMD EPYC (docs/host-attention.md, 2026-11-27).
inline void prefetch_bytes(const void* p, int32_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  for (uintptr_t line = a & ~uintptr_t{63}; line < a + static_cast<uintptr_t>(bytes); line += 64)
    _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T2);
}

// s[g * kChunkRows + j] = q_g . k_j for GS heads and rows j in [0, nr); nr a multiple of R.
//   rows [nr] pointers to K rows of d elements; q f32 [GS, d] (pre-scaled).
// R rows at a time, R * GS <= 8 accumulators; the 8 dot products are reduced by one hadd tree.
// Rows pf[0, pf_n) (d elements each) are prefetched along the way, R per row group.
template <typename E, int GS>
void score_pass(const typename E::T* const* rows, int32_t nr, const float* q, int32_t d, float* s,
                const typename E::T* const* pf, int32_t pf_n) {
  constexpr int R = 8 / GS;
  const int32_t row_bytes = d * static_cast<int32_t>(sizeof(typename E::T));
  constexpr bool kPinQ = GS >= 3;                                 // q used R times per load
  constexpr bool kPinK = GS == 2 && std::is_same_v<E, cpu::F32>;  // k used GS times per load
  for (int32_t j = 0; j < nr; j += R) {
    for (int32_t r = j; r < j + R && r < pf_n; ++r) prefetch_bytes(pf[r], row_bytes);
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int32_t c = 0; c < d; c += 8) {
      __m256 kv[R];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        kv[r] = E::load8(rows[j + r] + c);
        if constexpr (kPinK) TANDEM_IN_REGISTER(kv[r]);
      }
#pragma GCC unroll 8
      for (int g = 0; g < GS; ++g) {
        __m256 qv = _mm256_loadu_ps(q + g * d + c);
        if constexpr (kPinQ) TANDEM_IN_REGISTER(qv);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) acc[g * R + r] = _mm256_fmadd_ps(qv, kv[r], acc[g * R + r]);
      }
    }
    alignas(32) float t[8];
    _mm256_store_ps(t, cpu::reduce8(acc));
#pragma GCC unroll 8
    for (int g = 0; g < GS; ++g)
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) s[g * kChunkRows + j + r] = t[g * R + r];
  }
}

// acc[g, c .. c + 8 CB) += sum_j p[g * kChunkRows + j] * v_j[c ...] for column blocks of 8 * CB
// starting at *c while they fit in d; advances *c. GS * CB accumulators stay in registers over
// the chunk's rows; each V load serves GS heads, each broadcast CB blocks. Block b of a row is at
// off[b] from the row's pointer (cpu::v_column: in the row, or in its tile). Each sweep also
// prefetches: Pf::row(j, c0, bytes) per row j (below).
template <typename E, int GS, int CB, class Pf>
void value_cols(const typename E::T* const* rows, int32_t nr, const float* p, float* acc, int32_t d,
                int64_t v_tile, int32_t* c, Pf& pf_io) {
  constexpr int32_t kBlockBytes = 8 * CB * static_cast<int32_t>(sizeof(typename E::T));
  constexpr bool kPinV = GS >= 2;  // v used GS times per load
  Pf pf = pf_io;                   // in registers over the loops
  for (; *c + 8 * CB <= d; *c += 8 * CB) {
    const int32_t c0 = *c;
    int64_t off[CB];
#pragma GCC unroll 12
    for (int b = 0; b < CB; ++b) off[b] = cpu::v_column(c0 + 8 * b, v_tile);
    __m256 o[GS * CB];
#pragma GCC unroll 12
    for (int g = 0; g < GS; ++g)
#pragma GCC unroll 12
      for (int b = 0; b < CB; ++b) o[g * CB + b] = _mm256_loadu_ps(acc + g * d + c0 + 8 * b);
    for (int32_t j = 0; j < nr; ++j) {
      pf.row(j, c0, kBlockBytes);
      const typename E::T* vr = rows[j];
      __m256 w[GS];
#pragma GCC unroll 8
      for (int g = 0; g < GS; ++g) w[g] = _mm256_broadcast_ss(p + g * kChunkRows + j);
#pragma GCC unroll 12
      for (int b = 0; b < CB; ++b) {
        __m256 v = E::load8(vr + off[b]);
        if constexpr (kPinV) TANDEM_IN_REGISTER(v);
#pragma GCC unroll 8
        for (int g = 0; g < GS; ++g) o[g * CB + b] = _mm256_fmadd_ps(w[g], v, o[g * CB + b]);
      }
    }
#pragma GCC unroll 12
    for (int g = 0; g < GS; ++g)
#pragma GCC unroll 12
      for (int b = 0; b < CB; ++b) _mm256_storeu_ps(acc + g * d + c0 + 8 * b, o[g * CB + b]);
  }
  pf_io = pf;
}

// The value passes' prefetches: the same columns of rows pf[0, n) as each sweep reads ...
template <typename T>
struct RowColumnsPf {
  const T* const* pf;
  int32_t n;
  void row(int32_t j, int32_t c0, int32_t bytes) const {
    if (j < n) prefetch_bytes(pf[j] + c0, bytes);
  }
};

// ... or a LineStream paced over the pass's row steps (the column-stored blocks' path).
struct StreamPf {
  LineStream s;
  void row(int32_t, int32_t, int32_t) { s.tick(); }
};

// Column blocks per sweep of the value pass for gs heads (value_pass_with below).
constexpr int value_cb(int gs) { return gs == 1 ? 8 : gs == 2 ? 6 : 2; }

// acc [GS, d] += P [GS, nr] . V [nr, d] for one pass of GS heads: the widest column blocks that
// keep <= 12 accumulators (measured best: 1 head 8 blocks, 2 heads 6, 3-4 heads 2), then the
// narrower ones for the remaining columns.
template <typename E, int GS, class Pf>
void value_pass_with(const typename E::T* const* rows, int32_t nr, const float* p, float* acc,
                     int32_t d, int64_t v_tile, Pf& pf) {
  constexpr int CB = value_cb(GS);
  int32_t c = 0;
  value_cols<E, GS, CB>(rows, nr, p, acc, d, v_tile, &c, pf);
  if constexpr (CB > 4) value_cols<E, GS, 4>(rows, nr, p, acc, d, v_tile, &c, pf);
  if constexpr (CB > 2) value_cols<E, GS, 2>(rows, nr, p, acc, d, v_tile, &c, pf);
  value_cols<E, GS, 1>(rows, nr, p, acc, d, v_tile, &c, pf);
}

// Row steps (rows times column sweeps) of value_pass_with for gs heads.
int32_t value_steps(int32_t gs, int32_t nr, int32_t d) {
  const int32_t cb = value_cb(gs);
  int32_t sweeps = 0, c = 0;
  for (int32_t w : {cb, 4, 2, 1}) {
    if (w > cb) continue;
    const int32_t k = (d - c) / (8 * w);
    sweeps += k;
    c += k * 8 * w;
  }
  return sweeps * nr;
}

// pf: rows of d elements (the row path's chunks; pf_row_bytes is d * sizeof(T)).
template <typename E, int GS>
void value_pass(const typename E::T* const* rows, int32_t nr, const float* p, float* acc, int32_t d,
                int64_t v_tile, const typename E::T* const* pf, int32_t pf_n,
                int32_t /*pf_row_bytes*/, int32_t /*pf_every*/) {
  RowColumnsPf<typename E::T> rp{pf, pf_n};
  value_pass_with<E, GS>(rows, nr, p, acc, d, v_tile, rp);
}

// The value pass of a column-stored block's chunk on the AVX2 path, its prefetches a LineStream
// paced over its row steps. (The AVX-512 value passes pace their own over theirs.)
template <typename E>
void value_pass_stream(int32_t gs, const typename E::T* const* rows, int32_t nr, const float* p,
                       float* acc, int32_t d, int64_t v_tile, StreamPf& pf) {
  switch (gs) {
    case 1:
      return value_pass_with<E, 1>(rows, nr, p, acc, d, v_tile, pf);
    case 2:
      return value_pass_with<E, 2>(rows, nr, p, acc, d, v_tile, pf);
    case 3:
      return value_pass_with<E, 3>(rows, nr, p, acc, d, v_tile, pf);
    default:
      return value_pass_with<E, 4>(rows, nr, p, acc, d, v_tile, pf);
  }
}

// One chain of the cols pass (host_kernel_passes.h): s[g, r0 .. r0 + 8 NZ) (+)= the sum over
// channels [c0, c1) of q_gc times the rows' K values, for GS heads; pf ticks once per channel.
template <typename E, int GS, int NZ>
inline void cols_chain(const typename E::T* kt, int64_t ld, int32_t r0, const float* q, int32_t d,
                       int32_t c0, int32_t c1, float* s, int32_t s_stride, LineStream& pf_io) {
  LineStream pf = pf_io;  // in registers over the loop
  // bf16, 16 rows: the two vectors hold the even and the odd rows (below).
  constexpr bool kPairs = NZ == 2 && std::is_same_v<E, cpu::BF16>;
  __m256 acc[GS * NZ];
#pragma GCC unroll 8
  for (int i = 0; i < GS * NZ; ++i) acc[i] = _mm256_setzero_ps();
  const typename E::T* col = kt + c0 * ld + r0;
  for (int32_t c = c0; c < c1; ++c, col += ld) {
    pf.tick();
    __m256 kv0, kv1;
    if constexpr (kPairs) {
      // 16 bf16 in one load: the even rows are the low halves of its 32-bit lanes shifted up,
      // the odd rows the high halves masked (two operations for 16 values, not four).
      const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(col));
      kv0 = _mm256_castsi256_ps(_mm256_slli_epi32(x, 16));
      kv1 = _mm256_castsi256_ps(_mm256_and_si256(x, _mm256_set1_epi32(-65536)));
    } else {
      kv0 = E::load8(col);
      if constexpr (NZ == 2) kv1 = E::load8(col + 8);
    }
    if constexpr (GS >= 2) TANDEM_IN_REGISTER(kv0);
    if constexpr (GS >= 2 && NZ == 2) TANDEM_IN_REGISTER(kv1);
#pragma GCC unroll 4
    for (int g = 0; g < GS; ++g) {
      const __m256 qb = _mm256_broadcast_ss(q + g * d + c);
      acc[g * NZ] = _mm256_fmadd_ps(qb, kv0, acc[g * NZ]);
      if constexpr (NZ == 2) acc[g * NZ + 1] = _mm256_fmadd_ps(qb, kv1, acc[g * NZ + 1]);
    }
  }
  if constexpr (kPairs)
#pragma GCC unroll 4
    for (int g = 0; g < GS; ++g) {  // even and odd rows back into row order
      const __m256 lo = _mm256_unpacklo_ps(acc[g * 2], acc[g * 2 + 1]);  // rows 0-3, 8-11
      const __m256 hi = _mm256_unpackhi_ps(acc[g * 2], acc[g * 2 + 1]);  // rows 4-7, 12-15
      acc[g * 2] = _mm256_permute2f128_ps(lo, hi, 0x20);
      acc[g * 2 + 1] = _mm256_permute2f128_ps(lo, hi, 0x31);
    }
#pragma GCC unroll 4
  for (int g = 0; g < GS; ++g)
#pragma GCC unroll 2
    for (int z = 0; z < NZ; ++z) {
      float* sp = s + g * s_stride + r0 + 8 * z;
      _mm256_storeu_ps(
          sp, c0 == 0 ? acc[g * NZ + z] : _mm256_add_ps(_mm256_loadu_ps(sp), acc[g * NZ + z]));
    }
  pf_io = pf;
}

// Per chain of kColSpan channels, the rows 16 at a time, then 8: the sweeps of one chain read
// the chain's whole stretch of K ([kColSpan, ld] elements, contiguous) before the next chain.
// The last < 8 rows take one dot product each (strided reads).
template <typename E, int GS>
void cols_heads(const typename E::T* kt, int64_t ld, int32_t n, const float* q, int32_t d, float* s,
                int32_t s_stride, LineStream& pf) {
  for (int32_t c0 = 0; c0 < d; c0 += cpu::kColSpan) {
    const int32_t c1 = std::min(d, c0 + cpu::kColSpan);
    int32_t r = 0;
    for (; r + 16 <= n; r += 16) cols_chain<E, GS, 2>(kt, ld, r, q, d, c0, c1, s, s_stride, pf);
    for (; r + 8 <= n; r += 8) cols_chain<E, GS, 1>(kt, ld, r, q, d, c0, c1, s, s_stride, pf);
  }
  for (int32_t r = n & ~7; r < n; ++r)
    for (int g = 0; g < GS; ++g) {
      float total = 0.0f;
      for (int32_t c0 = 0; c0 < d; c0 += cpu::kColSpan) {
        float a = 0.0f;
        for (int32_t c = c0; c < std::min(d, c0 + cpu::kColSpan); ++c)
          a = std::fma(q[g * d + c], E::get(kt + c * ld + r), a);
        total = c0 == 0 ? a : total + a;
      }
      s[g * s_stride + r] = total;
    }
}

template <typename E>
void cols_pass(const typename E::T* kt, int64_t ld, int32_t n, const float* q, int32_t G, int32_t d,
               float* s, int32_t s_stride, const typename E::T* const* pf, int32_t pf_n,
               int32_t pf_row_bytes, int32_t pf_every) {
  // AVX2: 16 rows per sweep (16 ymm registers), heads 4 at a time; the first head group's
  // channel steps (d per chain of 16 or 8 rows) issue the prefetches.
  LineStream lines(reinterpret_cast<const void* const*>(pf), pf_n, pf_row_bytes, pf_every);
  lines.pace(int64_t{d} * (n / 16 + (n % 16) / 8));
  LineStream none(nullptr, 0, 0);
  for (int32_t h0 = 0; h0 < G; h0 += kMaxPass) {
    const int32_t gs = std::min(kMaxPass, G - h0);
    const float* qh = q + h0 * d;
    float* sh = s + h0 * s_stride;
    LineStream& ls = h0 == 0 ? lines : none;
    switch (gs) {
      case 1:
        cols_heads<E, 1>(kt, ld, n, qh, d, sh, s_stride, ls);
        break;
      case 2:
        cols_heads<E, 2>(kt, ld, n, qh, d, sh, s_stride, ls);
        break;
      case 3:
        cols_heads<E, 3>(kt, ld, n, qh, d, sh, s_stride, ls);
        break;
      default:
        cols_heads<E, 4>(kt, ld, n, qh, d, sh, s_stride, ls);
        break;
    }
  }
  lines.rest();
}

// The online softmax of one chunk (kernels/cpu/host_kernel_passes.h, HostSoftmax), 8 lanes.
struct Softmax8 {
  static float chunk_max(float* sg, int32_t nr, int32_t nr_pad) {
    for (int32_t j = nr; j < nr_pad; ++j) sg[j] = kNegInf;
    __m256 vmax = _mm256_loadu_ps(sg);
    for (int32_t j = 8; j < nr_pad; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(sg + j));
    return cpu::hmax(vmax);
  }
  static void scale(float* p, int32_t n, float a) {
    const __m256 av = _mm256_set1_ps(a);
    for (int32_t c = 0; c < n; c += 8)
      _mm256_storeu_ps(p + c, _mm256_mul_ps(_mm256_loadu_ps(p + c), av));
  }
  static void weights(float* sg, int32_t nr_pad, float m, float* lg) {
    const __m256 mb = _mm256_set1_ps(m);
    __m256 sum = _mm256_loadu_ps(lg);
    for (int32_t j = 0; j < nr_pad; j += 8) {
      const __m256 pj = cpu::exp8(_mm256_sub_ps(_mm256_loadu_ps(sg + j), mb));
      _mm256_storeu_ps(sg + j, pj);
      sum = _mm256_add_ps(sum, pj);
    }
    _mm256_storeu_ps(lg, sum);
  }
};

void softmax_chunk_avx2(float* s, int32_t G, int32_t nr, int32_t nr_pad, float* m_run, float* l_run,
                        float* acc, int32_t d) {
  cpu::softmax_chunk<Softmax8>(s, G, nr, nr_pad, m_run, l_run, acc, d);
}

template <typename E>
using PassFns = cpu::HostPasses<typename E::T>;

template <typename E, int GS>
constexpr PassFns<E> pass_fns() {
  return {&score_pass<E, GS>, &value_pass<E, GS>};
}

// The passes for gs heads: AVX-512 ones when the active path has them (kernels/cpu/isa.h).
template <typename E>
PassFns<E> pass_fns_for(int gs) {
  if (cpu::active_isa() >= cpu::Isa::kAvx512) {
    if constexpr (std::is_same_v<E, cpu::F32>) return cpu::host_passes_avx512_f32(gs);
    if constexpr (std::is_same_v<E, cpu::BF16>) return cpu::host_passes_avx512_bf16(gs);
    if constexpr (std::is_same_v<E, cpu::F16>) return cpu::host_passes_avx512_f16(gs);
  }
  switch (gs) {
    case 1:
      return pass_fns<E, 1>();
    case 2:
      return pass_fns<E, 2>();
    case 3:
      return pass_fns<E, 3>();
    default:
      return pass_fns<E, 4>();
  }
}

// The cols pass of the active ISA.
template <typename E>
cpu::HostColScore<typename E::T> cols_fn() {
  if (cpu::active_isa() >= cpu::Isa::kAvx512) {
    if constexpr (std::is_same_v<E, cpu::F32>) return cpu::host_cols_avx512_f32();
    if constexpr (std::is_same_v<E, cpu::BF16>) return cpu::host_cols_avx512_bf16();
    if constexpr (std::is_same_v<E, cpu::F16>) return cpu::host_cols_avx512_f16();
  }
  return &cols_pass<E>;
}

// Per-thread working memory of one call, reused across calls.
struct Scratch {
  std::vector<float> bs;          // [G, n] scores of a column-stored block, then picked per chunk
  std::vector<const void*> rows;  // prefetch lists: of a column-stored block, its selected V
                                  // rows, then the next block's K span (one range each when
                                  // contiguous, else rows / pseudo-rows of d elements); of a
                                  // chunk with given scores, the next chunk's V by tiles' pieces
  std::vector<float> qs;          // [G, d] scale * q
  std::vector<float> acc;         // [G, d] unnormalised output
  std::vector<float> s;           // [G, kChunkRows] scores, then probabilities
  std::vector<float> m;           // [G] running max
  std::vector<float> l;           // [G, kSumLanes] running sum of exp(score - m), in lanes
};

template <typename E>
class GroupAttention {
 public:
  using T = typename E::T;

  // q null: the scores come with the blocks (HostBlockRef::s, value offload).
  GroupAttention(const float* q, int32_t G, int32_t d, float scale, Scratch& w)
      : G_(G), d_(d), scored_(q == nullptr), w_(w) {
    const size_t gd = static_cast<size_t>(G) * static_cast<size_t>(d);
    w_.qs.resize(gd);
    w_.acc.assign(gd, 0.0f);
    w_.s.resize(static_cast<size_t>(G) * kChunkRows);
    w_.m.assign(static_cast<size_t>(G), kNegInf);
    w_.l.assign(static_cast<size_t>(G) * cpu::kSumLanes, 0.0f);
    if (!scored_)
      for (size_t i = 0; i < gd; ++i) w_.qs[i] = q[i] * scale;
    // Passes of at most kMaxPass heads, as even as possible (6 heads: 3 + 3).
    const int32_t n_pass = (G + kMaxPass - 1) / kMaxPass;
    for (int32_t i = 0, h0 = 0; i < n_pass; ++i) {
      const int32_t gs = (G - h0) / (n_pass - i);
      passes_.push_back({h0, gs, pass_fns_for<E>(gs)});
      h0 += gs;
    }
  }

  // Adds the rows of one block to the chunk, processing full chunks. next: the block after it
  // (null for the last), whose K a column-stored block prefetches.
  void add_block(const HostBlockRef& b, const HostBlockRef* next) {
    TANDEM_CHECK(b.n >= 0 && b.n_idx >= 0, "host block n=", b.n, " n_idx=", b.n_idx);
    const int32_t rows = b.rows();
    if (rows == 0) return;
    TANDEM_CHECK((b.s != nullptr) == scored_, "host blocks ",
                 scored_ ? "without their given scores" : "mixing given and computed scores");
    TANDEM_CHECK((scored_ || b.k != nullptr) && b.v != nullptr, "host block without K or V");
    const T* k = static_cast<const T*>(b.k);
    const T* v = static_cast<const T*>(b.v);
    TANDEM_CHECK(b.stride == 0 || b.stride >= d_, "host block row stride ", b.stride, " < ", d_);
    const int64_t d = b.stride != 0 ? b.stride : d_;
    if (b.idx != nullptr)
      for (int32_t i = 0; i < b.n_idx; ++i)
        TANDEM_CHECK(b.idx[i] >= 0 && b.idx[i] < b.n, "host block idx ", b.idx[i], " outside [0, ",
                     b.n, ")");
    if (b.v_tile != 0)
      TANDEM_CHECK(b.stride == 0 && d_ % kVTile == 0 && b.v_tile >= int64_t{b.n} * kVTile,
                   "host block V tiles ", b.v_tile, " apart: head_dim ", d_, ", ", b.n,
                   " rows, row stride ", b.stride);
    // The rows of a chunk share one V layout: a change processes the chunks held first.
    if (b.v_tile != v_tile_) {
      flush_rows();
      v_tile_ = b.v_tile;
    }
    // From a row's pointer to the next row's: by rows, or within a tile.
    const int64_t vd = v_tile_ != 0 ? kVTile : d;
    if (b.k_ld != 0 && !scored_) return add_cols(b, next, vd);
    // Whole runs of rows at a time: the row pointers of a chunk are written by a plain loop,
    // one chunk-full test per run (per row, the bookkeeping cost ~8% of the kernel in cache).
    for (int32_t i = 0; i < rows;) {
      Chunk& c = chunks_[fill_];
      const int32_t n = std::min(rows - i, kChunkRows - c.n);
      if (b.idx == nullptr && !scored_) {
        for (int32_t j = 0; j < n; ++j) {
          c.k[c.n + j] = k + (i + j) * d;
          c.v[c.n + j] = v + (i + j) * vd;
        }
      } else {
        for (int32_t j = 0; j < n; ++j) {
          const int64_t r = b.idx != nullptr ? b.idx[i + j] : i + j;
          c.k[c.n + j] = scored_ ? nullptr : k + r * d;
          c.v[c.n + j] = v + r * vd;
          c.z[c.n + j] = scored_ ? b.s + int64_t{i + j} * G_ : nullptr;
        }
      }
      c.n += n;
      i += n;
      if (c.n == kChunkRows) chunk_full();
    }
  }

  // Processes the last partial chunk and writes o [G, d] and lse [G].
  void finish(float* o, float* lse) {
    flush_rows();
    for (int32_t g = 0; g < G_; ++g) {
      float* og = o + static_cast<int64_t>(g) * d_;
      const float* lg = w_.l.data() + static_cast<int64_t>(g) * cpu::kSumLanes;
      float l = 0.0f;
      for (int32_t k = 0; k < cpu::kSumLanes; ++k) l += lg[k];
      if (l == 0.0f) {  // nothing selected (or every score -inf): the empty partial
        std::fill(og, og + d_, 0.0f);
        lse[g] = kNegInf;
        continue;
      }
      const float* ag = w_.acc.data() + static_cast<int64_t>(g) * d_;
      const __m256 inv = _mm256_set1_ps(1.0f / l);
      for (int32_t c = 0; c < d_; c += 8)
        _mm256_storeu_ps(og + c, _mm256_mul_ps(_mm256_loadu_ps(ag + c), inv));
      lse[g] = w_.m[static_cast<size_t>(g)] + std::log(l);
    }
  }

 private:
  struct Pass {
    int32_t h0, gs;
    PassFns<E> fns;
  };

  // Row pointers of up to kChunkRows rows.
  struct Chunk {
    const T* k[kChunkRows];
    const T* v[kChunkRows];
    const float* z[kChunkRows];  // given scores [G] per row (scored_)
    int32_t n = 0;
  };

  // The prefetch list (w_.rows) of V rows row(0), ..., row(n - 1) of the layout held: one piece
  // per row and tile (one per row by rows). Returns the pieces' bytes. (Locals in the loop, not
  // members: through the stores GCC reloaded those every row, ~8% of the kernel in cache.)
  template <class Row>
  int32_t v_pieces(int32_t n, Row row) {
    const int32_t tiles = v_tile_ != 0 ? d_ / kVTile : 1;
    const int64_t vt = v_tile_;
    w_.rows.resize(static_cast<size_t>(n) * static_cast<size_t>(tiles));
    const void** lp = w_.rows.data();
    for (int32_t i = 0; i < n; ++i) {
      const T* r = row(i);
      for (int32_t t = 0; t < tiles; ++t) lp[i * tiles + t] = r + t * vt;
    }
    return (v_tile_ != 0 ? kVTile : d_) * static_cast<int32_t>(sizeof(T));
  }

  // The prefetch list (w_.rows) of n rows that follow each other from v0 (a whole block's): one
  // range per tile (one range by rows of d elements, vs == d). Returns the ranges' bytes.
  int32_t v_ranges(const T* v0, int32_t n, int64_t vs) {
    const int32_t tiles = v_tile_ != 0 ? d_ / kVTile : 1;
    w_.rows.resize(static_cast<size_t>(tiles));
    for (int32_t t = 0; t < tiles; ++t) w_.rows[static_cast<size_t>(t)] = v0 + t * v_tile_;
    return n * static_cast<int32_t>(vs * sizeof(T));
  }

  // The value passes of a chunk (rows vp[0, nr), probabilities in w_.s), the first one
  // prefetching pf[0, pf_n) (pf_bytes each, one line in pf_every): through value_pass_stream,
  // whose LineStream is paced over the first pass's row steps (stream: the AVX2 passes where the
  // list is not rows of d elements), or through each pass's own value function.
  void value_passes(const T* const* vp, int32_t nr, const T* const* pf, int32_t pf_n,
                    int32_t pf_bytes, int32_t pf_every, bool stream) {
    float* s = w_.s.data();
    if (stream) {
      StreamPf first{
          LineStream(reinterpret_cast<const void* const*>(pf), pf_n, pf_bytes, pf_every)};
      StreamPf none{LineStream(nullptr, 0, 0)};
      first.s.pace(value_steps(passes_[0].gs, nr, d_));
      for (size_t i = 0; i < passes_.size(); ++i) {
        const Pass& ps = passes_[i];
        value_pass_stream<E>(ps.gs, vp, nr, s + ps.h0 * kChunkRows, w_.acc.data() + ps.h0 * d_, d_,
                             v_tile_, i == 0 ? first : none);
      }
      first.s.rest();
      return;
    }
    for (size_t i = 0; i < passes_.size(); ++i) {
      const Pass& ps = passes_[i];
      ps.fns.value(vp, nr, s + ps.h0 * kChunkRows, w_.acc.data() + ps.h0 * d_, d_, v_tile_, pf,
                   i == 0 ? pf_n : 0, pf_bytes, pf_every);
    }
  }

  // Lines per software prefetch of a long range the passes will read in address order: with
  // f32 KV on the AVX-512 passes, what this CPU's hardware prefetchers call for
  // (cpu::host_prefetch_rule: one in four on Zen 4, every line on Zen 5); every line otherwise
  // (bf16 and f16 KV, measured with bf16; the AVX2 passes, whose column sweeps read V and K out
  // of address order).
  int32_t sparse_every() const { return !avx2_ && std::is_same_v<E, cpu::F32> ? pf_every_ : 1; }

  // Processes the chunks of row-stored K still held (before a column-stored block, and at the end).
  void flush_rows() {
    if (pending_) process(chunks_[fill_ ^ 1], &chunks_[fill_]);
    pending_ = false;
    if (chunks_[fill_].n > 0) process(chunks_[fill_], nullptr);
  }

  // A block whose K is stored by columns (HostBlockRef::k_ld): the scores of all its rows by the
  // cols pass (kColRows at a time, K in address order, the selected rows' V prefetched along the
  // way), then the selected rows in chunks of kChunkRows through the softmax and value passes,
  // which prefetch the next block's K. With a selection (idx) the whole block is scored: its K is
  // read either way once a row in every few lines is selected, and the pass needs no gather.
  void add_cols(const HostBlockRef& b, const HostBlockRef* next, int64_t vs) {
    flush_rows();
    TANDEM_CHECK(b.k_ld >= b.n, "host block K column stride ", b.k_ld, " < ", b.n, " rows");
    const T* kt = static_cast<const T*>(b.k);
    const T* v = static_cast<const T*>(b.v);
    const int32_t n = b.n, sel = b.rows();
    const int32_t row_bytes = d_ * static_cast<int32_t>(sizeof(T));
    // The selected rows' V, prefetched during the scores (each panel its share). A whole block's
    // contiguous rows (by tiles, or by rows of d) are one range per tile: one entry instead of one
    // per row, whose lines LineStream counts at once (per row, building and counting the lists
    // cost a few hundred instructions per block and head).
    const int32_t n_panels = (n + cpu::kColRows - 1) / cpu::kColRows;
    // V by tiles, which the AVX-512 value passes read in address order, takes sparse prefetches
    // (sparse_every); so does V by rows of kVTile channels (head_dim 64: a row is a tile, one
    // sweep reads the block in address order; measured with f32 KV, 2 threads, 32K and 3,072
    // tokens: 2-8% faster per call, docs/host-attention.md, 2026-12-07).
    std::vector<const void*>& list = w_.rows;
    int32_t v_pf_bytes, v_every = 1;
    if (b.idx == nullptr && n_panels == 1 && (v_tile_ != 0 || vs == d_)) {
      v_pf_bytes = v_ranges(v, sel, vs);
      if (v_tile_ != 0 || d_ == kVTile) v_every = sparse_every();
    } else if (const int32_t* idx = b.idx; idx != nullptr) {
      v_pf_bytes = v_pieces(sel, [=](int32_t i) { return v + idx[i] * vs; });
    } else {
      v_pf_bytes = v_pieces(sel, [=](int32_t i) { return v + i * vs; });
    }
    const int32_t n_vpf = static_cast<int32_t>(list.size());
    // A whole block of at most one chunk (the full policy's blocks) is scored straight into the
    // chunk's score rows; otherwise into bs, whence each chunk takes its selected rows' scores.
    const bool in_place = b.idx == nullptr && n <= kChunkRows;
    const int32_t n_alloc = in_place ? kChunkRows : (n + 15) & ~15;
    if (!in_place) w_.bs.resize(static_cast<size_t>(G_) * n_alloc);
    float* bs = in_place ? w_.s.data() : w_.bs.data();
    for (int32_t p = 0; p < n_panels; ++p) {
      const int32_t r0 = p * cpu::kColRows, np = std::min(cpu::kColRows, n - r0);
      const int32_t f0 = p * n_vpf / n_panels, f1 = (p + 1) * n_vpf / n_panels;
      cols_(kt + r0, b.k_ld, np, w_.qs.data(), G_, d_, bs + r0, n_alloc,
            reinterpret_cast<const T* const*>(list.data() + f0), f1 - f0, v_pf_bytes, v_every);
    }
    // The next block's K (columns, or rows): the bytes it spans, handed to the value passes'
    // prefetch; as one range where the selected rows make one chunk (sparse prefetches where the
    // cols pass will read it, in address order), otherwise as pseudo-rows of d elements, a share
    // per chunk.
    list.clear();
    int32_t k_pf_bytes = row_bytes, k_every = 1;
    if (next != nullptr && next->s == nullptr && next->k != nullptr && next->rows() > 0) {
      const int64_t span =
          next->k_ld != 0 ? (d_ - 1) * next->k_ld + next->n
                          : int64_t{next->n - 1} * (next->stride != 0 ? next->stride : d_) + d_;
      const T* nk = static_cast<const T*>(next->k);
      const int64_t span_bytes = span * static_cast<int64_t>(sizeof(T));
      if (sel <= kChunkRows && span_bytes <= (int64_t{1} << 30)) {
        list.assign(1, nk);
        k_pf_bytes = static_cast<int32_t>(span_bytes);
        if (next->k_ld != 0) k_every = sparse_every();
      } else {
        const int64_t n_rows = (span + d_ - 1) / d_, dd = d_;
        list.resize(static_cast<size_t>(n_rows));
        const void** np = list.data();
        for (int64_t i = 0; i < n_rows; ++i) np[i] = nk + i * dd;
      }
    }
    const int32_t n_pf = static_cast<int32_t>(list.size());
    const T* const* pf = reinterpret_cast<const T* const*>(list.data());
    float* s = w_.s.data();
    const T* vp[kChunkRows];
    for (int32_t i0 = 0; i0 < sel; i0 += kChunkRows) {
      const int32_t m = std::min(kChunkRows, sel - i0);
      if (b.idx == nullptr) {
        for (int32_t j = 0; j < m; ++j) vp[j] = v + (i0 + j) * vs;
        if (!in_place)
          for (int32_t g = 0; g < G_; ++g)
            std::copy_n(bs + g * n_alloc + i0, m, s + g * kChunkRows);
      } else {
        for (int32_t j = 0; j < m; ++j) {
          const int32_t r = b.idx[i0 + j];
          vp[j] = v + r * vs;
          for (int32_t g = 0; g < G_; ++g) s[g * kChunkRows + j] = bs[g * n_alloc + r];
        }
      }
      softmax_(s, G_, m, (m + 15) & ~15, w_.m.data(), w_.l.data(), w_.acc.data(), d_);
      const int32_t f0 = static_cast<int32_t>(int64_t{i0} * n_pf / sel);
      const int32_t f1 = static_cast<int32_t>(int64_t{i0 + m} * n_pf / sel);
      // The AVX2 passes prefetch the K span's pieces through their LineStream.
      value_passes(vp, m, pf + f0, avx2_ ? f1 - f0 : std::min(f1 - f0, m), k_pf_bytes, k_every,
                   avx2_);
    }
  }

  // Two chunks: the one being filled and the full one before it, processed once the next is
  // full, so that its K rows can be prefetched during the previous one's values.
  void chunk_full() {
    if (pending_) process(chunks_[fill_ ^ 1], &chunks_[fill_]);
    pending_ = true;
    fill_ ^= 1;
  }

  // Processes `chunk`; `next` (may be null) is the chunk after it, whose K rows are prefetched.
  void process(Chunk& chunk, const Chunk* next) {
    const int32_t nr = chunk.n;
    chunk.n = 0;
    const T** kp_ = chunk.k;
    const T** vp_ = chunk.v;
    // Pad the row count to a multiple of 16 (every pass's R divides 16) with copies of row 0;
    // their scores are overwritten with -inf below, so they weigh exactly 0.
    const int32_t nr_pad = (nr + 15) & ~15;
    for (int32_t j = nr; j < nr_pad; ++j) kp_[j] = kp_[0];
    float* s = w_.s.data();
    // Software prefetch, spread over the compute so the loads overlap it (measured: about 2x
    // the throughput from memory, nothing lost in cache): the score pass prefetches this
    // chunk's V rows, the column sweeps of the values the next chunk's K rows, column by column.
    // With given scores there are no K rows: the next chunk's V rows are prefetched instead.
    // V by tiles: a row's bytes are one piece per tile, so the lists of V rows become lists of
    // pieces (the AVX-512 value passes take pieces of any size; the AVX2 ones, which prefetch
    // columns of rows of d elements, then go through value_pass_stream, whose LineStream takes
    // them too; the score passes take rows of d elements, so there V by tiles is not prefetched).
    int32_t pf_k = next != nullptr ? next->n : 0;
    const T* const* pf_rows = next == nullptr ? nullptr : scored_ ? next->v : next->k;
    int32_t pf_bytes = d_ * static_cast<int32_t>(sizeof(T));
    // Where the next chunk's rows follow each other in their tiles (a whole block's), its V is
    // one range per tile, which the AVX-512 value passes read in address order: sparse
    // prefetches (sparse_every), and one entry per tile for LineStream to count instead of one
    // per row and tile (value offload, 1 thread, 32K context: f32 15.4 -> 19.4 GB/s, bf16 11.7
    // -> 15.5). The AVX2 passes keep the pieces (3% faster there than the ranges).
    const bool pieces = v_tile_ != 0 && scored_;
    int32_t pf_every = 1;
    if (pieces && pf_k > 0) {
      const T* const* nv = next->v;
      bool runs = !avx2_;
      for (int32_t j = 1; j < pf_k && runs; ++j) runs = nv[j] == nv[j - 1] + kVTile;
      if (runs) {
        pf_bytes = v_ranges(nv[0], pf_k, kVTile);
        pf_every = sparse_every();
      } else {
        pf_bytes = v_pieces(pf_k, [=](int32_t j) { return nv[j]; });
      }
      pf_rows = reinterpret_cast<const T* const*>(w_.rows.data());
      pf_k = static_cast<int32_t>(w_.rows.size());
    }
    if (scored_) {
      for (int32_t j = 0; j < nr; ++j)
        for (int32_t g = 0; g < G_; ++g) s[g * kChunkRows + j] = chunk.z[j][g];
    } else {
      for (size_t i = 0; i < passes_.size(); ++i) {
        const Pass& ps = passes_[i];
        ps.fns.score(kp_, nr_pad, w_.qs.data() + ps.h0 * d_, d_, s + ps.h0 * kChunkRows, vp_,
                     i == 0 && v_tile_ == 0 ? nr : 0);
      }
    }
    softmax_(s, G_, nr, nr_pad, w_.m.data(), w_.l.data(), w_.acc.data(), d_);
    value_passes(vp_, nr, pf_rows, pf_k, pf_bytes, pf_every, avx2_ && pieces);
  }

  int32_t G_, d_;
  cpu::HostSoftmax softmax_ =
      cpu::active_isa() >= cpu::Isa::kAvx512 ? cpu::host_softmax_avx512 : &softmax_chunk_avx2;
  cpu::HostColScore<T> cols_ = cols_fn<E>();
  bool avx2_ = cpu::active_isa() < cpu::Isa::kAvx512;  // the AVX2 passes
  int32_t pf_every_ = cpu::host_prefetch_rule().every_f32;
  bool scored_;  // scores given with the blocks: no score pass, K not read
  Scratch& w_;
  std::vector<Pass> passes_;
  Chunk chunks_[2];
  int64_t v_tile_ = 0;    // V layout of the rows held (HostBlockRef::v_tile)
  int fill_ = 0;          // chunk being filled
  bool pending_ = false;  // the other chunk is full and waits for this one
};

// q null: the blocks carry their scores.
template <typename E>
void attend_typed(const float* q, int32_t G, int32_t d, float scale,
                  std::span<const HostBlockRef> blocks, float* o, float* lse) {
  thread_local Scratch scratch;
  GroupAttention<E> ga(q, G, d, scale, scratch);
  for (size_t i = 0; i < blocks.size(); ++i)
    ga.add_block(blocks[i], i + 1 < blocks.size() ? &blocks[i + 1] : nullptr);
  ga.finish(o, lse);
}

// The calls' blocks in turn (block j of every call that has one, then block j + 1): each block's
// "next" is the one after it in that order, so the prefetches cross from one head to the next.
template <typename E>
void attend_gang(int32_t d, float scale, std::span<const HostGroupCall> calls) {
  thread_local std::vector<Scratch> scratch;
  if (scratch.size() < calls.size()) scratch.resize(calls.size());
  std::vector<GroupAttention<E>> ga;
  ga.reserve(calls.size());
  size_t n_max = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    ga.emplace_back(calls[i].q, calls[i].G, d, scale, scratch[i]);
    n_max = std::max(n_max, calls[i].blocks.size());
  }
  // The blocks in that order, each with its call: take() returns the block at (bj, bc) or the first
  // after it and moves past it; null at the end.
  struct At {
    const HostBlockRef* b = nullptr;
    size_t call = 0;
  };
  size_t bj = 0, bc = 0;  // block, call
  auto take = [&]() -> At {
    for (; bj < n_max; ++bj, bc = 0)
      for (; bc < calls.size(); ++bc)
        if (bj < calls[bc].blocks.size()) {
          const At at{&calls[bc].blocks[bj], bc};
          ++bc;
          return at;
        }
    return {};
  };
  At cur = take(), next = take();
  while (cur.b != nullptr) {
    const At after = take();
    // after's ref into L1, which add_block reads as `next` one step from now: the calls' refs are
    // separate arrays visited in turn, and the KV streamed between evicts them (before, a cache
    // miss in every add_block: 2-3% of a call at 32K).
    if (after.b != nullptr) {
      const char* r = reinterpret_cast<const char*>(after.b);
      _mm_prefetch(r, _MM_HINT_T0);
      _mm_prefetch(r + sizeof(HostBlockRef) - 1, _MM_HINT_T0);
    }
    ga[cur.call].add_block(*cur.b, next.b);
    cur = next;
    next = after;
  }
  for (size_t i = 0; i < calls.size(); ++i) ga[i].finish(calls[i].o, calls[i].lse);
}

// Whether the blocks carry given scores (value offload): their first non-empty block says.
bool given_scores(std::span<const HostBlockRef> blocks) {
  for (const HostBlockRef& b : blocks)
    if (b.rows() > 0) return b.s != nullptr;
  return false;
}

// fn(E{}) for the element type E (cpu::F32, F16, BF16) of a KV dtype.
template <class Fn>
void with_kv_type(DType kv_dtype, Fn&& fn) {
  switch (kv_dtype) {
    case DType::kF32:
      return fn(cpu::F32{});
    case DType::kF16:
      return fn(cpu::F16{});
    case DType::kBF16:
      return fn(cpu::BF16{});
    default:
      break;
  }
  TANDEM_CHECK(false, "host attention KV dtype ", dtype_name(kv_dtype));
}

}  // namespace

void host_attend_group(const float* q, int32_t G, int32_t d, float scale, DType kv_dtype,
                       std::span<const HostBlockRef> blocks, float* o, float* lse) {
  TANDEM_CHECK(G >= 1, "host attention G=", G);
  TANDEM_CHECK(d >= 8 && d % 8 == 0, "host attention head_dim ", d, " is not a multiple of 8");
  TANDEM_CHECK(q != nullptr && o != nullptr && lse != nullptr, "host attention null q/o/lse");
  // Blocks with given scores (value offload) take the weighted-value path.
  if (given_scores(blocks)) return host_weighted_values(G, d, kv_dtype, blocks, o, lse);
  with_kv_type(kv_dtype,
               [&](auto e) { attend_typed<decltype(e)>(q, G, d, scale, blocks, o, lse); });
}

void host_attend_groups(int32_t d, float scale, DType kv_dtype,
                        std::span<const HostGroupCall> calls) {
  TANDEM_CHECK(d >= 8 && d % 8 == 0, "host attention head_dim ", d, " is not a multiple of 8");
  bool scored = false;
  for (const HostGroupCall& c : calls) {
    TANDEM_CHECK(c.G >= 1, "host attention G=", c.G);
    TANDEM_CHECK(c.q != nullptr && c.o != nullptr && c.lse != nullptr,
                 "host attention null q/o/lse");
    scored = scored || given_scores(c.blocks);
  }
  if (scored || calls.size() == 1) {
    for (const HostGroupCall& c : calls)
      host_attend_group(c.q, c.G, d, scale, kv_dtype, c.blocks, c.o, c.lse);
    return;
  }
  with_kv_type(kv_dtype, [&](auto e) { attend_gang<decltype(e)>(d, scale, calls); });
}

void host_weighted_values(int32_t G, int32_t d, DType kv_dtype,
                          std::span<const HostBlockRef> blocks, float* o, float* lse) {
  TANDEM_CHECK(G >= 1, "host attention G=", G);
  TANDEM_CHECK(d >= 8 && d % 8 == 0, "host attention head_dim ", d, " is not a multiple of 8");
  TANDEM_CHECK(o != nullptr && lse != nullptr, "host attention null o/lse");
  with_kv_type(kv_dtype,
               [&](auto e) { attend_typed<decltype(e)>(nullptr, G, d, 1.0f, blocks, o, lse); });
}

int64_t host_kv_bytes(std::span<const HostBlockRef> blocks, int32_t d, DType kv_dtype) {
  int64_t rows = 0;
  for (const HostBlockRef& b : blocks) {
    if (b.rows() == 0) continue;
    // A column-stored K is read whole (every row of the block is scored).
    const int64_t k_rows = b.s != nullptr ? 0 : b.k_ld != 0 ? b.n : b.rows();
    rows += b.rows() + k_rows;
  }
  return rows * d * dtype_size(kv_dtype);
}

}  // namespace tandem
