// probe_value_offload: the weighted-value kernel of value offload (host_weighted_values) over V by
// tiles as the host store keeps it, one thread: 8 KV heads x 512 blocks of 64 rows (a 32K
// context, head_dim 128, 4 query heads per KV head), scores given, three layers rotated (128 MB
// f32, 64 MB bf16: from memory). One JSON line per round: GB/s of V, best of three calls. The ISA
// path is the machine's best or TANDEM_CPU_ISA's. docs/host-attention.md, fourteenth session.
// Build and run:
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -I. scripts/probe_value_offload.cpp \
//     build/libtandem_core.a -ltbb -o /tmp/probe_value_offload
//   /tmp/probe_value_offload f32|bf16 [rounds]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "kernels/cpu/host_kernel.h"

int main(int argc, char** argv) {
  using tandem::HostBlockRef;
  const bool bf16 = argc > 1 && std::strcmp(argv[1], "bf16") == 0;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  constexpr int d = 128, G = 4, heads = 8, blocks = 512, rows = 64;
  const size_t es = bf16 ? 2 : 4, vblk = size_t{rows} * d * es, layer = vblk * blocks * heads;
  std::vector<char*> layers;
  for (int l = 0; l < 3; ++l) {
    char* p = static_cast<char*>(std::aligned_alloc(4096, layer));
    // bf16 values 0.0078-0.0156, which read as f32 are in that range too.
    for (size_t i = 0; i < layer / 2; ++i)
      reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(0x3c00 + i % 97);
    layers.push_back(p);
  }
  std::vector<float> scores(size_t{rows} * G * blocks);
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = 0.01f * static_cast<float>(i % 13);
  std::vector<float> o(G * d), lse(G);
  std::vector<HostBlockRef> refs(blocks);
  int rot = 0;
  for (int r = 0; r < rounds; ++r) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const char* base = layers[static_cast<size_t>(rot++ % 3)];
      const auto t0 = std::chrono::steady_clock::now();
      for (int h = 0; h < heads; ++h) {
        for (int b = 0; b < blocks; ++b) {
          HostBlockRef& x = refs[static_cast<size_t>(b)];
          x.v = base + (size_t(h) * blocks + b) * vblk;
          x.n = rows;
          x.v_tile = int64_t{rows} * tandem::kVTile;
          x.s = scores.data() + size_t(b) * rows * G;
        }
        tandem::host_weighted_values(G, d, bf16 ? tandem::DType::kBF16 : tandem::DType::kF32, refs,
                                     o.data(), lse.data());
      }
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("{\"kv_dtype\":\"%s\",\"v_gbs\":%.2f}\n", bf16 ? "bf16" : "f32",
                static_cast<double>(layer) / best / 1e9);
  }
  for (char* p : layers) std::free(p);
}
