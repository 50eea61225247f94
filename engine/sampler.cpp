// Sampling pipeline: penalties -> greedy or (temperature -> top-k -> softmax -> min-p -> top-p
// -> draw). Candidates are cut down before any full sort so a 128K vocabulary stays cheap.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
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

  for (const auto& [t, bias] : p.logit_bias)
    if (t >= 0 && t < vocab) logits[static_cast<size_t>(t)] += bias;

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
  return draw_impl(logits, [this] { return uniform(); });
}

int32_t Sampler::draw(std::span<float> logits, double u) {
  if (params_.temperature <= 0.0f || params_.top_k == 1) return argmax(logits);
  return draw_impl(logits, [u] { return u; });
}

bool Sampler::plain() const {
  const SamplingParams& p = params_;
  return p.repetition_penalty == 1.0f && p.presence_penalty == 0.0f &&
         p.frequency_penalty == 0.0f && p.min_p <= 0.0f && p.logit_bias.empty();
}

SampleRow Sampler::backend_row() {
  TANDEM_CHECK(plain(), "backend_row of a sampler with penalties or min-p");
  SampleRow r;
  r.temperature = params_.temperature;
  r.top_k = params_.top_k;
  r.top_p = params_.top_p;
  if (!(params_.temperature <= 0.0f || params_.top_k == 1)) r.uniform = uniform();
  return r;
}

template <typename Uniform>
int32_t Sampler::draw_impl(std::span<float> logits, Uniform&& next_uniform) {
  const int32_t vocab = static_cast<int32_t>(logits.size());
  const SamplingParams& p = params_;
  // Candidates: top-k first (partial selection), else every finite logit. For top-k, a floor
  // first: the k-th largest of the maxima of groups of 64 logits is at most the k-th largest
  // logit (k groups have a member at least that large), so only logits at or above it can be
  // among the top k, usually a few times k of them instead of the whole vocabulary. The floor
  // is compared after the division by the temperature, as the ranking is (division by a
  // positive number is monotone, also when rounded).
  cand_.clear();
  float floor = -std::numeric_limits<float>::infinity();
  constexpr int32_t kGroup = 64;
  if (p.top_k > 0 && static_cast<int64_t>(p.top_k) * kGroup * 4 <= vocab) {
    group_max_.clear();
    for (int32_t t0 = 0; t0 < vocab; t0 += kGroup) {
      float m = -std::numeric_limits<float>::infinity();
      for (int32_t t = t0; t < std::min(vocab, t0 + kGroup); ++t)
        m = std::max(m, logits[static_cast<size_t>(t)]);
      group_max_.push_back(m);
    }
    std::nth_element(group_max_.begin(), group_max_.begin() + (p.top_k - 1), group_max_.end(),
                     std::greater<float>());
    floor = group_max_[static_cast<size_t>(p.top_k - 1)] / p.temperature;
  }
  for (int32_t t = 0; t < vocab; ++t) {
    const float l = logits[static_cast<size_t>(t)];
    if (l == -std::numeric_limits<float>::infinity()) continue;
    const float v = l / p.temperature;
    if (v >= floor) cand_.emplace_back(v, t);
  }
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
  // The order of the rule is (probability desc, id asc). Nothing is sorted whole: candidates are
  // grouped by the top 12 bits of their probability (exponent and 4 mantissa bits; for positive
  // floats the bits order like the values, so every member of a higher group comes first), the
  // group masses are walked in order, and only the group where a cut falls is sorted. Masses are
  // summed group by group, so a cut can differ from a sequential sum only when it lies within
  // rounding of a boundary.
  constexpr int kBuckets = 4096;
  auto key = [](float prob) {
    uint32_t bits;
    std::memcpy(&bits, &prob, sizeof bits);
    return static_cast<int>(bits >> 19);  // prob in [0, 1]: at most 0x3F800000 >> 19 = 2032
  };
  bucket_mass_.assign(kBuckets, 0.0);
  bucket_count_.assign(kBuckets, 0);
  for (const auto& c : cand_) {
    const int k = key(c.first);
    bucket_mass_[static_cast<size_t>(k)] += c.first;
    ++bucket_count_[static_cast<size_t>(k)];
  }
  // The members of group k, in the rule's order (a scan of the candidates, then a sort).
  auto group = [&](int k) {
    group_.clear();
    for (const auto& c : cand_)
      if (key(c.first) == k) group_.push_back(c);
    std::sort(group_.begin(), group_.end(), by_logit);
  };
  // top-p: the smallest prefix of the order whose mass reaches top_p. `cut` is the group where
  // it ends and `cut_keep` how many of that group's (sorted) members it keeps; every higher
  // group is kept whole.
  int cut = -1;
  size_t cut_keep = 0;
  double kept = 0;
  if (p.top_p < 1.0f) {
    for (int k = kBuckets - 1; k >= 0; --k) {
      if (bucket_count_[static_cast<size_t>(k)] == 0) continue;
      if (kept + bucket_mass_[static_cast<size_t>(k)] < p.top_p) {
        kept += bucket_mass_[static_cast<size_t>(k)];
        continue;
      }
      group(k);
      while (cut_keep < group_.size() && kept < p.top_p) kept += group_[cut_keep++].first;
      cut = k;
      break;
    }
    if (cut >= 0) {
      cut_group_ = group_;
      cut_group_.resize(cut_keep);
    }
  } else {
    for (int k = 0; k < kBuckets; ++k) kept += bucket_mass_[static_cast<size_t>(k)];
  }
  // The draw: the first token of the (kept) order whose cumulative mass exceeds u * kept.
  const double r = next_uniform() * kept;
  double acc = 0;
  int last_k = -1;  // the lowest kept group walked: its last member if r rounds up to the total
  for (int k = kBuckets - 1; k >= std::max(cut, 0); --k) {
    if (bucket_count_[static_cast<size_t>(k)] == 0) continue;
    const bool partial = k == cut;
    const double m = partial ? [&] {
      double s2 = 0;
      for (const auto& c : cut_group_) s2 += c.first;
      return s2;
    }()
                             : bucket_mass_[static_cast<size_t>(k)];
    if (partial ? cut_group_.empty() : false) continue;
    last_k = k;
    if (r >= acc + m) {
      acc += m;
      continue;
    }
    if (!partial) group(k);
    const auto& members = partial ? cut_group_ : group_;
    for (const auto& c : members) {
      acc += c.first;
      if (r < acc) return c.second;
    }
  }
  // r rounded up to the total: the last kept token.
  if (last_k == cut && cut >= 0) return cut_group_.back().second;
  if (last_k >= 0) {
    group(last_k);
    return group_.back().second;
  }
  return cand_.front().second;
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
