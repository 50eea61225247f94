// GPU sampling checked against a CPU reference of the same rule (tests/sampling_rule.h), draw by
// draw with given uniforms: greedy, temperature, top-k, top-p, ties and masked tokens.
//
// Without a CUDA device (or in a build without CUDA) the executable prints
// "no CUDA device: N GPU tests skipped" and exits 4, ctest's SKIP_RETURN_CODE (label "gpu").
// The listener base classes of Catch2 v2 (used below to skip the whole run without a GPU).
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <span>
#include <vector>

#include "engine/sampler.h"
#include "tests/cuda_parity.h"
#include "tests/gpu_skip.h"
#include "tests/sampling_rule.h"

using namespace tandem;
using namespace tandem::test;

CATCH_REGISTER_LISTENER(SkipWithoutGpu)

namespace {

// The rule of Backend::sample (engine/sampler.cpp without penalties and min-p) with a given
// uniform.
int32_t ref_sample(const float* logits, int64_t vocab, float temp, int32_t top_k, float top_p,
                   float u) {
  SamplingParams p;
  p.temperature = temp;
  p.top_k = top_k;
  p.top_p = top_p;
  return tandem::test::plain_sampling_rule(
      std::span<const float>(logits, static_cast<size_t>(vocab)), p, static_cast<double>(u));
}

}  // namespace

TEST_CASE("cuda: sampling greedy, temperature, top-k, top-p with given uniforms",
          "[gpu][sampling]") {
  struct RowParams {
    float temp;
    int32_t top_k;
    float top_p;
  };
  const RowParams params[] = {{0.0f, 0, 1.0f},  {1.0f, 1, 1.0f},   {0.7f, 50, 0.9f},
                              {1.0f, 0, 1.0f},  {1.3f, 0, 0.5f},   {1.0f, 3, 1.0f},
                              {0.5f, 0, 0.95f}, {2.0f, 1000, 0.8f}};
  const int64_t n = 8;
  for (int64_t vocab : {5000, 128256}) {
    for (bool ties : {false, true}) {
      INFO("vocab " << vocab << (ties ? " with many ties" : ""));
      Buffer logits = random_buffer(DType::kF32, {n, vocab}, ties ? 500 : 510, 6.0f);
      float* lp = logits.as<float>();
      for (int64_t i = 0; i < n * vocab; ++i) {
        if (ties) lp[i] = std::round(lp[i]);  // 13 distinct values: ties everywhere
        if (i % 97 == 5) lp[i] = -kInf;       // masked tokens
      }
      std::vector<float> temp, top_p;
      std::vector<int32_t> top_k;
      for (int64_t i = 0; i < n; ++i) {
        temp.push_back(params[i].temp);
        top_k.push_back(params[i].top_k);
        top_p.push_back(params[i].top_p);
      }
      const Buffer dl = up(logits);
      std::mt19937 rng(ties ? 520 : 530);
      std::uniform_real_distribution<float> uni(0.0f, 1.0f);
      // Fewer draws on the large vocabulary: compute-sanitizer runs this program too.
      const int rounds = vocab > 10000 ? 3 : 16;
      for (int round = 0; round < rounds; ++round) {
        std::vector<float> u;
        std::vector<SampleRow> rows;
        for (int64_t i = 0; i < n; ++i) {
          u.push_back(uni(rng));
          const size_t r = static_cast<size_t>(i);
          rows.push_back(SampleRow{temp[r], top_k[r], top_p[r], 0.0f, u.back()});
        }
        std::vector<int32_t> got(static_cast<size_t>(n), -1);
        REQUIRE(gpu().sample(dl.view(), rows.data(), got.data()));
        for (int64_t i = 0; i < n; ++i) {
          INFO("round " << round << " row " << i << " u " << u[static_cast<size_t>(i)]);
          CHECK(got[static_cast<size_t>(i)] ==
                ref_sample(lp + i * vocab, vocab, temp[static_cast<size_t>(i)],
                           top_k[static_cast<size_t>(i)], top_p[static_cast<size_t>(i)],
                           u[static_cast<size_t>(i)]));
        }
      }
    }
  }
}
