// probe_pattern: the host kernel's memory access pattern without the kernel. Two threads read a
// layer laid out as the host store keeps it (512 blocks of 512 KB: 8 KV heads' K by channel, 32 KB
// each, then their V by row), in parts of 64 blocks taken in turn, each block's heads in turn (K of
// head h, then its V), with the f32 kernel's arithmetic at G = 4: per K channel four 64-byte loads,
// four q broadcasts and 16 FMAs; per V row half four loads, four p broadcasts and 16 FMAs, the V
// block in two column sweeps (channels 0-63 of every row, then 64-127), as the AVX-512 passes read
// it. Four layers of 256 MB are rotated, so nothing comes from L3. Per round, one JSON line of GB/s
// (best of three calls) for:
//   stream     the plain read of the same bytes (one slice per thread), as bench-cpu-attn's probe
//   kernel     the kernel's order and software prefetches (to L2: the block's V during its K, the
//              next head's K during V)
//   no_pf      the kernel's order without software prefetches (hardware prefetchers only)
//   loads      the kernel's order and prefetches, loads only (no FMAs)
//   addr_no_pf V read in address order, no software prefetch (the arithmetic as `kernel`, the rows
//              visited in another order: what a V stored by 64-column tiles would be read as)
//   addr_state addr_no_pf with q, scores and accumulators per head, kept as the kernel keeps them
//   addr_soft  addr_state and a softmax-like step between each head's K and V
//   kernel_l1  `kernel` with its prefetches into L1 (PREFETCHT0), the rule of Zen 5
//              (cpu::host_prefetch_rule)
//   tiles_l1   V in address order (as the host store's tiles give it) with prefetches into L1:
//              the f32 kernel's pattern and arithmetic on Zen 5
//   tiles_l1_loads  tiles_l1 without the FMAs (each vector added once)
//   stream_fma the plain read with the f32 kernel's FMAs (16 per 256 bytes), no software prefetch
//   tandem     (built with -DPROBE_TANDEM) the real kernel, host_attend_groups, in this harness,
//              V by rows; tandem_tiles with V by tiles of 64 channels (HostBlockRef::v_tile), as
//              the host store keeps it since the thirteenth session; tandem_bf16 and
//              tandem_bf16_tiles the same with bf16 KV (blocks of 256 KB, twice as many: the same
//              bytes; the layers hold bf16 values that are also small f32 ones)
// docs/host-attention.md, 2026-11-29, twelfth session. Build and run (AVX-512 machine):
//   g++ -O3 -std=c++20 -march=x86-64-v4 -pthread scripts/probe_pattern.cpp -o /tmp/probe_pattern
//   (with the real kernel: add -DPROBE_TANDEM -I. before the source, build/libtandem_core.a -ltbb
//   after it)
//   [PROBE_HUGE_PAGES=1] [PROBE_L3=1] [PROBE_ONE_THREAD=1] /tmp/probe_pattern [rounds [variants]]
//   (PROBE_HUGE_PAGES: 2 MiB pages; PROBE_L3: one 8 MB layer, best of 50 calls, so from the caches;
//   PROBE_ONE_THREAD: one thread reads both halves; variants: names to run, e.g.
//   stream,tandem_tiles; default all)
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
#include <span>
#include <vector>

#include "probe_second.h"

#ifdef PROBE_TANDEM
#include "kernels/cpu/host_kernel.h"
#endif

namespace {

constexpr size_t kBlock = 512 << 10, kRun = 32 << 10;
// Blocks per layer, bytes per layer, blocks per part (parts t, t + 2, ... go to thread t): 512,
// 256 MB and 64, or with PROBE_L3 set 16, 8 MB and 8 (one layer, read again and again: from the
// caches, what each variant's instructions cost without the memory).
size_t g_blocks = 512, g_layer = kBlock * g_blocks, g_part = 64;

enum Variant {
  kStream,
  kKernel,
  kNoPf,
  kLoads,
  kAddrNoPf,
  kAddrState,
  kAddrSoft,
  kTandem,
  kTandemTiles,
  kTandemBf16,
  kTandemBf16Tiles,
  kKernelL1,
  kTilesL1,
  kTilesL1Loads,
  kStreamFma
};
const char* const kNames[] = {
    "stream",    "kernel",         "no_pf",        "loads",       "addr_no_pf",        "addr_state",
    "addr_soft", "tandem",         "tandem_tiles", "tandem_bf16", "tandem_bf16_tiles", "kernel_l1",
    "tiles_l1",  "tiles_l1_loads", "stream_fma"};

alignas(64) float g_q[4 * 128], g_p[4 * 64];
// Per head and thread, as the kernel keeps them per call: q, the block's scores, the accumulators.
alignas(64) float g_head_q[8][4 * 128], g_head_s[2][8][4 * 64], g_head_acc[2][8][4 * 128];

// Unit u of block b: K of head u / 2 (u even) or its V (u odd).
const char* unit(const char* layer, size_t b, int u) {
  return layer + b * kBlock + (u % 2) * (kBlock / 2) + (u / 2) * kRun;
}

// One line step of either pass: the 4 vectors at p (prefetching 4 lines at pf first, if any) into
// the 16 accumulators, each times w[g * stride] for head g (kFma), or added once (loads only).
template <bool kFma, bool kL1 = false>
__attribute__((always_inline)) inline void step4(__m512* acc, const char* p, const char* pf,
                                                 const float* w, int stride) {
  if (pf != nullptr)
    for (int z = 0; z < 4; ++z) _mm_prefetch(pf + 64 * z, kL1 ? _MM_HINT_T0 : _MM_HINT_T2);
  __m512 x[4];
#pragma GCC unroll 4
  for (int z = 0; z < 4; ++z) x[z] = _mm512_load_ps(p + 64 * z);
  if constexpr (!kFma) {
#pragma GCC unroll 4
    for (int z = 0; z < 4; ++z) acc[z] = _mm512_add_ps(acc[z], x[z]);
  } else {
#pragma GCC unroll 4
    for (int g = 0; g < 4; ++g) {
      const __m512 b = _mm512_set1_ps(w[g * stride]);
#pragma GCC unroll 4
      for (int z = 0; z < 4; ++z) acc[g * 4 + z] = _mm512_fmadd_ps(b, x[z], acc[g * 4 + z]);
    }
  }
}

// kState: q, scores and accumulators per head, as the kernel keeps them (the scores stored every
// 32 channels, the accumulators loaded and stored around each V sweep, the probabilities read from
// the scores); kSoft: and a softmax-like step between K and V (16 score vectors through a
// polynomial, a max and a sum, the head's accumulators rescaled).
template <bool kFma, bool kPf, bool kAddr, bool kState = false, bool kSoft = false,
          bool kL1 = false>
float kernel_like(const char* layer, int t) {
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (size_t part = t; part < g_blocks / g_part; part += 2)
    for (size_t b = part * g_part; b < (part + 1) * g_part; ++b)
      for (int u = 0; u < 16; u += 2) {
        const char* k = unit(layer, b, u);
        const char* v = unit(layer, b, u + 1);
        const bool last = u == 14 && b + 1 == (part + 1) * g_part;
        const char* pf_v = kPf ? v : nullptr;  // during K: this head's V
        const char* pf_k = kPf && !last ? (u == 14 ? unit(layer, b + 1, 0) : unit(layer, b, u + 2))
                                        : nullptr;  // during V: the next head's K
        const float* qh = kState ? g_head_q[u / 2] : g_q;
        float* sh = g_head_s[t][u / 2];
        float* ah = g_head_acc[t][u / 2];
        for (int c = 0; c < 128; ++c) {
          if (kState && c % 32 == 0 && c > 0)
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) {
              _mm512_store_ps(sh + 16 * i, _mm512_add_ps(_mm512_load_ps(sh + 16 * i), acc[i]));
              acc[i] = _mm512_setzero_ps();
            }
          step4<kFma, kL1>(acc, k + c * 256, pf_v != nullptr ? pf_v + c * 256 : nullptr, qh + c,
                           128);
        }
        if constexpr (kSoft) {
          __m512 mx = _mm512_set1_ps(-1e30f), sum = _mm512_setzero_ps();
          for (int i = 0; i < 16; ++i) mx = _mm512_max_ps(mx, _mm512_load_ps(sh + 16 * i));
          for (int i = 0; i < 16; ++i) {
            const __m512 x = _mm512_sub_ps(_mm512_load_ps(sh + 16 * i), mx);
            __m512 p = _mm512_set1_ps(1.9e-4f);
            for (int k = 0; k < 7; ++k) p = _mm512_fmadd_ps(p, x, _mm512_set1_ps(0.5f));
            _mm512_store_ps(sh + 16 * i, p);
            sum = _mm512_add_ps(sum, p);
          }
          // The rescale by a factor that is 1 (as it mostly is in the kernel once the running max
          // settles), computed from the sum so the step stays live, the accumulators bounded.
          const __m512 a = _mm512_div_ps(sum, sum);
          for (int i = 0; i < 32; ++i)
            _mm512_store_ps(ah + 16 * i, _mm512_mul_ps(_mm512_load_ps(ah + 16 * i), a));
        }
        for (int step = 0; step < 128; ++step) {
          if (kState && step % 64 == 0)
#pragma GCC unroll 16
            for (int i = 0; i < 16; ++i) {
              _mm512_store_ps(ah + 16 * i + (step / 64) * 256, acc[i]);
              acc[i] = _mm512_load_ps(ah + 16 * i + (1 - step / 64) * 256);
            }
          // Sweep order: row step % 64, half step / 64; address order: row step / 2, half step % 2.
          const int r = kAddr ? step / 2 : step % 64, h = kAddr ? step % 2 : step / 64;
          step4<kFma, kL1>(acc, v + r * 512 + h * 256,
                           pf_k != nullptr ? pf_k + step * 256 : nullptr, (kState ? sh : g_p) + r,
                           64);
        }
      }
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

float stream(const char* layer, int t) {
  __m512 a[4];
  for (__m512& x : a) x = _mm512_setzero_ps();
  const size_t slice = g_layer / 2;
  for (const char* p = layer + t * slice; p < layer + (t + 1) * slice; p += 256)
#pragma GCC unroll 4
    for (int z = 0; z < 4; ++z) a[z] = _mm512_add_ps(a[z], _mm512_load_ps(p + 64 * z));
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3])));
}

// `stream` with the kernel's arithmetic: per 256 bytes four q broadcasts and 16 FMAs.
float stream_fma(const char* layer, int t) {
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  const size_t slice = g_layer / 2;
  for (const char* p = layer + t * slice; p < layer + (t + 1) * slice; p += 256)
    step4<true>(acc, p, nullptr, g_q + ((p - layer) / 256) % 128, 128);
  __m512 s = acc[0];
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

#ifdef PROBE_TANDEM
// The real kernel on thread t's parts: one host_attend_groups call (8 heads) per part. bf16: blocks
// of 256 KB (8 heads' K, 16 KB each, then their V), twice as many per part, so the same bytes.
float tandem_kernel(const char* layer, int t, bool bf16, bool tiles) {
  const size_t block = bf16 ? kBlock / 2 : kBlock, run = bf16 ? kRun / 2 : kRun;
  const size_t part_blocks = bf16 ? 2 * g_part : g_part, parts = g_layer / block / part_blocks;
  std::vector<tandem::HostBlockRef> refs(8 * part_blocks);
  std::vector<float> o(8 * 4 * 128), lse(8 * 4);
  for (size_t part = t; part < parts; part += 2) {
    for (int h = 0; h < 8; ++h)
      for (size_t j = 0; j < part_blocks; ++j) {
        const char* b = layer + (part * part_blocks + j) * block;
        tandem::HostBlockRef r{b + h * run, b + block / 2 + h * run, 64};
        r.k_ld = 64;                                // K by channel, as the host store keeps it
        if (tiles) r.v_tile = 64 * tandem::kVTile;  // V by tiles, likewise
        refs[h * part_blocks + j] = r;
      }
    tandem::HostGroupCall calls[8];
    for (int h = 0; h < 8; ++h) {
      calls[h].q = g_q;
      calls[h].G = 4;
      calls[h].blocks =
          std::span<const tandem::HostBlockRef>(refs.data() + h * part_blocks, part_blocks);
      calls[h].o = o.data() + h * 512;
      calls[h].lse = lse.data() + h * 4;
    }
    tandem::host_attend_groups(128, 0.088f, bf16 ? tandem::DType::kBF16 : tandem::DType::kF32,
                               std::span<const tandem::HostGroupCall>(calls, 8));
  }
  return o[0];
}
#endif

float run(Variant v, const char* layer, int t) {
  switch (v) {
    case kStream:
      return stream(layer, t);
    case kKernel:
      return kernel_like<true, true, false>(layer, t);
    case kNoPf:
      return kernel_like<true, false, false>(layer, t);
    case kLoads:
      return kernel_like<false, true, false>(layer, t);
    case kAddrNoPf:
      return kernel_like<true, false, true>(layer, t);
    case kAddrState:
      return kernel_like<true, false, true, true, false>(layer, t);
    case kAddrSoft:
      return kernel_like<true, false, true, true, true>(layer, t);
    case kKernelL1:
      return kernel_like<true, true, false, false, false, true>(layer, t);
    case kTilesL1:
      return kernel_like<true, true, true, false, false, true>(layer, t);
    case kStreamFma:
      return stream_fma(layer, t);
    case kTilesL1Loads:
      return kernel_like<false, true, true, false, false, true>(layer, t);
    case kTandem:
    case kTandemTiles:
    case kTandemBf16:
    case kTandemBf16Tiles:
#ifdef PROBE_TANDEM
      return tandem_kernel(layer, t, v == kTandemBf16 || v == kTandemBf16Tiles,
                           v == kTandemTiles || v == kTandemBf16Tiles);
#endif
      break;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 10;
  std::vector<Variant> variants = {kStream,   kKernel,       kNoPf,     kLoads,
                                   kAddrNoPf, kAddrState,    kAddrSoft, kKernelL1,
                                   kTilesL1,  kTilesL1Loads, kStreamFma};
#ifdef PROBE_TANDEM
  for (Variant v : {kTandem, kTandemTiles, kTandemBf16, kTandemBf16Tiles}) variants.push_back(v);
#endif
  if (argc > 2) {  // only the variants named
    std::vector<Variant> only;
    for (Variant v : variants)
      for (const char* p = argv[2]; *p != 0;) {
        const char* e = std::strchr(p, ',');
        const size_t n = e != nullptr ? static_cast<size_t>(e - p) : std::strlen(p);
        if (n == std::strlen(kNames[v]) && std::strncmp(p, kNames[v], n) == 0) only.push_back(v);
        p += n + (e != nullptr);
      }
    variants = only;
  }
  const bool huge = std::getenv("PROBE_HUGE_PAGES") != nullptr;
  const bool l3 = std::getenv("PROBE_L3") != nullptr;
  const bool one = std::getenv("PROBE_ONE_THREAD") != nullptr;  // thread 0 runs both halves
  if (l3) g_blocks = 16, g_layer = kBlock * g_blocks, g_part = 8;
  const int reps = l3 ? 50 : 3;
  char* layers[4];
  for (char*& l : layers) {
    // PROBE_HUGE_PAGES set: 2 MiB pages (as the host store's pool), else 4 KiB ones.
    l = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, g_layer));
    madvise(l, g_layer, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
    // bf16 values 0.0078-0.0156 (0x3c00 + 0..96), which read as f32 are in that range too.
    for (size_t i = 0; i < g_layer / 2; ++i)
      reinterpret_cast<uint16_t*>(l)[i] = static_cast<uint16_t>(0x3c00 + i % 97);
  }
  for (int i = 0; i < 4 * 128; ++i) g_q[i] = 0.01f;
  for (int i = 0; i < 4 * 64; ++i) g_p[i] = 0.01f;
  volatile float sink = 0;
  SecondThread second;
  int rot = 0;
  for (int r = 0; r < rounds; ++r) {
    std::printf("{\"unix_time\":%lld", static_cast<long long>(std::time(nullptr)));
    for (Variant v : variants) {
      double best = 1e30;
      for (int rep = 0; rep < reps; ++rep) {
        const char* layer = layers[l3 ? 0 : rot++ % 4];
        const auto t0 = std::chrono::steady_clock::now();
        if (one) {
          sink = sink + run(v, layer, 0) + run(v, layer, 1);
        } else {
          second.start([v, layer] { return run(v, layer, 1); });
          const float s0 = run(v, layer, 0);
          sink = sink + s0 + second.wait();
        }
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf(",\"%s\":%.1f", kNames[v], g_layer / best / 1e9);
    }
    std::printf("}\n");
    std::fflush(stdout);
  }
  for (char* l : layers) std::free(l);
}
