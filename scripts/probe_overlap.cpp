// probe_overlap: does a core overlap its memory stream with FMA work, and what do extra loads per
// FMA cost in cache? A synthetic loop, not the host kernel: it reads 64 KB per block (two 32 KB
// runs, as a head's K and V of a 64-row f32 block) and does per cache line
//   read      the two 256-bit loads alone
//   fma8      8 FMAs on 8 independent accumulators (the f32 host kernel's FMAs per byte, G = 4)
//   fma16     16 FMAs (bf16's FMAs per byte)
//   fma8bc    8 FMAs and 4 broadcasts from a small array (the kernel's loads per FMA)
// from memory (blocks at 512 KB strides, as the host store interleaves 8 heads, or contiguous) or
// from L2 (3 blocks reused). One thread; prints one JSON line per variant, GB/s median and best.
// "sweeps": the second 32 KB run (V) read as the AVX-512 value pass reads a 64-row block for 4
// heads, channels 0-63 of every 512-byte row, then channels 64-127 (the first run, K, stays in
// address order as the cols pass reads it); without software prefetch this is what the hardware
// prefetchers see (docs/host-attention.md, 2026-11-29, eleventh session).
//   g++ -O2 -mavx2 -mfma scripts/probe_overlap.cpp -o /tmp/probe_overlap && /tmp/probe_overlap
// (docs/host-attention.md, 2026-11-28.)
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kStride = 512 << 10, kRun = 32 << 10, kBlocks = 1024;  // 512 MB

enum Work { kRead, kFma8, kFma16, kFma8Bc };
const char* const kNames[] = {"read", "fma8", "fma16", "fma8bc"};

template <Work W>
double pass(const char* mem, size_t blocks, int head, bool strided, bool prefetch, bool sweeps,
            const float* pw, float* sink) {
  const auto t0 = std::chrono::steady_clock::now();
  const __m256 w = _mm256_set1_ps(1.0001f);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  for (size_t b = 0; b < blocks; ++b)
    for (int part = 0; part < 2; ++part) {
      auto at = [&](size_t blk) {
        return strided ? mem + blk * kStride + part * (kStride / 2) + head * kRun
                       : mem + (blk * 2 + part) * kRun + head * (kBlocks * 2 * kRun / 8);
      };
      const float* p = reinterpret_cast<const float*>(at(b));
      const char* next = at(std::min(b + 1, blocks - 1));
      for (size_t i = 0; i < kRun / 4; i += 16) {  // one cache line per step
        if (prefetch) _mm_prefetch(next + i * 4, _MM_HINT_T0);
        // Line l of the run in sweep order: half h = l / 256 of row (l % 256) / 4.
        const size_t l = i / 16;
        const size_t e = sweeps && part == 1 ? ((l % 256) / 4 * 8 + l / 256 * 4 + l % 4) * 16 : i;
        const __m256 v0 = _mm256_load_ps(p + e), v1 = _mm256_load_ps(p + e + 8);
        if constexpr (W == kRead) {
          a0 = _mm256_add_ps(a0, v0);
          a1 = _mm256_add_ps(a1, v1);
        } else if constexpr (W == kFma8Bc) {
          const float* pj = pw + ((i >> 4) & 63);
          const __m256 w0 = _mm256_broadcast_ss(pj), w1 = _mm256_broadcast_ss(pj + 64);
          const __m256 w2 = _mm256_broadcast_ss(pj + 128), w3 = _mm256_broadcast_ss(pj + 192);
          a0 = _mm256_fmadd_ps(w0, v0, a0), a1 = _mm256_fmadd_ps(w1, v0, a1);
          a2 = _mm256_fmadd_ps(w2, v0, a2), a3 = _mm256_fmadd_ps(w3, v0, a3);
          a4 = _mm256_fmadd_ps(w0, v1, a4), a5 = _mm256_fmadd_ps(w1, v1, a5);
          a6 = _mm256_fmadd_ps(w2, v1, a6), a7 = _mm256_fmadd_ps(w3, v1, a7);
        } else {
          a0 = _mm256_fmadd_ps(w, v0, a0), a1 = _mm256_fmadd_ps(w, v0, a1);
          a2 = _mm256_fmadd_ps(w, v0, a2), a3 = _mm256_fmadd_ps(w, v0, a3);
          a4 = _mm256_fmadd_ps(w, v1, a4), a5 = _mm256_fmadd_ps(w, v1, a5);
          a6 = _mm256_fmadd_ps(w, v1, a6), a7 = _mm256_fmadd_ps(w, v1, a7);
          if constexpr (W == kFma16) {
            a0 = _mm256_fmadd_ps(w, v1, a0), a1 = _mm256_fmadd_ps(w, v1, a1);
            a2 = _mm256_fmadd_ps(w, v1, a2), a3 = _mm256_fmadd_ps(w, v1, a3);
            a4 = _mm256_fmadd_ps(w, v0, a4), a5 = _mm256_fmadd_ps(w, v0, a5);
            a6 = _mm256_fmadd_ps(w, v0, a6), a7 = _mm256_fmadd_ps(w, v0, a7);
          }
        }
      }
    }
  const auto t1 = std::chrono::steady_clock::now();
  alignas(32) float v[8];
  _mm256_store_ps(v, _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                                   _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7))));
  *sink += v[0];
  return std::chrono::duration<double>(t1 - t0).count();
}

template <Work W>
void run(const char* mem, const float* pw, const char* where, bool strided, bool prefetch,
         bool sweeps = false) {
  const bool l2 = !std::strcmp(where, "l2");
  const size_t blocks = l2 ? 3 : kBlocks;
  const int reps = l2 ? 2001 : 9;
  std::vector<double> t;
  float sink = 0;
  for (int r = 0; r < reps; ++r)
    t.push_back(pass<W>(mem, blocks, l2 ? 0 : r % 8, strided, prefetch, sweeps, pw, &sink));
  std::sort(t.begin(), t.end());
  const double bytes = static_cast<double>(blocks * 2 * kRun);
  std::printf(
      "{\"work\": \"%s\", \"from\": \"%s\", \"strided\": %s, \"prefetch\": %s, "
      "\"v_sweeps\": %s, \"gbs_median\": %.2f, \"gbs_best\": %.2f, \"sink\": %g}\n",
      kNames[W], where, strided ? "true" : "false", prefetch ? "true" : "false",
      sweeps ? "true" : "false", bytes / t[t.size() / 2] / 1e9, bytes / t.front() / 1e9,
      static_cast<double>(sink));
  std::fflush(stdout);
}

}  // namespace

int main() {
  char* mem = static_cast<char*>(std::aligned_alloc(4096, kStride * kBlocks));
  std::memset(mem, 1, kStride * kBlocks);
  alignas(64) static float pw[256];
  for (int i = 0; i < 256; ++i) pw[i] = 1.0f + static_cast<float>(i) * 1e-6f;
  for (const char* where : {"l2", "memory"})
    for (bool strided : {false, true}) {
      if (!std::strcmp(where, "l2") && strided) continue;
      for (bool prefetch : {false, true}) {
        if (!std::strcmp(where, "l2") && prefetch) continue;
        run<kRead>(mem, pw, where, strided, prefetch);
        run<kFma8>(mem, pw, where, strided, prefetch);
        run<kFma16>(mem, pw, where, strided, prefetch);
        run<kFma8Bc>(mem, pw, where, strided, prefetch);
      }
    }
  // The value pass's order against address order, hardware prefetchers alone, read and fma8
  // alternated so that both meet the same minutes of the memory's speed.
  for (int r = 0; r < 3; ++r)
    for (bool sweeps : {false, true}) {
      run<kRead>(mem, pw, "memory", false, false, sweeps);
      run<kFma8>(mem, pw, "memory", false, false, sweeps);
    }
  std::free(mem);
}
