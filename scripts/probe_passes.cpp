// probe_passes: the host kernel's AVX-512 f32 passes called alone, in the kernel's order, against
// the whole kernel (host_attend_groups) on the same layers, one thread, variants alternated call by
// call. Per block of 8 KV heads (K by channel, V by tiles, as the host store keeps them), each
// head's cols pass prefetching its V, then its value passes prefetching the next head's K.
//   0  the passes alone
//   1  and the chunk softmax between them (scores scaled down so that the exponentials stay finite)
//   5  1 with q, scores, accumulators and softmax state per head, as a gang of 8 calls keeps them
//   2  the whole kernel: host_attend_groups with 8 calls (one per head) of 8 blocks at a time
// Prints the median GB/s of each of two variants and the median of their calls' ratios.
// docs/host-attention.md, 2026-12-07, twenty-second session. Build and run (AVX-512 machine):
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -I. scripts/probe_passes.cpp build/libtandem_core.a
//     -ltbb -lspdlog -lfmt -o /tmp/probe_passes
//   /tmp/probe_passes blocks calls variant_a variant_b [distance]
//   (blocks of 512 KB: 512 from memory, four layers rotated; 16 from L3, one layer; distance: the
//   passes' prefetches (variants 0, 1, 5) in bytes ahead of what they read, 32768 (one pass, the
//   kernel's) by default, 0 for none)
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <vector>

#include "kernels/cpu/host_kernel.h"
#include "kernels/cpu/host_kernel_passes.h"
#include "kernels/cpu/isa.h"

namespace {

using tandem::HostBlockRef;
using tandem::HostGroupCall;

constexpr size_t kBlock = 512 << 10, kRun = 32 << 10;  // a block; one head's K (or V) in it
int g_dist = 32 << 10;  // the passes' prefetch distance in bytes (0: none), a power of 2 >= 512

std::vector<float> g_q(8 * 4 * 128, 0.01f), g_s(8 * 4 * 64), g_acc(8 * 4 * 128), g_p(4 * 64, 0.01f),
    g_m(8 * 4, -1e30f), g_l(8 * 64);

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double whole_kernel(const char* layer, int nb) {
  constexpr int kPartBlocks = 8;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<HostBlockRef> refs(8 * kPartBlocks);
  std::vector<float> o(8 * 4 * 128), lse(8 * 4);
  for (int part = 0; part < nb / kPartBlocks; ++part) {
    for (int h = 0; h < 8; ++h)
      for (int j = 0; j < kPartBlocks; ++j) {
        const char* b = layer + (part * kPartBlocks + j) * kBlock;
        HostBlockRef r{b + h * kRun, b + kBlock / 2 + h * kRun, 64};
        r.k_ld = 64;
        r.v_tile = 64 * tandem::kVTile;
        refs[static_cast<size_t>(h * kPartBlocks + j)] = r;
      }
    HostGroupCall calls[8];
    for (int h = 0; h < 8; ++h) {
      calls[h].q = g_q.data();
      calls[h].G = 4;
      calls[h].blocks = std::span<const HostBlockRef>(refs.data() + h * kPartBlocks, kPartBlocks);
      calls[h].o = o.data() + h * 512;
      calls[h].lse = lse.data() + h * 4;
    }
    tandem::host_attend_groups(128, 0.088f, tandem::DType::kF32,
                               std::span<const HostGroupCall>(calls, 8));
  }
  g_acc[0] += o[0];
  return seconds_since(t0);
}

double passes(const char* layer, int nb, int variant) {
  const auto cols = tandem::cpu::host_cols_avx512_f32();
  const auto value = tandem::cpu::host_passes_avx512_f32(4).value;
  const bool soft = (variant & 1) != 0, per_head = (variant & 4) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int b = 0; b < nb; ++b)
    for (int h = 0; h < 8; ++h) {
      const auto* k = reinterpret_cast<const float*>(layer + b * kBlock + h * kRun);
      const auto* v = reinterpret_cast<const float*>(layer + b * kBlock + kBlock / 2 + h * kRun);
      const auto* next_k = reinterpret_cast<const float*>(
          h < 7 ? layer + b * kBlock + (h + 1) * kRun : layer + ((b + 1) % nb) * kBlock);
      const int hs = per_head ? h : 0;
      float* q = g_q.data() + hs * 512;
      float* s = g_s.data() + hs * 256;
      float* acc = g_acc.data() + hs * 512;
      // What each pass prefetches: g_dist bytes ahead in the order the passes read (this head's
      // K, its V, the next head's K), as pieces of g_dist bytes; with 32 KB, the kernel's rule
      // (the cols pass this head's V, the value passes the next head's K).
      const int pieces = g_dist > 0 ? static_cast<int>(kRun) / g_dist : 0;
      const float* pf_k[64];
      const float* pf_v[64];
      for (int i = 0; i < pieces; ++i) {
        pf_k[i] = i + 1 < pieces ? k + (i + 1) * g_dist / 4 : v;
        pf_v[i] = i + 1 < pieces ? v + (i + 1) * g_dist / 4 : next_k;
      }
      cols(k, 64, 64, q, 4, 128, s, 64, pf_k, pieces, g_dist, 1);
      if (soft) {
        for (int i = 0; i < 4 * 64; ++i) s[i] *= 0.001f;
        tandem::cpu::host_softmax_avx512(s, 4, 64, 64, g_m.data() + hs * 4, g_l.data() + hs * 64,
                                         acc, 128);
      }
      const float* rows[64];
      for (int j = 0; j < 64; ++j) rows[j] = v + j * 64;
      value(rows, 64, soft ? s : g_p.data(), acc, 128, 64 * 64, pf_v, pieces, g_dist, 1);
    }
  return seconds_since(t0);
}

double run(const char* layer, int nb, int variant) {
  return variant == 2 ? whole_kernel(layer, nb) : passes(layer, nb, variant);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: probe_passes blocks calls variant_a variant_b\n");
    return 2;
  }
  if (tandem::cpu::active_isa() < tandem::cpu::Isa::kAvx512) {
    std::fprintf(stderr, "probe_passes: needs AVX-512\n");
    return 2;
  }
  const int nb = std::max(8, std::atoi(argv[1]) / 8 * 8), calls = std::max(1, std::atoi(argv[2]));
  const int va = std::atoi(argv[3]), vb = std::atoi(argv[4]);
  if (argc > 5) g_dist = std::atoi(argv[5]);
  if (g_dist != 0 && (g_dist < 512 || g_dist > static_cast<int>(kRun) || (g_dist & (g_dist - 1)))) {
    std::fprintf(stderr, "probe_passes: distance %d is not 0 or a power of 2 in [512, 32768]\n",
                 g_dist);
    return 2;
  }
  std::vector<char*> layers(nb >= 64 ? 4 : 1);
  const size_t bytes = static_cast<size_t>(nb) * kBlock;
  for (char*& layer : layers) {
    layer = static_cast<char*>(std::aligned_alloc(size_t{2} << 20, bytes));
    madvise(layer, bytes, MADV_HUGEPAGE);  // as the host store's pool
    for (size_t i = 0; i < bytes / 4; ++i)
      reinterpret_cast<float*>(layer)[i] = 0.001f * static_cast<float>(i % 97);
  }
  std::vector<double> ta, tb, ratio;
  size_t rot = 0;
  for (int r = 0; r < calls; ++r) {
    ta.push_back(run(layers[rot++ % layers.size()], nb, va));
    tb.push_back(run(layers[rot++ % layers.size()], nb, vb));
    ratio.push_back(ta.back() / tb.back());
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  std::sort(ratio.begin(), ratio.end());
  const size_t mid = static_cast<size_t>(calls) / 2;
  std::printf(
      "{\"blocks\":%d,\"distance\":%d,\"variant_a\":%d,\"gbs_a\":%.1f,\"variant_b\":%d,\"gbs_b\":%."
      "1f,"
      "\"speed_b_over_a\":%.3f,\"sum\":%g}\n",
      nb, g_dist, va, static_cast<double>(bytes) / ta[mid] / 1e9, vb,
      static_cast<double>(bytes) / tb[mid] / 1e9, ratio[mid], g_acc[0]);
  for (char* layer : layers) std::free(layer);
}
