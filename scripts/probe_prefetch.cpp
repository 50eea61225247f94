// probe_prefetch: what software prefetches to L2 do to a plain read that the hardware prefetchers
// already follow. Two threads each read half of a 256 MB layer in address order (four layers
// rotated, so nothing comes from L3), 256 bytes per step, and per step either add the four
// vectors (`stream`) or do the f32 host kernel's arithmetic at G = 4 (`fma`: four broadcasts and
// 16 FMAs per 256 bytes; `fma2`: twice that, bf16's FMAs per byte), with or without a software
// prefetch to L2 of the lines `dist` bytes ahead: every line (`_pf<dist>`), the first of every two
// (`_even`) or of every four (`_q`). Per round, one JSON line of GB/s (best of three calls).
// docs/host-attention.md, 2026-11-29, fourteenth session: in the VM's fast minutes a prefetch of
// every line 32 KB ahead took `fma` from ~52 to ~41 GB/s, one in four lines gave ~56. Build and
// run (AVX-512 machine):
//   g++ -O3 -std=c++20 -march=x86-64-v4 -pthread scripts/probe_prefetch.cpp -o /tmp/probe_prefetch
//   [PROBE_HUGE_PAGES=1] /tmp/probe_prefetch [rounds]   (2 MiB pages with the variable set)
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
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "probe_second.h"

namespace {

constexpr size_t kLayer = 256u << 20;

struct Variant {
  const char* name;
  int dist;   // bytes ahead of the read; 0: no software prefetch
  int fma;    // 0: adds only; 1: 16 FMAs per 256 bytes; 2: 32
  int every;  // lines per prefetch: 1, 2 or 4
};

const Variant kVariants[] = {{"stream", 0, 0, 1},
                             {"fma", 0, 1, 1},
                             {"fma_pf512", 512, 1, 1},
                             {"fma_pf2k", 2048, 1, 1},
                             {"fma_pf8k", 8192, 1, 1},
                             {"fma_pf32k", 32768, 1, 1},
                             {"fma_pf32k_even", 32768, 1, 2},
                             {"fma_pf32k_q", 32768, 1, 4},
                             {"fma2", 0, 2, 1},
                             {"fma2_pf32k", 32768, 2, 1},
                             {"fma2_pf32k_q", 32768, 2, 4}};

alignas(64) float g_q[64];

template <int kFma, int kEvery>
float body(const char* layer, int t, int dist) {
  __m512 a[16];
  for (__m512& x : a) x = _mm512_setzero_ps();
  const size_t slice = kLayer / 2;
  const char* end = layer + (t + 1) * slice;
  for (const char* p = layer + t * slice; p < end; p += 256) {
    if (dist != 0)
      for (int z = 0; z < 4; z += kEvery)
        if (p + dist + 64 * z < end) _mm_prefetch(p + dist + 64 * z, _MM_HINT_T2);
    __m512 x[4];
#pragma GCC unroll 4
    for (int z = 0; z < 4; ++z) x[z] = _mm512_load_ps(reinterpret_cast<const float*>(p + 64 * z));
    if constexpr (kFma == 0) {
#pragma GCC unroll 4
      for (int z = 0; z < 4; ++z) a[z] = _mm512_add_ps(a[z], x[z]);
    } else {
      const int w = static_cast<int>(((p - layer) >> 8) & 15);
#pragma GCC unroll 8
      for (int g = 0; g < 4 * kFma; ++g) {
        const __m512 b = _mm512_set1_ps(g_q[g + w]);
#pragma GCC unroll 4
        for (int z = 0; z < 4; ++z)
          a[(g & 3) * 4 + z] = _mm512_fmadd_ps(b, x[z], a[(g & 3) * 4 + z]);
      }
    }
  }
  __m512 s = a[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  return _mm512_reduce_add_ps(s);
}

template <int kFma>
float with_every(const Variant& v, const char* layer, int t) {
  switch (v.every) {
    case 2:
      return body<kFma, 2>(layer, t, v.dist);
    case 4:
      return body<kFma, 4>(layer, t, v.dist);
    default:
      return body<kFma, 1>(layer, t, v.dist);
  }
}

float run(const Variant& v, const char* layer, int t) {
  switch (v.fma) {
    case 1:
      return with_every<1>(v, layer, t);
    case 2:
      return with_every<2>(v, layer, t);
    default:
      return with_every<0>(v, layer, t);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10;
  const bool huge = std::getenv("PROBE_HUGE_PAGES") != nullptr;
  char* layers[4];
  for (char*& l : layers) {
    // PROBE_HUGE_PAGES set: 2 MiB pages (as the host store's pool), else 4 KiB ones.
    l = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, kLayer));
    madvise(l, kLayer, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    std::memset(l, 1, kLayer);
  }
  for (float& q : g_q) q = 0.001f;
  volatile float sink = 0;
  SecondThread second;
  int rot = 0;
  for (int r = 0; r < rounds; ++r) {
    std::printf("{\"unix_time\":%lld", static_cast<long long>(std::time(nullptr)));
    for (const Variant& v : kVariants) {
      double best = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        const char* layer = layers[(rot++ + r) % 4];  // each variant meets every layer
        const auto t0 = std::chrono::steady_clock::now();
        second.start([&v, layer] { return run(v, layer, 1); });
        const float s0 = run(v, layer, 0);
        sink = sink + s0 + second.wait();
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf(",\"%s\":%.1f", v.name, kLayer / best / 1e9);
    }
    std::printf("}\n");
    std::fflush(stdout);
  }
  for (char* l : layers) std::free(l);
}
