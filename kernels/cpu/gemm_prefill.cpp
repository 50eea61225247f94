// The prefill matrix product (kernels/cpu/gemm_prefill.h): x packing, blocking and the oneTBB
// task split, shared by every path, and the AVX2 micro-kernel (6 weight rows x 16 x rows: 12 ymm
// accumulators, 2 x vectors and a broadcast in the 16 registers).
#include "kernels/cpu/gemm_prefill.h"

#include <algorithm>
#include <array>
#include <utility>
#include <vector>

#include "kernels/common.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace tandem::cpu {
namespace {

constexpr int kMrAvx2 = 6;
constexpr int kNrAvx2 = 16;
constexpr int kMaxMr = 16;  // the largest mr of any path

template <int R, int NV>
void micro_avx2(const float* w, int64_t ldw, const float* xp, int64_t kc, float* t, int64_t ldt,
                bool accumulate) {
  __m256 c[R][NV];
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v)
      c[r][v] = accumulate ? _mm256_loadu_ps(t + r * ldt + 8 * v) : _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    const float* xq = xp + p * kNrAvx2;
    __m256 xv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) xv[v] = _mm256_loadu_ps(xq + 8 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const __m256 b = _mm256_broadcast_ss(w + r * ldw + p);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) c[r][v] = _mm256_fmadd_ps(b, xv[v], c[r][v]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) _mm256_storeu_ps(t + r * ldt + 8 * v, c[r][v]);
}

using MicroF32 = void (*)(const float*, int64_t, const float*, int64_t, float*, int64_t, bool);

template <int NV, int... R>
constexpr std::array<MicroF32, sizeof...(R)> avx2_table(std::integer_sequence<int, R...>) {
  return {&micro_avx2<R + 1, NV>...};
}

void kernel_avx2(int rows, int nv, const float* w, int64_t ldw, const float* xp, int64_t kc,
                 float* t, int64_t ldt, bool accumulate) {
  static constexpr auto one = avx2_table<1>(std::make_integer_sequence<int, kMrAvx2>());
  static constexpr auto two = avx2_table<2>(std::make_integer_sequence<int, kMrAvx2>());
  (nv == 1 ? one : two)[static_cast<size_t>(rows - 1)](w, ldw, xp, kc, t, ldt, accumulate);
}

constexpr int64_t kPackChunk = 512;  // columns of x per packing task (a multiple of 16)

// Runs f(panel, c0, c1) over every panel of nr rows and chunk of kPackChunk columns, in parallel.
template <typename F>
void for_pack_blocks(int64_t n, int64_t k, int nr, const F& f) {
  const int64_t panels = (n + nr - 1) / nr, chunks = (k + kPackChunk - 1) / kPackChunk;
  tandem::parallel_for(int64_t{0}, panels * chunks, [&](int64_t t) {
    const int64_t c0 = t % chunks * kPackChunk;
    f(t / chunks, c0, std::min(k, c0 + kPackChunk));
  });
}

// In place: r[c] becomes column c of the 8 x 8 matrix whose rows are r[0..7].
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], 0x44);
    u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h + 0], t[4 * h + 2], 0xee);
    u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
    u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xee);
  }
  for (int i = 0; i < 4; ++i) {
    r[i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x20);
    r[4 + i] = _mm256_permute2f128_ps(u[i], u[4 + i], 0x31);
  }
}

// xp[(panel * k + p) * nr + i] = x[panel * nr + i, p], zero past row n. Groups of 8 rows x 8
// columns are transposed in registers.
void pack_x_f32(const float* x, int64_t ldx, int64_t n, int64_t k, int nr, float* xp) {
  for_pack_blocks(n, k, nr, [&](int64_t pa, int64_t c0, int64_t c1) {
    float* out = xp + pa * k * nr;
    for (int g = 0; g < nr; g += 8) {
      const int64_t row0 = pa * nr + g;
      int64_t p = c0;
      if (row0 + 8 <= n) {
        for (; p + 8 <= c1; p += 8) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(x + (row0 + i) * ldx + p);
          transpose8(r);
          for (int c = 0; c < 8; ++c) _mm256_storeu_ps(out + (p + c) * nr + g, r[c]);
        }
      }
      for (; p < c1; ++p)
        for (int i = 0; i < 8; ++i)
          out[p * nr + g + i] = row0 + i < n ? x[(row0 + i) * ldx + p] : 0.0f;
    }
  });
}

// Each lane of v rounded to bf16 (round to nearest even, NaNs kept quiet: bit for bit as
// f32_to_bf16 and store8_bf16), in the low 16 bits of its 32-bit lane.
inline __m256i round8_bf16(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i hi = _mm256_srli_epi32(u, 16);
  const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  const __m256i r =
      _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)), 16);
  const __m256i nan_bits = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  const __m256 is_nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return _mm256_blendv_epi8(r, nan_bits, _mm256_castps_si256(is_nan));
}

// 16 floats as 16 bf16 in order: eight 32-bit lanes, lane j the pair of columns (2j, 2j + 1).
inline __m256i pairs8_bf16(const float* p) {
  // packus interleaves the 128-bit halves of its operands: [a0-3 b0-3 | a4-7 b4-7] -> reorder.
  const __m256i packed =
      _mm256_packus_epi32(round8_bf16(_mm256_loadu_ps(p)), round8_bf16(_mm256_loadu_ps(p + 8)));
  return _mm256_permute4x64_epi64(packed, 0xd8);
}

// xb[((panel * kq + q) * nr + i) * 2 + h] = bf16(x[panel * nr + i, 2q + h]) (round to nearest
// even), zero past row n and past column k; kq = ceil(k / 2). Groups of 8 rows x 8 pairs are
// transposed in registers.
void pack_x_bf16(const float* x, int64_t ldx, int64_t n, int64_t k, int nr, uint16_t* xb) {
  const int64_t kq = (k + 1) / 2;
  for_pack_blocks(n, k, nr, [&](int64_t pa, int64_t c0, int64_t c1) {
    uint32_t* out = reinterpret_cast<uint32_t*>(xb) + pa * kq * nr;
    for (int g = 0; g < nr; g += 8) {
      const int64_t row0 = pa * nr + g;
      int64_t p = c0;
      if (row0 + 8 <= n) {
        for (; p + 16 <= c1; p += 16) {
          __m256 r[8];
          for (int i = 0; i < 8; ++i)
            r[i] = _mm256_castsi256_ps(pairs8_bf16(x + (row0 + i) * ldx + p));
          transpose8(r);
          for (int c = 0; c < 8; ++c)
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + (p / 2 + c) * nr + g),
                                _mm256_castps_si256(r[c]));
        }
      }
      for (; p < c1; p += 2)
        for (int i = 0; i < 8; ++i) {
          uint32_t v = 0;
          if (row0 + i < n) {
            const float* xr = x + (row0 + i) * ldx;
            v = f32_to_bf16(xr[p]);
            if (p + 1 < k) v |= static_cast<uint32_t>(f32_to_bf16(xr[p + 1])) << 16;
          }
          out[p / 2 * nr + g + i] = v;
        }
    }
  });
}

// One task: weight rows [j0, j0 + rows) x x rows [i0, i0 + cols), all of k, into `tile`
// ([mc][ldt], ldt = nc + 16), then into y (+ bias).
struct Task {
  const PrefillPath& path;
  DType wt;
  const void* w;
  int64_t k;
  const float* xf;     // packed f32 x (or null)
  const uint16_t* xb;  // packed bf16 x (or null)
  const float* bias;
  float* y;
  int64_t ldy;

  void run(int64_t j0, int64_t rows, int64_t i0, int64_t cols) const {
    thread_local std::vector<float> tile_buf, wbuf;
    // A row stride of nc + 16 floats: at nc (a power of two times 64 bytes) the rows of a tile
    // column fell into a few L1 sets, and the transpose below missed on every row.
    const int64_t ldt = path.nc + 16;
    tile_buf.resize(static_cast<size_t>(path.mc * ldt));
    wbuf.resize(static_cast<size_t>(path.mr * path.kc));
    float* tile = tile_buf.data();
    const int nr = path.nr;
    const int64_t panel0 = i0 / nr, panels = (cols + nr - 1) / nr;
    const int64_t kq = (k + 1) / 2;
    auto nv_of = [&](int64_t pi) {
      const int64_t c = std::min<int64_t>(nr, cols - pi * nr);
      return static_cast<int>((c + path.lanes - 1) / path.lanes);
    };
    for (int64_t kb = 0; kb < k; kb += path.kc) {
      const int64_t len = std::min(path.kc, k - kb);
      for (int64_t r = 0; r < rows; r += path.mr) {
        const int rr = static_cast<int>(std::min<int64_t>(path.mr, rows - r));
        float* t = tile + r * ldt;
        if (xb != nullptr) {
          const uint16_t* wp = static_cast<const uint16_t*>(w) + (j0 + r) * k + kb;
          const int64_t full = len / 2;
          for (int64_t pi = 0; pi < panels; ++pi)
            path.bf16(rr, nv_of(pi), wp, k, xb + ((panel0 + pi) * kq + kb / 2) * nr * 2, full,
                      t + pi * nr, ldt, kb > 0);
          if (len % 2 != 0) {  // k odd: the last weight of each row paired with a zero
            uint16_t tail[2 * kMaxMr];
            for (int q = 0; q < rr; ++q) {
              tail[2 * q] = wp[q * k + len - 1];
              tail[2 * q + 1] = 0;
            }
            for (int64_t pi = 0; pi < panels; ++pi)
              path.bf16(rr, nv_of(pi), tail, 2, xb + ((panel0 + pi) * kq + kq - 1) * nr * 2, 1,
                        t + pi * nr, ldt, kb > 0 || full > 0);
          }
          continue;
        }
        const float* wp = nullptr;
        int64_t ldw = len;
        if (wt == DType::kF32) {
          wp = static_cast<const float*>(w) + (j0 + r) * k + kb;
          ldw = k;
        } else {
          const uint16_t* src = static_cast<const uint16_t*>(w) + (j0 + r) * k + kb;
          for (int q = 0; q < rr; ++q) {
            if (wt == DType::kF16) {
              convert_to_f32<F16>(src + q * k, wbuf.data() + q * len, len);
            } else {
              convert_to_f32<BF16>(src + q * k, wbuf.data() + q * len, len);
            }
          }
          wp = wbuf.data();
        }
        for (int64_t pi = 0; pi < panels; ++pi)
          path.f32(rr, nv_of(pi), wp, ldw, xf + ((panel0 + pi) * k + kb) * nr, len, t + pi * nr,
                   ldt, kb > 0);
      }
    }
    store_tile(tile, ldt, rows, cols, bias != nullptr ? bias + j0 : nullptr, y + i0 * ldy + j0);
  }

  // y[i * ldy + r] = tile[r * ldt + i] (+ b[r]) for r < rows, i < cols: 8 x 8 blocks transposed
  // in registers, the edges one element at a time.
  void store_tile(const float* tile, int64_t ldt, int64_t rows, int64_t cols, const float* b,
                  float* yt) const {
    const int64_t r8 = rows & ~int64_t{7}, c8 = cols & ~int64_t{7};
    for (int64_t r = 0; r < r8; r += 8) {
      // The rows' bias, loaded once per 8 rows (the compiler cannot hoist it past the stores).
      const __m256 bv = b != nullptr ? _mm256_loadu_ps(b + r) : _mm256_setzero_ps();
      for (int64_t i = 0; i < c8; i += 8) {
        __m256 v[8];
        for (int a = 0; a < 8; ++a) v[a] = _mm256_loadu_ps(tile + (r + a) * ldt + i);
        transpose8(v);
        if (b != nullptr)  // (no + 0 without a bias: -0 stays -0, as on the edges)
          for (int a = 0; a < 8; ++a) v[a] = _mm256_add_ps(v[a], bv);
        for (int a = 0; a < 8; ++a) _mm256_storeu_ps(yt + (i + a) * ldy + r, v[a]);
      }
    }
    for (int64_t i = 0; i < cols; ++i) {
      float* yr = yt + i * ldy;
      for (int64_t r = i < c8 ? r8 : 0; r < rows; ++r)
        yr[r] = b != nullptr ? tile[r * ldt + i] + b[r] : tile[r * ldt + i];
    }
  }
};

}  // namespace

PrefillPath prefill_path_avx2() {
  PrefillPath p;
  p.mr = kMrAvx2;
  p.lanes = 8;
  p.nr = kNrAvx2;
  p.kc = 256;
  p.mc = 96;
  p.nc = 192;
  p.f32 = &kernel_avx2;
  return p;
}

void matmul_prefill(Isa isa, DType wt, const void* w, int64_t m, int64_t k, const float* x,
                    int64_t ldx, int64_t n, const float* bias, float* y, int64_t ldy) {
  if (k == 0) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < m; ++j) y[i * ldy + j] = bias != nullptr ? bias[j] : 0.0f;
    return;
  }
  const PrefillPath path = isa == Isa::kAvx512Bf16 ? prefill_path_avx512bf16()
                           : isa == Isa::kAvx512   ? prefill_path_avx512()
                                                   : prefill_path_avx2();
  const bool bf16x = wt == DType::kBF16 && path.bf16 != nullptr;
  // The packed x, kept by the calling thread between calls (workers see it through pointers).
  thread_local std::vector<float> xf_buf;
  thread_local std::vector<uint16_t> xb_buf;
  const int64_t panels = (n + path.nr - 1) / path.nr;
  Task task{path, wt, w, k, nullptr, nullptr, bias, y, ldy};
  if (bf16x) {
    xb_buf.resize(static_cast<size_t>(panels * ((k + 1) / 2) * path.nr * 2));
    pack_x_bf16(x, ldx, n, k, path.nr, xb_buf.data());
    task.xb = xb_buf.data();
  } else {
    xf_buf.resize(static_cast<size_t>(panels * k * path.nr));
    pack_x_f32(x, ldx, n, k, path.nr, xf_buf.data());
    task.xf = xf_buf.data();
  }
  const int64_t tm = (m + path.mc - 1) / path.mc, tn = (n + path.nc - 1) / path.nc;
  tandem::parallel_for_range(
      tbb::blocked_range<int64_t>(0, tm * tn, 1), [&](const tbb::blocked_range<int64_t>& br) {
        for (int64_t t = br.begin(); t < br.end(); ++t) {
          const int64_t j0 = t % tm * path.mc, i0 = t / tm * path.nc;
          task.run(j0, std::min(path.mc, m - j0), i0, std::min(path.nc, n - i0));
        }
      });
}

}  // namespace tandem::cpu
