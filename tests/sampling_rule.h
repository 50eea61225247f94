// The sampling rule of engine/sampler.cpp written the plain way (every candidate sorted), with a
// given uniform number: the reference of the sampler's fast paths (test_sampler) and of the GPU
// sampler (test_cuda_kernels_sampling).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "engine/sampler.h"

namespace tandem::test {

// Greedy when temperature <= 0 or top_k == 1; else the candidates (finite logits / temperature)
// ordered by (value desc, id asc), top-k, softmax, min-p, top-p, and the first token whose
// cumulative mass exceeds u times the kept mass (the last one if rounding leaves none).
// Penalties are not applied.
inline int32_t plain_sampling_rule(std::span<const float> logits, const SamplingParams& p,
                                   double u) {
  if (p.temperature <= 0.0f || p.top_k == 1) return argmax(logits);
  std::vector<std::pair<float, int32_t>> c;
  for (size_t t = 0; t < logits.size(); ++t)
    if (logits[t] != -std::numeric_limits<float>::infinity())
      c.emplace_back(logits[t] / p.temperature, static_cast<int32_t>(t));
  if (c.empty()) return argmax(logits);
  std::sort(c.begin(), c.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < c.size())
    c.resize(static_cast<size_t>(p.top_k));
  const float mx = c[0].first;
  double sum = 0;
  for (auto& e : c) {
    e.first = std::exp(e.first - mx);
    sum += e.first;
  }
  for (auto& e : c) e.first = static_cast<float>(e.first / sum);
  if (p.min_p > 0.0f) {
    const float cut = p.min_p * c[0].first;
    std::erase_if(c, [&](const auto& e) { return e.first < cut; });
  }
  if (p.top_p < 1.0f) {
    double mass = 0;
    size_t keep = 0;
    while (keep < c.size() && mass < p.top_p) mass += c[keep++].first;
    c.resize(std::max<size_t>(keep, 1));
  }
  double total = 0;
  for (const auto& e : c) total += e.first;
  const double r = u * total;
  double acc = 0;
  for (const auto& e : c) {
    acc += e.first;
    if (r < acc) return e.second;
  }
  return c.back().second;
}

}  // namespace tandem::test
