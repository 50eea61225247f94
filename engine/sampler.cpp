// Sampling pipeline: penalties -> greedy or (temperature -> top-k -> softmax -> min-p -> top-p
// -> draw). Candidates are cut down before any full sort so a 128K vocabulary stays cheap.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/common.h"

namespace tandem {

Sampler::Sampler(const SamplingParams& params, uint64_t default_seed)
    : params_(params), rng_(params.seed.value_or(default_seed)) {}

double Sampler::uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

int32_t argmax(std::span<const float> logits) {
  TANDEM_CHECK(!logits.empty(), "empty logits");
  const size_t n = logits.size();
  // The maximum first, in 8 independent lanes the compiler turns into vector max instructions
  // (`x > m ? x : m` is what maxps computes), then its first index: greedy decoding calls this
  // once per token, and the one-pass loop with its index dependency was ~5 ns per logit.
  size_t best = 0;
  if (n >= 16) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    float lane[8] = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (size_t j = 0; j < 8; ++j) lane[j] = logits[i + j] > lane[j] ? logits[i + j] : lane[j];
    float mx = lane[0];
    for (size_t j = 1; j < 8; ++j) mx = lane[j] > mx ? lane[j] : mx;
    for (; i < n; ++i) mx = logits[i] > mx ? logits[i] : mx;
    // mx is the largest logit (NaNs never win a comparison); its first occurrence is the answer,
    // unless a NaN at 0 (the one-pass rule then stays at 0) or nothing above -inf: that path.
    if (!std::isnan(logits[0]) && mx > kNegInf) {
      while (logits[best] != mx) ++best;
      return static_cast<int32_t>(best);
    }
  }
  for (size_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return static_cast<int32_t>(best);
}

int32_t Sampler::sample(std::span<float> logits, std::span<const int32_t> prompt,
                        std::span<const int32_t> output) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const SamplingParams& p = params_;

  // Penalties. Repetition (HF): divide positive logits, multiply negative ones, once per token.
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    counts_.assign(static_cast<size_t>(vocab), 0);
    for (int32_t t : output)
      if (t >= 0 && t < vocab) ++counts_[static_cast<size_t>(t)];
    if (p.repetition_penalty != 1.0f) {
      auto penalise = [&](int32_t t) {
        if (t < 0 || t >= vocab) return;
        float& l = logits[static_cast<size_t>(t)];
        if (std::isfinite(l)) l = l > 0 ? l / p.repetition_penalty : l * p.repetition_penalty;
      };
      std::vector<bool> seen(static_cast<size_t>(vocab), false);
      for (auto span : {prompt, output})
        for (int32_t t : span)
          if (t >= 0 && t < vocab && !seen[static_cast<size_t>(t)]) {
            seen[static_cast<size_t>(t)] = true;
            penalise(t);
          }
    }
    for (int32_t t = 0; t < vocab; ++t) {
      const int32_t n = counts_[static_cast<size_t>(t)];
      if (n > 0)
        logits[static_cast<size_t>(t)] -=
            p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
    }
  }

  if (p.temperature <= 0.0f || p.top_k == 1) return argmax(logits);

  // Candidates: top-k first (partial selection), else every finite logit.
  cand_.clear();
  for (int32_t t = 0; t < vocab; ++t)
    if (logits[static_cast<size_t>(t)] != -std::numeric_limits<float>::infinity())
      cand_.emplace_back(logits[static_cast<size_t>(t)] / p.temperature, t);
  if (cand_.empty()) return argmax(logits);
  auto by_logit = [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < cand_.size()) {
    std::nth_element(cand_.begin(), cand_.begin() + p.top_k, cand_.end(), by_logit);
    cand_.resize(static_cast<size_t>(p.top_k));
  }
  // Softmax over candidates (max-subtracted; the max is found without sorting).
  float mx = cand_[0].first;
  for (const auto& c : cand_) mx = std::max(mx, c.first);
  double sum = 0;
  for (auto& c : cand_) {
    c.first = std::exp(c.first - mx);
    sum += c.first;
  }
  for (auto& c : cand_) c.first = static_cast<float>(c.first / sum);
  // min-p: drop tokens below min_p times the top probability (the top token always survives).
  if (p.min_p > 0.0f) {
    float top = 0;
    for (const auto& c : cand_) top = std::max(top, c.first);
    const float cut = p.min_p * top;
    std::erase_if(cand_, [&](const auto& c) { return c.first < cut; });
  }
  // top-p: the smallest set of most likely tokens whose mass reaches top_p. Sort only a prefix
  // when it already holds the mass.
  if (p.top_p < 1.0f) {
    size_t prefix = std::min<size_t>(cand_.size(), 256);
    for (;;) {
      std::partial_sort(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(prefix),
                        cand_.end(), by_logit);
      double mass = 0;
      size_t keep = 0;
      while (keep < prefix && mass < p.top_p) mass += cand_[keep++].first;
      if (mass >= p.top_p || prefix == cand_.size()) {
        cand_.resize(std::max<size_t>(keep, 1));
        break;
      }
      prefix = cand_.size();  // the short prefix was not enough: sort everything once
    }
  } else {
    std::sort(cand_.begin(), cand_.end(), by_logit);  // a fixed order makes draws reproducible
  }
  double total = 0;
  for (const auto& c : cand_) total += c.first;
  const double r = uniform() * total;
  double acc = 0;
  for (const auto& c : cand_) {
    acc += c.first;
    if (r < acc) return c.second;
  }
  return cand_.back().second;  // r rounded up to the total
}

void log_softmax(std::span<const float> logits, std::span<float> out) {
  TANDEM_CHECK(out.size() == logits.size() && !logits.empty(), "log_softmax sizes");
  float mx = logits[0];
  for (float l : logits) mx = std::max(mx, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l - mx));
  const float lz = mx + static_cast<float>(std::log(sum));
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - lz;
}

std::vector<std::pair<float, int32_t>> top_logprobs(std::span<const float> logits, int32_t k) {
  std::vector<float> lp(logits.size());
  log_softmax(logits, lp);
  std::vector<std::pair<float, int32_t>> all(logits.size());
  for (size_t i = 0; i < lp.size(); ++i) all[i] = {lp[i], static_cast<int32_t>(i)};
  const size_t kk = std::min<size_t>(static_cast<size_t>(std::max(k, 0)), all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(kk), all.end(),
                    [](const auto& a, const auto& b) {
                      return a.first > b.first || (a.first == b.first && a.second < b.second);
                    });
  all.resize(kk);
  return all;
}

}  // namespace tandem
