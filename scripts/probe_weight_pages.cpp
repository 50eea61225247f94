// probe_weight_pages: the CPU backend's decode step with the weights in the checkpoint's memory
// map (4 KiB pages) against a copy in 2 MiB pages (Model::load's WeightMemory), tightly paired:
// both copies of one checkpoint live in one process and the steps alternate between them in
// rounds of 6 (depth-1 decode of a dense cache, so the step is the weights' stream), each round's
// median step time printed as one line, then the share of rounds the 2 MiB pages won and the
// median ratio. docs/decode-cpu.md, 2026-11-30, seventeenth session. Build and run:
//   g++ -O2 -std=c++20 -mavx2 -mfma -mf16c -I. scripts/probe_weight_pages.cpp \
//       build/libtandem_core.a -ltbb -o /tmp/probe_weight_pages
//   /tmp/probe_weight_pages MODEL_DIR [rounds]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kvstore/sequence_kv.h"
#include "models/model.h"

using namespace tandem;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [rounds]\n", argv[0]);
    return 2;
  }
  constexpr int kSteps = 6;  // per model and round
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 30;
  auto backend = make_cpu_backend();
  auto mapped = Model::load(argv[1], *backend, WeightMemory::kMap);
  auto huge = Model::load(argv[1], *backend, WeightMemory::kHuge);
  auto kv_map = mapped->new_dense_kv(4096), kv_huge = huge->new_dense_kv(4096);
  const int32_t token = 1;
  auto step = [&](Model& m, SequenceKv* kv) {
    const StepSequence s{kv, std::span<const int32_t>(&token, 1), false, true, false};
    const auto t0 = std::chrono::steady_clock::now();
    m.forward(std::span<const StepSequence>(&s, 1));
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  auto median_of = [&](Model& m, SequenceKv* kv) {
    std::vector<double> t;
    for (int i = 0; i < kSteps; ++i) t.push_back(step(m, kv));
    std::sort(t.begin(), t.end());
    return t[kSteps / 2];
  };
  step(*mapped, kv_map.get());
  step(*huge, kv_huge.get());
  int wins = 0;
  std::vector<double> ratios;
  for (int r = 0; r < rounds; ++r) {
    const double a = median_of(*mapped, kv_map.get()), b = median_of(*huge, kv_huge.get());
    wins += b < a;
    ratios.push_back(a / b);
    std::printf("round %d map %.1f huge %.1f ms ratio %.3f\n", r, a, b, a / b);
    if (kv_map->length() > 4000) {  // a fresh cache before the capacity
      kv_map = mapped->new_dense_kv(4096);
      kv_huge = huge->new_dense_kv(4096);
    }
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("2 MiB pages faster in %d of %d rounds; median map/huge %.3f [%.3f-%.3f]\n", wins,
              rounds, ratios[ratios.size() / 2], ratios.front(), ratios.back());
  return 0;
}
