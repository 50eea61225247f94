// probe_dense_kv_pages: the dense cache's attention of one decode token (the CPU backend's
// attention(), as DenseKv::attend calls it) over K and V in 4 KiB pages (host_heap, what the CPU
// backend's allocate() gave until 2026-12-07) against the same K and V in 2 MiB pages
// (host_heap_huge, what it gives since), tightly paired: both copies live in one process and the
// calls alternate between them in rounds of 6 steps of every layer, each round's median step time
// printed, then the share of rounds the 2 MiB pages won and the median ratio. It first prints the
// process's AnonHugePages: whether the kernel gave the 2 MiB pages asked for. Shape: the 1B
// model's (16 layers, 32 query heads, 8 KV heads, head_dim 64), f32 KV, depth 4096 by default,
// laid out token-major ([T, n_head_kv, head_dim], the dense cache's layout until the nineteenth
// session made it head-major: scripts/probe_dense_kv_layout.cpp).
// Build (one command) and run:
//   g++ -O2 -std=c++20 -mavx2 -mfma -mf16c -I. scripts/probe_dense_kv_pages.cpp
//       build/libtandem_core.a -ltbb -o /tmp/probe_dense_kv_pages
//   /tmp/probe_dense_kv_pages [rounds] [depth]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/attn_partial.h"
#include "kernels/backend.h"
#include "kernels/buffer.h"

using namespace tandem;

int main(int argc, char** argv) {
  constexpr int kSteps = 6, kLayers = 16, kHq = 32, kHkv = 8, kD = 64;
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 30;
  const int64_t depth = argc > 2 ? std::atoll(argv[2]) : 4096;
  auto backend = make_cpu_backend();
  struct Set {
    std::vector<Buffer> k, v;
  };
  auto make = [&](const Allocator& a) {
    Set s;
    uint64_t x = 7;
    for (int l = 0; l < kLayers; ++l) {
      s.k.emplace_back(a, DType::kF32, std::initializer_list<int64_t>{depth, kHkv, kD});
      s.v.emplace_back(a, DType::kF32, std::initializer_list<int64_t>{depth, kHkv, kD});
      for (Buffer* b : {&s.k.back(), &s.v.back()}) {
        float* p = b->view().as<float>();
        for (int64_t i = 0; i < depth * kHkv * kD; ++i) {
          x = x * 6364136223846793005ull + 1442695040888963407ull;
          p[i] = static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) / (1 << 23);
        }
      }
    }
    return s;
  };
  const Set small = make(host_heap()), huge = make(host_heap_huge());
  const double mb = 2.0 * kLayers * static_cast<double>(depth) * kHkv * kD * 4 / 1e6;  // a set
  // Whether the kernel gave the 2 MiB pages asked for (THP may fall back to 4 KiB pages when it
  // finds no free 2 MiB ones): the process's AnonHugePages against the huge set's bytes.
  if (std::FILE* f = std::fopen("/proc/self/smaps_rollup", "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr)
      if (std::string_view(line).starts_with("AnonHugePages:"))
        std::printf("%s huge set %.0f MB\n", std::string(line, std::strlen(line) - 1).c_str(), mb);
    std::fclose(f);
  }
  std::vector<float> q(kHq * kD, 0.1f), o(kHq * kD), lse(kHq);
  int32_t pos = static_cast<int32_t>(depth);
  const TensorView qv(q.data(), DType::kF32, {1, kHq, kD});
  const TensorView pv(&pos, DType::kI32, {1});
  const AttnPartial out{TensorView(o.data(), DType::kF32, {1, kHq, kD}),
                        TensorView(lse.data(), DType::kF32, {1, kHq})};
  const float scale = 1.0f / std::sqrt(static_cast<float>(kD));
  auto step = [&](const Set& s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int l = 0; l < kLayers; ++l)
      backend->attention(qv, s.k[static_cast<size_t>(l)].view(), s.v[static_cast<size_t>(l)].view(),
                         pv, 0, scale, out);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto median_of = [&](const Set& s) {
    std::vector<double> t;
    for (int i = 0; i < kSteps; ++i) t.push_back(step(s));
    std::sort(t.begin(), t.end());
    return t[kSteps / 2];
  };
  step(small);
  step(huge);
  int wins = 0;
  std::vector<double> ratios;
  for (int r = 0; r < rounds; ++r) {
    const double a = median_of(small), b = median_of(huge);
    wins += b < a;
    ratios.push_back(a / b);
    std::printf("round %d 4k %.2f ms (%.1f GB/s) 2m %.2f ms (%.1f GB/s) ratio %.3f\n", r, a, mb / a,
                b, mb / b, a / b);
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("2 MiB pages faster in %d of %d rounds, median ratio 4k/2m %.3f\n", wins, rounds,
              ratios[ratios.size() / 2]);
  return 0;
}
