// `tandem bench-sampler`: time per draw of the sampler for greedy, temperature, top-k and top-p
// settings (JSON lines). Not a test.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "engine/sampler.h"
#include "server/tools/commands.h"

namespace tandem {

// Time per token of the sampler over logits drawn from N(0, 3) (a diffuse distribution: the
// hard case for top-p), per setting; one JSON line each.
int cmd_bench_sampler(const Options& f) {
  const int64_t vocab = f.integer("vocab");
  const int64_t iters = f.integer("iters");
  std::vector<float> base(static_cast<size_t>(vocab));
  uint64_t x = 1;
  for (float& l : base) {
    float s = 0;
    for (int i = 0; i < 4; ++i) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      s += static_cast<float>((x >> 40) & 0xFFFFFF) / 16777216.0f - 0.5f;
    }
    l = s * 1.7320508f * 3.0f;
  }
  struct Setting {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
  };
  const Setting settings[] = {{"greedy", 0.0f, 0, 1.0f},
                              {"temperature 0.8", 0.8f, 0, 1.0f},
                              {"top_k 50", 0.8f, 50, 1.0f},
                              {"top_p 0.95", 0.8f, 0, 0.95f},
                              {"top_k 50 top_p 0.95", 0.8f, 50, 0.95f}};
  std::vector<float> row;
  for (const Setting& s : settings) {
    SamplingParams p;
    p.temperature = s.temperature;
    p.top_k = s.top_k;
    p.top_p = s.top_p;
    Sampler sampler(p, 7);
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < iters; ++i) {
      row = base;
      sampler.sample(row, {}, {});
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        static_cast<double>(iters);
    const nlohmann::json j = {{"setting", s.name}, {"vocab", vocab}, {"us_per_token", us}};
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace tandem
