// probe_widen: what widening bf16 to f32 costs the host kernel's arithmetic, without the kernel.
// Each thread reads its slice of a layer 256 bytes per step and does, per step, the arithmetic of
// the f32 or bf16 cols pass at G = 4 (four q broadcasts, each times every loaded vector):
//   stream      the plain read (the four vectors added)
//   f32         f32 values: 16 FMAs per 256 bytes
//   bf_shift    bf16 pairs widened as the AVX-512 passes do (even values shifted up, odd ones
//               masked): 4 shifts, 4 ANDs and 32 FMAs per 256 bytes
//   bf_unpack   the even and odd values interleaved with zeros instead (vpunpck{l,h}wd)
//   bf_and      both halves masked (wrong values, timing only: what the FMAs cost alone)
//   bf_ld2      even values read by an unaligned load 2 bytes lower, then masked: exact, no shift
//   bf_dp       VDPBF16PS with q as bf16 pairs: 16 instructions per 256 bytes (a precision change)
// and the same with a software prefetch of every line 32 KB ahead into L1 (`_pf`), as Zen 5's
// rule has it. One JSON line of GB/s per round (best of 3 calls from memory, of 200 from the
// caches). docs/host-attention.md, 2026-12-07, twenty-second session.
//   g++ -O3 -std=c++20 -march=x86-64-v3 -pthread scripts/probe_widen.cpp -o /tmp/probe_widen
//   /tmp/probe_widen [rounds [threads [bytes per layer]]]   (bytes < 256 MB: one layer, cached)
// Needs AVX-512 with BF16 (the functions carry their target attribute).
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() placeholders
// (kernels/cpu/host_kernel_avx512.cpp).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#define PROBE_TARGET __attribute__((target("avx2,fma,avx512f,avx512bw,avx512vl,avx512bf16")))

namespace {

constexpr size_t kLayer = size_t{256} << 20;
constexpr int kDist = 32 << 10;  // prefetch distance of the _pf variants
alignas(64) float g_q[512];
alignas(64) uint32_t g_q2[512];  // bf16 pairs of q for bf_dp

enum Mode { kStream, kF32, kShift, kUnpack, kAnd, kLd2, kDp };

template <Mode M, bool kPf>
PROBE_TARGET float body(const char* b, const char* e) {
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i zero = _mm512_setzero_si512();
  int qi = 0;
  for (const char* p = b; p < e; p += 256) {
    if constexpr (kPf)
      for (int l = 0; l < 4; ++l) _mm_prefetch(p + kDist + 64 * l, _MM_HINT_T0);
    __m512i x[4];
    for (int l = 0; l < 4; ++l) x[l] = _mm512_loadu_si512(p + 64 * l);
    if constexpr (M == kStream) {
      for (int l = 0; l < 4; ++l) acc[l] = _mm512_add_ps(acc[l], _mm512_castsi512_ps(x[l]));
    } else if constexpr (M == kF32) {
      for (int g = 0; g < 4; ++g) {
        const __m512 qb = _mm512_set1_ps(g_q[(qi + g) & 511]);
        for (int l = 0; l < 4; ++l)
          acc[g * 4 + l] = _mm512_fmadd_ps(qb, _mm512_castsi512_ps(x[l]), acc[g * 4 + l]);
      }
      qi += 4;
    } else if constexpr (M == kDp) {
      for (int g = 0; g < 4; ++g) {
        const __m512bh qb = (__m512bh)_mm512_set1_epi32(static_cast<int>(g_q2[(qi + g) & 511]));
        for (int l = 0; l < 4; ++l)
          acc[g * 4 + l] = _mm512_dpbf16_ps(acc[g * 4 + l], qb, (__m512bh)x[l]);
      }
      qi += 4;
    } else {
      // 64 bf16 values per half step (two vectors), as the cols pass reads one channel.
      for (int h = 0; h < 2; ++h) {
        __m512 v[4];
        for (int l = 0; l < 2; ++l) {
          const __m512i xx = x[2 * h + l];
          __m512i ev, od = _mm512_and_si512(xx, hi);
          if constexpr (M == kShift) {
            ev = _mm512_slli_epi32(xx, 16);
          } else if constexpr (M == kUnpack) {
            ev = _mm512_unpacklo_epi16(zero, xx);
            od = _mm512_unpackhi_epi16(zero, xx);
          } else if constexpr (M == kAnd) {
            ev = od;
          } else {  // kLd2: 2 bytes lower, each even value lands in its word's high half
            ev = _mm512_and_si512(_mm512_loadu_si512(p + 64 * (2 * h + l) - 2), hi);
          }
          v[2 * l] = _mm512_castsi512_ps(ev);
          v[2 * l + 1] = _mm512_castsi512_ps(od);
        }
        for (int g = 0; g < 4; ++g) {
          const __m512 qb = _mm512_set1_ps(g_q[(qi + g) & 511]);
          for (int l = 0; l < 4; ++l) acc[g * 4 + l] = _mm512_fmadd_ps(qb, v[l], acc[g * 4 + l]);
        }
        qi += 4;
      }
    }
  }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

struct Variant {
  const char* name;
  float (*fn)(const char*, const char*);
};
const Variant kVariants[] = {
    {"stream", body<kStream, false>},    {"f32", body<kF32, false>},
    {"f32_pf", body<kF32, true>},        {"bf_shift", body<kShift, false>},
    {"bf_shift_pf", body<kShift, true>}, {"bf_unpack", body<kUnpack, false>},
    {"bf_and", body<kAnd, false>},       {"bf_ld2", body<kLd2, false>},
    {"bf_ld2_pf", body<kLd2, true>},     {"bf_dp", body<kDp, false>},
    {"bf_dp_pf", body<kDp, true>}};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 5;
  const int threads = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  const size_t bytes =
      argc > 3 ? std::min<size_t>(std::strtoull(argv[3], nullptr, 10), kLayer) : kLayer;
  const bool cached = bytes < kLayer;
  // Four layers rotated from memory; one from the caches. A margin past the end for the
  // prefetches and 64 bytes before the start for bf_ld2's first load.
  const size_t alloc = kLayer + (size_t{2} << 20);
  std::vector<char*> layers(cached ? 1 : 4);
  for (char*& l : layers) {
    l = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, alloc));
    madvise(l, alloc, MADV_HUGEPAGE);
    // bf16 values 0.0078-0.0156, which read as f32 are small numbers too.
    for (size_t i = 0; i < alloc / 2; ++i)
      reinterpret_cast<uint16_t*>(l)[i] = static_cast<uint16_t>(0x3c00 + i % 97);
    l += 64;
  }
  for (int i = 0; i < 512; ++i) g_q[i] = 0.01f, g_q2[i] = 0x3c233c23u;
  volatile float sink = 0;
  int rot = 0;
  const size_t slice = bytes / static_cast<size_t>(threads) / 256 * 256;
  for (int r = 0; r < rounds; ++r) {
    std::printf("{\"threads\":%d,\"bytes\":%zu", threads, bytes);
    for (const Variant& v : kVariants) {
      double best = 1e30;
      const int calls = cached ? 200 : 3;
      for (int c = 0; c < calls; ++c) {
        const char* l = layers[static_cast<size_t>(rot++) % layers.size()];
        std::vector<float> out(static_cast<size_t>(threads));
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::thread> pool;
        for (int t = 1; t < threads; ++t)
          pool.emplace_back([&, t] { out[t] = v.fn(l + t * slice, l + (t + 1) * slice); });
        out[0] = v.fn(l, l + slice);
        for (std::thread& th : pool) th.join();
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        for (float o : out) sink = sink + o;
      }
      std::printf(",\"%s\":%.1f", v.name, static_cast<double>(slice) * threads / best / 1e9);
    }
    std::printf("}\n");
    std::fflush(stdout);
  }
  for (char* l : layers) std::free(l - 64);
}
