// Sampler: greedy, temperature, top-k, top-p, min-p, penalties and seeding, checked against
// the distributions they should produce.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <utility>

#include "engine/sampler.h"
#include "tests/sampling_rule.h"

using namespace tandem;

namespace {

std::vector<float> logits_of(std::initializer_list<float> l) { return std::vector<float>(l); }

// Empirical distribution of n draws.
std::map<int32_t, double> draw(const SamplingParams& p, const std::vector<float>& logits, int n,
                               uint64_t seed = 7) {
  Sampler s(p, seed);
  std::map<int32_t, double> freq;
  for (int i = 0; i < n; ++i) {
    std::vector<float> l = logits;
    freq[s.sample(l, {}, {})] += 1.0 / n;
  }
  return freq;
}

}  // namespace

TEST_CASE("temperature 0 is greedy, ties go to the lowest id", "[sampler]") {
  SamplingParams p;
  p.temperature = 0;
  Sampler s(p, 1);
  auto l = logits_of({0.1f, 2.0f, -1.0f, 2.0f});
  CHECK(s.sample(l, {}, {}) == 1);
}

TEST_CASE("argmax is the first index of the largest logit, NaNs never win", "[sampler]") {
  auto one_pass = [](const std::vector<float>& v) {
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i)
      if (v[i] > v[best]) best = i;
    return static_cast<int32_t>(best);
  };
  std::mt19937 rng(3);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (size_t n : {1, 7, 15, 16, 17, 31, 64, 100, 2048, 2053}) {
    for (int round = 0; round < 50; ++round) {
      std::vector<float> v(n);
      // Few distinct values: ties are common.
      for (auto& x : v) x = static_cast<float>(rng() % 7) - 3.0f;
      if (round % 5 == 1) v[rng() % n] = nan;
      if (round % 5 == 2) v[0] = nan;
      if (round % 5 == 3)
        for (auto& x : v) x = rng() % 2 ? nan : -inf;
      if (round % 5 == 4) v[rng() % n] = inf;
      INFO("n " << n << " round " << round);
      CHECK(argmax(v) == one_pass(v));
    }
  }
}

TEST_CASE("temperature 1 samples the softmax", "[sampler]") {
  SamplingParams p;
  const auto l = logits_of({0.0f, std::log(2.0f), std::log(3.0f), -INFINITY});
  const auto f = draw(p, l, 60000);
  CHECK(f.count(3) == 0);
  CHECK(f.at(0) == Approx(1.0 / 6).margin(0.01));
  CHECK(f.at(1) == Approx(2.0 / 6).margin(0.01));
  CHECK(f.at(2) == Approx(3.0 / 6).margin(0.01));
}

TEST_CASE("low temperature sharpens", "[sampler]") {
  SamplingParams p;
  p.temperature = 0.5f;
  const auto f = draw(p, logits_of({0.0f, std::log(2.0f)}), 40000);
  CHECK(f.at(1) == Approx(0.8).margin(0.01));  // 4:1 after squaring
}

TEST_CASE("top-k, top-p and min-p cut the tail", "[sampler]") {
  const auto l = logits_of({std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)});
  SamplingParams k;
  k.top_k = 2;
  auto f = draw(k, l, 40000);
  CHECK(f.size() == 2);
  CHECK(f.at(0) == Approx(0.625).margin(0.01));
  SamplingParams tp;
  tp.top_p = 0.7f;  // 0.5 + 0.3 reaches 0.7: keep two
  f = draw(tp, l, 40000);
  CHECK(f.size() == 2);
  tp.top_p = 0.85f;  // needs three
  CHECK(draw(tp, l, 20000).size() == 3);
  SamplingParams mp;
  mp.min_p = 0.35f;  // keeps p >= 0.175: tokens 0 and 1
  CHECK(draw(mp, l, 20000).size() == 2);
}

TEST_CASE("top-p over a large vocabulary widens past the first prefix", "[sampler]") {
  std::vector<float> l(2000, 0.0f);  // uniform: top_p 0.5 needs 1000 tokens
  SamplingParams p;
  p.top_p = 0.5f;
  const auto f = draw(p, l, 3000);
  CHECK(f.size() > 600);
  CHECK(f.rbegin()->first < 1001);  // ties sorted by id: only the first half survive
}

TEST_CASE("penalties", "[sampler]") {
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  Sampler s(p, 1);
  std::vector<int32_t> prompt = {0};
  auto l = logits_of({3.0f, 2.0f, -1.0f});
  CHECK(s.sample(l, prompt, {}) == 1);  // 3/2 = 1.5 < 2
  CHECK(l[0] == 1.5f);
  auto neg = logits_of({-1.0f, -1.5f});
  CHECK(s.sample(neg, prompt, {}) == 1);  // -1 * 2 = -2 < -1.5

  SamplingParams q;
  q.temperature = 0;
  q.presence_penalty = 0.5f;
  q.frequency_penalty = 0.25f;
  Sampler s2(q, 1);
  std::vector<int32_t> out = {0, 0, 1};
  auto m = logits_of({2.0f, 1.4f, 0.9f});
  s2.sample(m, {}, out);
  CHECK(m[0] == Approx(2.0f - 0.5f - 0.5f));
  CHECK(m[1] == Approx(1.4f - 0.5f - 0.25f));
  CHECK(m[2] == Approx(0.9f));
}

TEST_CASE("logit_bias is added before the penalties and makes the sampler not plain", "[sampler]") {
  SamplingParams p;
  p.temperature = 0;
  CHECK(Sampler(p, 1).plain());
  p.logit_bias = {{0, -100.0f}, {2, 1.5f}, {7, 100.0f}};  // 7: outside this row, skipped
  Sampler s(p, 1);
  CHECK_FALSE(s.plain());
  CHECK_THROWS(s.backend_row());
  auto l = logits_of({3.0f, 2.0f, 1.0f});
  CHECK(s.sample(l, {}, {}) == 2);  // 1 + 1.5 beats 2; token 0 is banned
  CHECK(l[0] == -97.0f);
  CHECK(l[2] == 2.5f);
  p.repetition_penalty = 2.0f;  // the bias comes first: (1 + 1.5) / 2 < 2
  Sampler r(p, 1);
  auto m = logits_of({3.0f, 2.0f, 1.0f});
  CHECK(r.sample(m, std::vector<int32_t>{2}, {}) == 1);
  CHECK(m[2] == 1.25f);
}

TEST_CASE("same seed, same draws; other seed, other draws", "[sampler]") {
  std::vector<float> l(100);
  for (size_t i = 0; i < l.size(); ++i) l[i] = std::sin(static_cast<float>(i));
  SamplingParams p;
  p.seed = 42;
  auto run = [&](const SamplingParams& sp) {
    Sampler s(sp, 0);
    std::vector<int32_t> out;
    for (int i = 0; i < 50; ++i) {
      auto c = l;
      out.push_back(s.sample(c, {}, {}));
    }
    return out;
  };
  CHECK(run(p) == run(p));
  SamplingParams p2 = p;
  p2.seed = 43;
  CHECK(run(p) != run(p2));
}

TEST_CASE("log_softmax and top_logprobs", "[sampler]") {
  const auto l = logits_of({1.0f, 2.0f, 3.0f});
  std::vector<float> lp(3);
  log_softmax(l, lp);
  double total = 0;
  for (float x : lp) total += std::exp(static_cast<double>(x));
  CHECK(total == Approx(1.0).epsilon(1e-6));
  const auto top = top_logprobs(l, 2);
  REQUIRE(top.size() == 2);
  CHECK(top[0].second == 2);
  CHECK(top[1].second == 1);
  CHECK(top[0].first == Approx(lp[2]));
}

TEST_CASE("the fast top-k floor and top-p prefixes draw what the plain rule draws", "[sampler]") {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  std::vector<float> logits(128256);
  for (float& l : logits) l = std::round(nd(rng) * 8.0f) / 8.0f;  // coarse: many ties
  for (size_t i = 0; i < logits.size(); i += 97)
    logits[i] = -std::numeric_limits<float>::infinity();
  struct Case {
    float temperature;
    int32_t top_k;
    float top_p, min_p;
  };
  for (const Case& c :
       {Case{0.8f, 50, 1.0f, 0.0f}, Case{1.0f, 7, 1.0f, 0.0f}, Case{0.8f, 0, 0.95f, 0.0f},
        Case{1.3f, 0, 0.5f, 0.0f}, Case{0.7f, 40, 0.9f, 0.0f}, Case{1.0f, 0, 0.9f, 0.02f},
        Case{0.3f, 500, 0.99f, 0.0f}}) {
    SamplingParams p;
    p.temperature = c.temperature;
    p.top_k = c.top_k;
    p.top_p = c.top_p;
    p.min_p = c.min_p;
    Sampler s(p, 1);
    const std::vector<float> flat(5000, 0.25f);  // one probability: every token tied
    for (const std::vector<float>* l : {&std::as_const(logits), &flat})
      for (double u : {0.0, 0.001, 0.1, 0.37, 0.5, 0.77, 0.93, 0.999999, 0.9999999999}) {
        CAPTURE(c.temperature, c.top_k, c.top_p, c.min_p, u, l->size());
        std::vector<float> row = *l;
        CHECK(s.draw(row, u) == test::plain_sampling_rule(*l, p, u));
      }
  }
}
